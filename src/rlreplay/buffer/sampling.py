"""Drawing transitions: the sampler's draw, then the assembler, then the transforms.

:class:`Draws`, a part of :class:`rlreplay.ReplayBuffer`, runs under the buffer's lock: the
buffer's sampler (:mod:`rlreplay.sampling`) chooses the transitions and the assembler
(:func:`rlreplay.assemble.transitions.assemble_transitions`: n-step windows, discounts, frame
stacks, ``next_<obs>``) builds their arrays: in one Numba kernel
(:mod:`rlreplay.sampling.onecall`) where the sampler's ``kernel`` names one, else through
``sampler.draw`` then :meth:`Draws.batch`. A failing transform rolls the draw back
(:func:`rollback_point`). ``ReplayBuffer.sample`` checks the call's arguments, waits for the
rate limiter and converts to torch/JAX outside the lock.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from rlreplay.assemble.transitions import assemble_transitions
from rlreplay.batch import Batch
from rlreplay.buffer.budget import ResultBudget
from rlreplay.buffer.sync import Sync
from rlreplay.episodes.index import EpisodeIndex
from rlreplay.errors import ConfigError, InvalidIdError
from rlreplay.sampling.base import Sampler
from rlreplay.sampling.onecall import FastSampler, sample_batch
from rlreplay.sampling.uniform import DrawOptions
from rlreplay.storage import Columns
from rlreplay.transforms import BindableTransform, Transform, apply_transform

__all__ = ["Draws", "binder", "rollback_point"]

Array = np.ndarray[Any, Any]


class Draws:
    """Draws and assembles transition batches of one buffer (see the module docstring).

    The one-call kernels' plans are cached here (:attr:`fast_uniform`, :attr:`fast_prio`).
    """

    def __init__(
        self,
        cols: Columns,
        index: EpisodeIndex,
        sampler: Sampler,
        rng: np.random.Generator,
        sync: Sync,
        budget: ResultBudget,
        bind: Callable[[Transform], None],
        *,
        n_step: int,
        gamma: float,
        frame_stack: int,
        stack_pad: str,
        next_fields: tuple[str, ...],
    ) -> None:
        self.cols = cols
        self.index = index
        self.sampler = sampler
        self.rng = rng
        self.sync = sync
        self.budget = budget
        self.bind = bind  # binds a bindable transform to the buffer
        self.n_step = n_step
        self.gamma = gamma
        self.frame_stack = frame_stack
        self.stack_pad = stack_pad
        self.next_fields = next_fields
        self.transforms: tuple[Transform, ...] = ()
        self.fast_uniform: FastSampler | None = None
        self.fast_prio: FastSampler | None = None

    def draw(self, batch_size: int, opts: DrawOptions, out: Batch | None) -> Batch:
        """Draw and assemble a batch (under the lock)."""
        shared = self.sync.shared
        if shared is not None:  # redraws a batch a writer overwrote meanwhile
            return shared.sample(self, batch_size, opts)  # type: ignore[no-any-return]
        return sample_batch(self, batch_size, opts, out, Draws)

    def draw_transformed(
        self, batch_size: int, opts: DrawOptions, out: Batch | None, transform: Transform | None
    ) -> Batch:
        """:meth:`draw`, then the transforms; a transform that raises rolls the draw back.

        The generator's state (and a prioritized sampler's ``beta`` step) is taken before the
        draw and put back if anything raises: the next call draws what it would have drawn
        had this one not been made. Only calls with a transform pay for it (about 1.3 µs).
        """
        undo = rollback_point(self.rng, self.sampler)
        try:  # (transformed binds the call's transform: a bind that fails is rolled back too)
            return self.transformed(self.draw(batch_size, opts, out), transform)
        except BaseException:
            undo()
            raise

    def get_transitions(self, ids: Any, *, stack_layout: str = "first") -> Batch:
        """Assemble the transitions with the given ids (each must be sampleable now).

        Args:
            ids: Transition ids, as returned by :meth:`add` or found in ``batch.ids``.
            stack_layout: Where the stack axis of stacked observations (``obs`` and
                ``next_obs`` with ``frame_stack > 1``) goes: ``"first"``, ``(B, frame_stack,
                *frame)`` as :meth:`sample`'s; or ``"last"``, ``(B, *frame, frame_stack)``,
                C-contiguous (the frames of one pixel side by side, as ReAgent's states):
                the same values, written in that layout directly, which is cheaper than a
                contiguous copy of the transposed ``"first"`` stacks.

        Returns:
            A :class:`Batch` like :meth:`sample`'s, in the order of ``ids``.

        Raises:
            InvalidIdError: An id never issued, overwritten, or not sampleable (yet).
            ConfigError: ``stack_layout`` is neither ``"first"`` nor ``"last"``.
        """
        if stack_layout not in ("first", "last"):
            raise ConfigError(f"stack_layout: expected 'first' or 'last', got {stack_layout!r}")
        with self.sync.lock:
            self.sync.check_open()
            index = self.index
            env_ids, t, _ = index.split_ids(ids)
            if env_ids.ndim != 1:
                raise InvalidIdError(f"ids: expected a 1-D array, got shape {env_ids.shape}")
            n = env_ids.shape[0]
            self.budget.check("ids", n, n, "get_transitions")  # (a row is bigger than an id)
            bad = ~index.sampleable(env_ids, t)
            if bad.any():
                raise InvalidIdError(
                    f"ids: {np.asarray(ids)[bad][:5].tolist()} are not sampleable (overwritten, "
                    "or their window or frame stack is not complete)"
                )
            ones = {"weights": np.ones(t.shape[0], np.float32)}
            return self.batch(env_ids, t, ones, stack_last=stack_layout == "last")

    def transformed(self, batch: Batch, transform: Transform | None) -> Batch:
        """``batch`` through the buffer's transforms, then the call's ``transform``."""
        for fn in self.transforms:
            batch = apply_transform(fn, batch)
        if transform is not None:
            self.bind(transform)
            batch = apply_transform(transform, batch)
        return batch

    def batch(
        self, env_ids: Array, t: Array, extra: dict[str, Array], *, stack_last: bool = False
    ) -> Batch:
        """The assembled transitions at steps ``(env_ids, t)``, with the draw's ``extra``
        (``stack_last``: frame stacks laid out stack-last, see :meth:`get_transitions`)."""
        data = assemble_transitions(
            self.cols,
            self.index,
            env_ids,
            t,
            n_step=self.n_step,
            gamma=self.gamma,
            frame_stack=self.frame_stack,
            zero_pad=self.stack_pad == "zero",
            next_fields=self.next_fields,
            stack_last=stack_last,
        )
        data["env_ids"] = env_ids
        data.update(extra)
        return Batch(data)


def binder(buffer: object) -> Callable[[Transform], None]:
    """A function that checks a transform and binds it to ``buffer`` if it is bindable
    (:class:`~rlreplay.transforms.BindableTransform`); it holds ``buffer`` weakly, so the
    parts that keep it do not keep their buffer alive."""
    owner = weakref.ref(buffer)

    def bind(fn: Transform) -> None:
        if not callable(fn):
            raise ConfigError(f"transforms: expected callables Batch -> Batch, got {fn!r}")
        # isinstance(fn, BindableTransform), as the runtime protocol check decides it (a
        # callable with a `bind`), without its ~5 µs per call
        if hasattr(fn, "bind"):
            cast(BindableTransform, fn).bind(owner())  # type: ignore[arg-type]

    return bind


def rollback_point(rng: np.random.Generator, sampler: Sampler) -> Callable[[], None]:
    """A function that puts the generator ``rng``, and ``sampler``'s draw count (a prioritized
    sampler's ``beta`` step), back as they are now: the undo of a draw whose call failed.

    Costs about 0.7 µs (the generator's state, a dict), and as much again to undo.
    """
    bit_generator = rng.bit_generator
    state = bit_generator.state
    step = getattr(sampler, "beta_step", None)  # the prioritized schedule's one counter

    def undo() -> None:
        bit_generator.state = state
        if step is not None:
            sampler.beta_step = step  # type: ignore[attr-defined]

    return undo
