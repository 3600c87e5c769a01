"""Sampling of a replay buffer: ``sample``, ``get_transitions`` and the assembly step.

A part of :class:`rlreplay.ReplayBuffer` (see :mod:`rlreplay.buffer.host`).
:meth:`SamplingMixin.sample` waits on the rate limiter without the lock, then, under it, the
buffer's sampler (:mod:`rlreplay.sampling`) chooses the transitions and the assembler
(:mod:`rlreplay.assemble`) builds their arrays: in one kernel (:mod:`rlreplay.sampling.onecall`)
where the sampler's ``kernel`` names one, else through ``sampler.draw`` then ``_batch``.
Conversion to torch/JAX happens after the lock is released.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, cast, overload

import numpy as np

from rlreplay.assemble.transitions import assemble_transitions
from rlreplay.batch import Batch
from rlreplay.buffer.budget import check_result
from rlreplay.buffer.fifo import check_timeout
from rlreplay.buffer.host import Array, BufferHost
from rlreplay.errors import ConfigError, InvalidIdError
from rlreplay.io.frameworks import TensorBatch, choose_output
from rlreplay.sampling.onecall import sample_batch
from rlreplay.sampling.uniform import DrawOptions, draw_options
from rlreplay.spec import arguments
from rlreplay.spec.schema import positive_int
from rlreplay.transforms import BindableTransform, Transform, apply_transform

__all__ = ["SamplingMixin", "rollback_point"]


class SamplingMixin(BufferHost):
    """``sample``, ``get_transitions`` and the draw/assemble steps of a replay buffer."""

    @overload
    def sample(
        self, batch_size: int, *, transform: Transform | None = ...,
        recent_ratio: float | None = ..., recent_steps: int | None = ...,
        replacement: bool | None = ..., timeout: float | None = ...,
        out: Batch | None = ..., as_: Literal["numpy"] | None = ..., device: Any = ...,
    ) -> Batch: ...  # fmt: skip
    @overload
    def sample(
        self, batch_size: int, *, transform: Transform | None = ...,
        recent_ratio: float | None = ..., recent_steps: int | None = ...,
        replacement: bool | None = ..., timeout: float | None = ...,
        out: None = ..., as_: Literal["torch", "jax"], device: Any = ...,
    ) -> TensorBatch: ...  # fmt: skip
    def sample(
        self,
        batch_size: int,
        *,
        transform: Transform | None = None,
        recent_ratio: float | None = None,
        recent_steps: int | None = None,
        replacement: bool | None = None,
        timeout: float | None = None,
        out: Batch | None = None,
        as_: str | None = None,
        device: Any = None,
    ) -> Batch | TensorBatch:
        """Draw ``batch_size`` transitions uniformly, with replacement, from the sampleable ones.

        Args:
            batch_size: Number of transitions; the batch must fit the size budget
                (:func:`rlreplay.spec.size_budget`, the machine's memory).
            transform: A function ``Batch -> Batch`` applied after the buffer's ``transforms``.
                If a transform (this one or the buffer's) raises, its exception passes
                through and the draw is rolled back: the generator (and a prioritized
                buffer's ``beta`` schedule) is as before the call.
            recent_ratio: Overrides the constructor's ``recent_ratio`` for this call.
            recent_steps: Overrides the constructor's ``recent_steps`` for this call.
            replacement: Overrides the constructor's ``replacement`` for this call.
            timeout: The most seconds to wait for the ``rate_limiter`` (``None`` or ``inf``:
                for ever; checked with or without a limiter, see
                :func:`rlreplay.buffer.check_timeout`).
            out: A batch of ``batch_size`` from an earlier ``sample`` of this buffer, to be
                overwritten in place and returned (no allocation). Without it every call
                returns fresh arrays that share nothing with earlier batches. NumPy only.
            as_: ``"numpy"``, ``"torch"`` or ``"jax"`` (default: the constructor's ``as_``).
            device: Where torch/JAX arrays go (default: the constructor's ``device`` if ``as_``
                is the constructor's); converted after the buffer's lock is released.

        Returns:
            A :class:`Batch` with every declared field, ``reward``, ``next_<obs>``,
            ``terminated``, ``truncated``, ``discount``, ``steps``, ``ids``, ``env_ids`` and
            ``weights`` (ones); with ``as_="torch"``/``"jax"`` a
            :class:`~rlreplay.io.TensorBatch` of the same keys.

        Raises:
            EmptyBufferError: Nothing is sampleable yet.
            ReplayTimeout: The ``rate_limiter`` did not allow ``batch_size`` samples in time.
            ReplayClosed: The buffer is (or got) closed.
            ConfigError: ``batch_size`` not a positive int or its batch above the size
                budget, a bad ``timeout`` or option, a ``transform`` that is not callable, an
                unknown ``as_``, an unusable ``device``, or ``out`` with torch/JAX.

        A call refused with an rlreplay error draws nothing and changes nothing.
        """
        batch_size = positive_int("batch_size", batch_size)
        rows = self.__dict__.get("_row_bytes")  # (cached: an int batch costs two operations)
        if rows is None or batch_size * rows[0] > arguments.SIZE_BUDGET:
            check_result(self, "batch_size", batch_size, batch_size, "sample")
        if timeout is not None:
            timeout = check_timeout(timeout)
        output = self._output
        if as_ is not None or device is not None:  # (the NumPy default: two identity tests)
            output = choose_output(output, as_, device)
        if output is not None and out is not None:
            raise ConfigError(
                f"out: refills a NumPy batch, so it needs as_='numpy'; got as_={output.as_!r} "
                "(drop out=, or pass as_='numpy')"
            )
        if transform is not None and not callable(transform):
            raise ConfigError(f"transform: expected a callable Batch -> Batch, got {transform!r}")
        opts = self.draw_options
        if recent_ratio is not None or recent_steps is not None or replacement is not None:
            opts = draw_options(
                opts.recent_ratio if recent_ratio is None else recent_ratio,
                opts.recent_steps if recent_steps is None else recent_steps,
                opts.replacement if replacement is None else replacement,
            )
        limiter = self._limiter
        if limiter is not None:  # waits without the lock: writers need it to pay for samples
            limiter.await_sample(batch_size, timeout)
        try:
            with self._lock:
                self._check_open()
                if transform is not None or self.transforms:
                    batch = self._draw_transformed(batch_size, opts, out, transform)
                else:
                    batch = self._draw(batch_size, opts, out)
        except BaseException:
            if limiter is not None:
                limiter.cancel_sample(batch_size)  # nothing was drawn: nothing to pay for
            raise
        return batch if output is None else output(batch)

    def _draw(self, batch_size: int, opts: DrawOptions, out: Batch | None) -> Batch:
        """Draw and assemble a batch (under the lock)."""
        if self._shared is not None:  # redraws a batch a writer overwrote meanwhile
            return self._shared.sample(self, batch_size, opts)  # type: ignore[no-any-return]
        return sample_batch(self, batch_size, opts, out, SamplingMixin)

    def _draw_transformed(
        self, batch_size: int, opts: DrawOptions, out: Batch | None, transform: Transform | None
    ) -> Batch:
        """:meth:`_draw`, then the transforms; a transform that raises rolls the draw back.

        The generator's state (and a prioritized sampler's ``beta`` step) is taken before the
        draw and put back if anything raises: the next call draws what it would have drawn
        had this one not been made. Only calls with a transform pay for it (about 1.3 µs).
        """
        undo = rollback_point(self)
        try:  # (_transformed binds the call's transform: a bind that fails is rolled back too)
            return self._transformed(self._draw(batch_size, opts, out), transform)
        except BaseException:
            undo()
            raise

    def get_transitions(self, ids: Any) -> Batch:
        """Assemble the transitions with the given ids (each must be sampleable now).

        Args:
            ids: Transition ids, as returned by :meth:`add` or found in ``batch.ids``.

        Returns:
            A :class:`Batch` like :meth:`sample`'s, in the order of ``ids``.

        Raises:
            InvalidIdError: An id never issued, overwritten, or not sampleable (yet).
        """
        with self._lock:
            self._check_open()
            env_ids, t, _ = self._index.split_ids(ids)
            if env_ids.ndim != 1:
                raise InvalidIdError(f"ids: expected a 1-D array, got shape {env_ids.shape}")
            n = env_ids.shape[0]
            check_result(self, "ids", n, n, "get_transitions")  # (a row is bigger than an id)
            bad = ~self._index.sampleable(env_ids, t)
            if bad.any():
                raise InvalidIdError(
                    f"ids: {np.asarray(ids)[bad][:5].tolist()} are not sampleable (overwritten, "
                    "or their window or frame stack is not complete)"
                )
            return self._batch(env_ids, t, {"weights": np.ones(t.shape[0], np.float32)})

    def _bind(self, fn: Transform) -> None:
        if not callable(fn):
            raise ConfigError(f"transforms: expected callables Batch -> Batch, got {fn!r}")
        # isinstance(fn, BindableTransform), as the runtime protocol check decides it (a
        # callable with a `bind`), without its ~5 µs per call
        if hasattr(fn, "bind"):
            cast(BindableTransform, fn).bind(self)

    def _transformed(self, batch: Batch, transform: Transform | None) -> Batch:
        for fn in self.transforms:
            batch = apply_transform(fn, batch)
        if transform is not None:
            self._bind(transform)
            batch = apply_transform(transform, batch)
        return batch

    def _batch(self, env_ids: Array, t: Array, extra: dict[str, Array]) -> Batch:
        data = assemble_transitions(
            self._cols,
            self._index,
            env_ids,
            t,
            n_step=self.n_step,
            gamma=self.gamma,
            frame_stack=self.frame_stack,
            zero_pad=self.stack_pad == "zero",
            next_fields=self.next_fields,
        )
        data["env_ids"] = env_ids
        data.update(extra)
        return Batch(data)


def rollback_point(buf: BufferHost) -> Callable[[], None]:
    """A function that puts ``buf``'s generator, and its sampler's draw count (a prioritized
    sampler's ``beta`` step), back as they are now: the undo of a draw whose call failed.

    Costs about 0.7 µs (the generator's state, a dict), and as much again to undo.
    """
    bit_generator = buf._rng.bit_generator
    state = bit_generator.state
    sampler = buf._sampler
    step = getattr(sampler, "beta_step", None)  # the prioritized schedule's one counter

    def undo() -> None:
        bit_generator.state = state
        if step is not None:
            sampler.beta_step = step  # type: ignore[attr-defined]

    return undo
