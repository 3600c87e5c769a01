"""Runs of steps and episode queries: sequences, whole episodes, per-id lookups.

:class:`Queries`, a part of :class:`rlreplay.ReplayBuffer`: ``sample_sequences`` and
``get_sequences`` (R2D2/ALF-style runs), ``sample_episodes`` and ``get_episode``, and the
queries by id (``episode_begin``, ``steps_to_episode_end``, ``get_field``, ``sampleable_ids``).
It reads the episode index (which steps, episodes and ids are stored) and the columns through
the run assembler (:mod:`rlreplay.assemble.sequences`); sequence starts come from the
buffer's sampler (``draw_starts``: uniform, or by priority).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from rlreplay.assemble.sequences import gather_runs, run_lengths
from rlreplay.batch import Batch
from rlreplay.buffer.budget import ResultBudget
from rlreplay.buffer.pacing import Pacing
from rlreplay.buffer.sampling import rollback_point
from rlreplay.buffer.sync import Sync, check_timeout, flag
from rlreplay.episodes.index import COUNT, HEAD, EpisodeIndex
from rlreplay.errors import ConfigError, EmptyBufferError, FieldError, InvalidIdError
from rlreplay.io.frameworks import Output, TensorBatch, choose_output
from rlreplay.sampling.base import Sampler
from rlreplay.sampling.uniform import draw_uniform
from rlreplay.spec.arguments import shown
from rlreplay.spec.schema import Schema, positive_int
from rlreplay.storage import Columns
from rlreplay.transforms import Transform, apply_transform

__all__ = ["Queries", "StoredRange"]

Array = np.ndarray[Any, Any]


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


class Queries:
    """Sequences, episodes and per-id queries of one buffer (see the module docstring)."""

    def __init__(
        self,
        schema: Schema,
        cols: Columns,
        index: EpisodeIndex,
        sampler: Sampler,
        rng: np.random.Generator,
        sync: Sync,
        pacing: Pacing,
        budget: ResultBudget,
        bind: Callable[[Transform], None],
        output: Output | None,
    ) -> None:
        self.schema = schema
        self.cols = cols
        self.index = index
        self.sampler = sampler
        self.rng = rng
        self.sync = sync
        self.pacing = pacing
        self.budget = budget
        self.bind = bind  # binds a bindable transform to the buffer
        self.output = output  # the buffer's default output (None: NumPy)

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
        """``ReplayBuffer.sample_sequences`` (see there): checks, waits for the rate limiter,
        draws and gathers under the lock, converts outside it."""
        batch_size = positive_int("batch_size", batch_size)
        length = positive_int("length", length)
        within_episode, pad = flag("within_episode", within_episode), flag("pad", pad)
        balance_envs = flag("balance_envs", balance_envs)
        if timeout is not None:
            timeout = check_timeout(timeout)
        # (B, L) steps, and the draw's scratch per sequence
        self.budget.check("batch_size, length", (batch_size, length),
                     batch_size * (length + 1), "sample_sequences", "step")  # fmt: skip
        if transform is not None and not callable(transform):
            raise ConfigError(f"transform: expected a callable Batch -> Batch, got {transform!r}")
        output = self.output
        if as_ is not None or device is not None:
            output = choose_output(output, as_, device)
        limiter = self.pacing.limiter
        if limiter is not None:  # as in sample: waits without the lock, refunded on errors
            limiter.await_sample(batch_size, timeout)
        try:
            with self.sync.lock:
                self.sync.check_open()
                # A transform may raise after the draw, and so may the rejection of starts
                # whose runs cross an episode end (pad=False) when no run of `length` exists:
                # the draw is then rolled back, as if the call had not been made.
                undo = None
                if transform is not None or (within_episode and not pad):
                    undo = rollback_point(self.rng, self.sampler)
                try:
                    batch = self.sequences(
                        batch_size, length, within_episode, pad, balance_envs, transform
                    )
                except BaseException:
                    if undo is not None:
                        undo()
                    raise
        except BaseException:
            if limiter is not None:
                limiter.cancel_sample(batch_size)
            raise
        return batch if output is None else output(batch)  # converted without the lock

    def sequences(
        self,
        batch_size: int,
        length: int,
        within_episode: bool,
        pad: bool,
        balance_envs: bool,
        transform: Transform | None,
    ) -> Batch:
        """Draw and gather the sequences, then ``transform`` (under the lock)."""
        drawn = self.sampler.draw_starts(
            self.index, batch_size, self.rng, length=length,
            within_episode=within_episode, pad=pad, balance_envs=balance_envs,
        )  # fmt: skip
        env_ids, t0, extra = drawn.env_ids, drawn.t, drawn.extra()
        n_real = run_lengths(self.index, env_ids, t0, length, within_episode)
        data = gather_runs(self.cols, self.index, env_ids, t0, n_real, length)
        data["ids"] = self.index.ids(env_ids, t0)
        data["env_ids"] = env_ids
        data.update(extra)
        batch = Batch(data)
        if transform is not None:
            self.bind(transform)
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
        with self.sync.lock:
            env_ids, t0, _ = self.stored_steps(ids)
            if env_ids.ndim != 1:
                raise InvalidIdError(f"ids: expected a 1-D array, got shape {env_ids.shape}")
            # (at least one row: a length no result could hold is refused even for no ids)
            rows = max(env_ids.shape[0], 1) * length
            self.budget.check("length", length, rows, "get_sequences", "step")
            n_real = run_lengths(self.index, env_ids, t0, length, within_episode)
            data = gather_runs(self.cols, self.index, env_ids, t0, n_real, length)
            data["ids"] = self.index.ids(env_ids, t0)
            data["env_ids"] = env_ids
            return Batch(data)

    def sample_episodes(
        self, n: int, *, as_: str | None = None, device: Any = None
    ) -> Batch | TensorBatch:
        """``ReplayBuffer.sample_episodes`` (see there)."""
        n = positive_int("n", n)
        self.budget.check("n", n, n, "sample_episodes", "step")  # the draw's own arrays
        output = self.output
        if as_ is not None or device is not None:
            output = choose_output(output, as_, device)
        with self.sync.lock:
            self.sync.check_open()
            first, sizes = self.index.complete_episode_records()
            if not sizes.any():
                raise EmptyBufferError("sample_episodes: no complete episode is stored")
            undo = None
            try:  # n episodes as long as an env's ring fit: nothing to check after the draw
                self.budget.check("n", n, n * self.index.env_capacity, "sample_episodes", "step")
            except ConfigError:
                undo = rollback_point(self.rng, self.sampler)  # the draw's longest episode decides
            env_ids, fid = draw_uniform(first, sizes, n, self.rng)
            end = self.index.final_owner[
                env_ids * self.index.finals_capacity + fid % self.index.finals_capacity
            ]
            start = self.index.ep_start[self.index.slots(env_ids, end)]
            lengths = end - start + 1
            if undo is not None:
                try:
                    self.budget.check("n", n, n * int(lengths.max()), "sample_episodes", "step")
                except ConfigError:
                    undo()  # refused: the generator as if nothing was drawn
                    raise
            data = gather_runs(self.cols, self.index, env_ids, start, lengths, int(lengths.max()))
            data.update(ids=self.index.ids(env_ids, start), env_ids=env_ids, lengths=lengths)
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
        with self.sync.lock:
            env_ids, _, slots = self.stored_steps(np.array([id]))
            start = np.maximum(self.index.ep_start[slots], self.index.env[env_ids, HEAD])
            end = self.index.ep_end[slots]
            last = np.where(end >= 0, end, self.index.env[env_ids, COUNT] - 1)
            lengths = last - start + 1
            data = gather_runs(self.cols, self.index, env_ids, start, lengths, int(lengths[0]))
            data.pop("mask")
            out = {k: v[0] for k, v in data.items()}
            steps = start[0] + np.arange(int(lengths[0]))
            out["ids"] = self.index.ids(np.full_like(steps, env_ids[0]), steps)
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
        with self.sync.lock:
            self.sync.check_open()
            env = self.index.env
            return StoredRange(env[:, HEAD].copy(), env[:, COUNT].copy())

    def stored_steps(self, ids: Any) -> tuple[Array, Array, Array]:
        """``(env_ids, t, slots)`` of stored steps; overwritten or never-issued ids raise."""
        self.sync.check_open()
        env_ids, t, stale = self.index.split_ids(ids)
        if stale.any():
            raise InvalidIdError(
                f"ids: {np.asarray(ids)[stale][:5].tolist()} were overwritten (or cleared); "
                "their data is gone"
            )
        return env_ids, t, self.index.slots(env_ids, t)

    def episode_begin(self, ids: Any) -> Array:
        """Ids of the first steps of the episodes holding ``ids`` (same shape).

        The returned ids may be stale (an episode's first step can be overwritten while later
        steps of it are still stored): they are ids, not slots.

        Raises:
            InvalidIdError: A query id that was never issued or is itself overwritten.
        """
        with self.sync.lock:
            env_ids, _, slots = self.stored_steps(ids)
            return self.index.ids(env_ids, self.index.ep_start[slots])

    def steps_to_episode_end(self, ids: Any) -> Array:
        """How many steps follow each id in its episode (0 at the last step, -1 if unfinished).

        Raises:
            InvalidIdError: An id that was never issued or is overwritten.
        """
        with self.sync.lock:
            _, t, slots = self.stored_steps(ids)
            end = self.index.ep_end[slots]
            out: Array = np.where(end >= 0, end - t, -1)
            return out

    def get_field(self, name: str, ids: Any) -> Array:
        """The stored value of field ``name`` at each step in ``ids`` (raw: no stacking).

        Raises:
            FieldError: ``name`` is not a stored field.
            InvalidIdError: An id that was never issued or is overwritten.
        """
        with self.sync.lock:
            if not isinstance(name, str) or name not in self.schema.fields:
                raise FieldError(
                    f"get_field: unknown field {shown(name)}; stored: {self.schema.names}"
                )
            _, _, slots = self.stored_steps(ids)
            out: Array = self.cols.steps[name][slots]
            return out

    def sampleable_ids(self) -> Array:
        """Ids of every sampleable transition, env by env in time order."""
        with self.sync.lock:
            self.sync.check_open()
            env_ids, t = self.index.sampleable_steps()
            return self.index.ids(env_ids, t)
