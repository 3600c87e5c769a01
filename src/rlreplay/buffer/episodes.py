"""Runs of steps and episode queries: sequences, whole episodes, per-id lookups.

A part of :class:`rlreplay.ReplayBuffer` (see :mod:`rlreplay.buffer.host`): ``sample_sequences``
and ``get_sequences`` (R2D2/ALF-style runs), ``sample_episodes`` and ``get_episode``, and the
queries by id (``episode_begin``, ``steps_to_episode_end``, ``get_field``, ``sampleable_ids``).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, overload

import numpy as np

from rlreplay.assemble.sequences import gather_runs, run_lengths
from rlreplay.batch import Batch
from rlreplay.buffer.budget import check_result
from rlreplay.buffer.fifo import check_timeout, flag
from rlreplay.buffer.host import Array, BufferHost
from rlreplay.buffer.sampling import rollback_point
from rlreplay.episodes.index import COUNT, HEAD
from rlreplay.errors import ConfigError, EmptyBufferError, FieldError, InvalidIdError
from rlreplay.io.frameworks import TensorBatch, choose_output
from rlreplay.sampling.uniform import draw_uniform
from rlreplay.spec.arguments import shown
from rlreplay.spec.schema import positive_int
from rlreplay.transforms import Transform, apply_transform

__all__ = ["EpisodesMixin", "StoredRange"]


class StoredRange(NamedTuple):
    """Per env ``e``, the stored steps are ``first[e] .. end[e] - 1`` (absolute step numbers).

    Steps count from 0 per env and never restart (not after :meth:`~rlreplay.ReplayBuffer.clear`
    or ``dequeue`` either); the id of step ``t`` of env ``e`` is ``t * num_envs + e``. An env
    stores nothing when ``first[e] == end[e]``; ``end[e]`` is the number of steps ever added to
    it, i.e. the step its next :meth:`~rlreplay.ReplayBuffer.add` writes.

    Attributes:
        first: int64 ``(num_envs,)``: each env's oldest stored step.
        end: int64 ``(num_envs,)``: one past each env's newest stored step.
    """

    first: Array
    end: Array


class EpisodesMixin(BufferHost):
    """Sequences, episodes and per-id queries of :class:`rlreplay.ReplayBuffer`."""

    @overload
    def sample_sequences(
        self, batch_size: int, length: int, *, within_episode: bool = ..., pad: bool = ...,
        balance_envs: bool = ..., transform: Transform | None = ..., timeout: float | None = ...,
        as_: Literal["numpy"] | None = ..., device: Any = ...,
    ) -> Batch: ...  # fmt: skip
    @overload
    def sample_sequences(
        self, batch_size: int, length: int, *, within_episode: bool = ..., pad: bool = ...,
        balance_envs: bool = ..., transform: Transform | None = ..., timeout: float | None = ...,
        as_: Literal["torch", "jax"], device: Any = ...,
    ) -> TensorBatch: ...  # fmt: skip
    def sample_sequences(
        self,
        batch_size: int,
        length: int,
        *,
        within_episode: bool = True,
        pad: bool = True,
        balance_envs: bool = False,
        transform: Transform | None = None,
        timeout: float | None = None,
        as_: str | None = None,
        device: Any = None,
    ) -> Batch | TensorBatch:
        """Draw ``batch_size`` sequences of ``length`` consecutive stored steps (R2D2, ALF).

        Start steps are drawn uniformly over stored steps (by priority in a prioritized
        buffer). Per-step fields are the raw stored ones, shaped ``(B, L, ...)`` (``obs`` is a
        single frame even with frame stacking), plus each step's ``next_<obs>``; ``mask``
        ``(B, L)`` marks real steps and is always a prefix. With ``within_episode`` a sequence
        stops at its episode's last step; otherwise it runs on into the next episode (the
        per-step ``terminated``/``truncated`` flags show where). Steps past the newest stored
        step of the env are masked; a sequence never crosses the write cursor or another env.

        Args:
            batch_size: Number of sequences ``B``.
            length: Steps per sequence ``L`` (longer than ``env_capacity`` only pads more).
            within_episode: Stop sequences at episode ends.
            pad: If False, only starts whose ``L`` steps are all real are drawn (found by
                rejection; a buffer where such starts are very rare falls back to one scan).
            balance_envs: Pick each sequence's env uniformly among the envs that have a
                start, then its start uniformly within that env (ALF ``get_batch``), instead
                of uniformly over all stored steps. Rows come ordered by env.
            transform: A function ``Batch -> Batch`` applied to the result (the buffer's
                ``transforms`` are for transitions and are not applied here). If it raises,
                the draw is rolled back (as in :meth:`~rlreplay.ReplayBuffer.sample`).
            timeout: The most seconds to wait for the ``rate_limiter`` (one sample per
                sequence; ``None`` or ``inf``: for ever).
            as_: ``"numpy"``, ``"torch"`` or ``"jax"`` (default: the buffer's; see
                :meth:`~rlreplay.ReplayBuffer.sample`).
            device: Where torch/JAX arrays go (default: see :meth:`~rlreplay.ReplayBuffer.sample`).

        Returns:
            A :class:`Batch` with per-step fields, ``next_<obs>``, ``next_known``, ``mask``,
            ``ids`` (first steps, ``(B,)``), ``env_ids`` and ``weights`` (a
            :class:`~rlreplay.io.TensorBatch` of them for torch/JAX).

        Raises:
            EmptyBufferError: No start can be drawn.
            ReplayTimeout: The ``rate_limiter`` did not allow ``batch_size`` samples in time.
            ConfigError: ``batch_size`` or ``length`` not a positive int, ``B * L`` steps
                above the size budget (:func:`rlreplay.spec.size_budget`), a bad ``timeout``
                or flag, a ``transform`` that is not callable, an unknown ``as_`` or an
                unusable ``device``; nothing is drawn then.
        """
        batch_size = positive_int("batch_size", batch_size)
        length = positive_int("length", length)
        within_episode, pad = flag("within_episode", within_episode), flag("pad", pad)
        balance_envs = flag("balance_envs", balance_envs)
        if timeout is not None:
            timeout = check_timeout(timeout)
        # (B, L) steps, and the draw's scratch per sequence
        check_result(self, "batch_size, length", (batch_size, length),
                     batch_size * (length + 1), "sample_sequences", "step")  # fmt: skip
        if transform is not None and not callable(transform):
            raise ConfigError(f"transform: expected a callable Batch -> Batch, got {transform!r}")
        output = self._output
        if as_ is not None or device is not None:
            output = choose_output(output, as_, device)
        limiter = self._limiter
        if limiter is not None:  # as in sample: waits without the lock, refunded on errors
            limiter.await_sample(batch_size, timeout)
        try:
            with self._lock:
                self._check_open()
                undo = None if transform is None else rollback_point(self)
                try:
                    batch = self._sequences(
                        batch_size, length, within_episode, pad, balance_envs, transform
                    )
                except BaseException:
                    if undo is not None:
                        undo()  # a transform that raised: as if nothing was drawn
                    raise
        except BaseException:
            if limiter is not None:
                limiter.cancel_sample(batch_size)
            raise
        return batch if output is None else output(batch)  # converted without the lock

    def _sequences(
        self,
        batch_size: int,
        length: int,
        within_episode: bool,
        pad: bool,
        balance_envs: bool,
        transform: Transform | None,
    ) -> Batch:
        """Draw and gather the sequences, then ``transform`` (under the lock)."""
        drawn = self._sampler.draw_starts(
            self._index, batch_size, self._rng, length=length,
            within_episode=within_episode, pad=pad, balance_envs=balance_envs,
        )  # fmt: skip
        env_ids, t0, extra = drawn.env_ids, drawn.t, drawn.extra()
        n_real = run_lengths(self._index, env_ids, t0, length, within_episode)
        data = gather_runs(self._cols, self._index, env_ids, t0, n_real, length)
        data["ids"] = self._index.ids(env_ids, t0)
        data["env_ids"] = env_ids
        data.update(extra)
        batch = Batch(data)
        if transform is not None:
            self._bind(transform)
            batch = apply_transform(transform, batch)
        return batch

    def get_sequences(self, ids: Any, length: int, *, within_episode: bool = True) -> Batch:
        """The sequences of ``length`` steps starting at the stored steps ``ids``.

        The deterministic counterpart of :meth:`sample_sequences` (same fields and masking).

        Raises:
            InvalidIdError: An id never issued or overwritten.
            ConfigError: ``length`` not a positive int, or ``len(ids) * length`` steps above
                the size budget.
        """
        length = positive_int("length", length)
        within_episode = flag("within_episode", within_episode)
        with self._lock:
            env_ids, t0, _ = self._stored_steps(ids)
            if env_ids.ndim != 1:
                raise InvalidIdError(f"ids: expected a 1-D array, got shape {env_ids.shape}")
            rows = env_ids.shape[0] * length
            check_result(self, "length", length, rows, "get_sequences", "step")
            n_real = run_lengths(self._index, env_ids, t0, length, within_episode)
            data = gather_runs(self._cols, self._index, env_ids, t0, n_real, length)
            data["ids"] = self._index.ids(env_ids, t0)
            data["env_ids"] = env_ids
            return Batch(data)

    @overload
    def sample_episodes(
        self, n: int, *, as_: Literal["numpy"] | None = ..., device: Any = ...
    ) -> Batch: ...
    @overload
    def sample_episodes(
        self, n: int, *, as_: Literal["torch", "jax"], device: Any = ...
    ) -> TensorBatch: ...
    def sample_episodes(
        self, n: int, *, as_: str | None = None, device: Any = None
    ) -> Batch | TensorBatch:
        """Draw ``n`` complete episodes uniformly (with replacement) among those fully stored.

        Args:
            n: Number of episodes.
            as_: ``"numpy"``, ``"torch"`` or ``"jax"`` (default: the buffer's; see
                :meth:`~rlreplay.ReplayBuffer.sample`).
            device: Where torch/JAX arrays go (default: see :meth:`~rlreplay.ReplayBuffer.sample`).

        Returns:
            A :class:`Batch` of per-step fields shaped ``(n, T_max, ...)`` with ``mask``,
            ``lengths``, ``ids`` (first steps), ``env_ids`` and ``next_<obs>`` (a
            :class:`~rlreplay.io.TensorBatch` of them for torch/JAX).

        Raises:
            EmptyBufferError: No complete episode is stored.
            ConfigError: ``n`` not a positive int, or ``n`` episodes above the size budget
                (:func:`rlreplay.spec.size_budget`: checked with ``n`` rings of an env when
                those fit, else with the drawn episodes' longest, the draw then rolled back),
                an unknown ``as_`` or an unusable ``device``.
        """
        n = positive_int("n", n)
        check_result(self, "n", n, n, "sample_episodes", "step")  # the draw's own arrays
        output = self._output
        if as_ is not None or device is not None:
            output = choose_output(output, as_, device)
        with self._lock:
            self._check_open()
            first, sizes = self._index.complete_episode_records()
            if not sizes.any():
                raise EmptyBufferError("sample_episodes: no complete episode is stored")
            undo = None
            try:  # n episodes as long as an env's ring fit: nothing to check after the draw
                check_result(self, "n", n, n * self._env_capacity, "sample_episodes", "step")
            except ConfigError:
                undo = rollback_point(self)  # the draw's longest episode decides
            env_ids, fid = draw_uniform(first, sizes, n, self._rng)
            end = self._index.final_owner[
                env_ids * self._index.finals_capacity + fid % self._index.finals_capacity
            ]
            start = self._index.ep_start[self._index.slots(env_ids, end)]
            lengths = end - start + 1
            if undo is not None:
                try:
                    check_result(self, "n", n, n * int(lengths.max()), "sample_episodes", "step")
                except ConfigError:
                    undo()  # refused: the generator as if nothing was drawn
                    raise
            data = gather_runs(self._cols, self._index, env_ids, start, lengths, int(lengths.max()))
            data.update(ids=self._index.ids(env_ids, start), env_ids=env_ids, lengths=lengths)
        return Batch(data) if output is None else output(data)

    def get_episode(self, id: int) -> Batch:
        """The stored steps of the episode holding step ``id`` (leading axis: its steps).

        A running episode gives its steps so far; an episode cut by overwriting gives its
        stored part. Fields are raw per-step values plus ``next_<obs>``, ``next_known``,
        ``ids`` and ``env_ids`` per step.

        Raises:
            InvalidIdError: ``id`` never issued or overwritten, or not one int.
        """
        if type(id) is not int and (
            isinstance(id, bool | np.timedelta64) or not isinstance(id, int | np.integer)
        ):
            raise InvalidIdError(f"id: expected one int id, got {type(id).__name__} {shown(id)}")
        with self._lock:
            env_ids, _, slots = self._stored_steps(np.array([id]))
            start = np.maximum(self._index.ep_start[slots], self._index.env[env_ids, HEAD])
            end = self._index.ep_end[slots]
            last = np.where(end >= 0, end, self._index.env[env_ids, COUNT] - 1)
            lengths = last - start + 1
            data = gather_runs(self._cols, self._index, env_ids, start, lengths, int(lengths[0]))
            data.pop("mask")
            out = {k: v[0] for k, v in data.items()}
            steps = start[0] + np.arange(int(lengths[0]))
            out["ids"] = self._index.ids(np.full_like(steps, env_ids[0]), steps)
            out["env_ids"] = np.full_like(steps, env_ids[0])
            return Batch(out)

    def stored_range(self) -> StoredRange:
        """Each env's stored steps ``first[e] .. end[e] - 1`` (copies; see :class:`StoredRange`).

        Returns:
            ``StoredRange(first, end)``, int64 arrays of shape ``(num_envs,)``.

        Raises:
            ReplayClosed: The buffer is closed.

        Example:
            >>> import numpy as np, rlreplay as rr
            >>> buf = rr.ReplayBuffer(4, {"obs": rr.Field((), np.float32)})  # 4 steps kept
            >>> for t in range(6):
            ...     _ = buf.add(obs=t, reward=0.0, terminated=False, truncated=False)
            >>> r = buf.stored_range()
            >>> r.first.tolist(), r.end.tolist()  # steps 0 and 1 were overwritten
            ([2], [6])
        """
        with self._lock:
            self._check_open()
            env = self._index.env
            return StoredRange(env[:, HEAD].copy(), env[:, COUNT].copy())

    def _stored_steps(self, ids: Any) -> tuple[Array, Array, Array]:
        """``(env_ids, t, slots)`` of stored steps; overwritten or never-issued ids raise."""
        self._check_open()
        env_ids, t, stale = self._index.split_ids(ids)
        if stale.any():
            raise InvalidIdError(
                f"ids: {np.asarray(ids)[stale][:5].tolist()} were overwritten (or cleared); "
                "their data is gone"
            )
        return env_ids, t, self._index.slots(env_ids, t)

    def episode_begin(self, ids: Any) -> Array:
        """Ids of the first steps of the episodes holding ``ids`` (same shape).

        The returned ids may be stale (an episode's first step can be overwritten while later
        steps of it are still stored): they are ids, not slots.

        Raises:
            InvalidIdError: A query id that was never issued or is itself overwritten.
        """
        with self._lock:
            env_ids, _, slots = self._stored_steps(ids)
            return self._index.ids(env_ids, self._index.ep_start[slots])

    def steps_to_episode_end(self, ids: Any) -> Array:
        """How many steps follow each id in its episode (0 at the last step, -1 if unfinished).

        Raises:
            InvalidIdError: An id that was never issued or is overwritten.
        """
        with self._lock:
            _, t, slots = self._stored_steps(ids)
            end = self._index.ep_end[slots]
            out: Array = np.where(end >= 0, end - t, -1)
            return out

    def get_field(self, name: str, ids: Any) -> Array:
        """The stored value of field ``name`` at each step in ``ids`` (raw: no stacking).

        Raises:
            FieldError: ``name`` is not a stored field.
            InvalidIdError: An id that was never issued or is overwritten.
        """
        with self._lock:
            if not isinstance(name, str) or name not in self.schema.fields:
                raise FieldError(
                    f"get_field: unknown field {shown(name)}; stored: {self.schema.names}"
                )
            _, _, slots = self._stored_steps(ids)
            out: Array = self._cols.steps[name][slots]
            return out

    def sampleable_ids(self) -> Array:
        """Ids of every sampleable transition, env by env in time order."""
        with self._lock:
            self._check_open()
            env_ids, t = self._index.sampleable_steps()
            return self._index.ids(env_ids, t)
