"""The write path of a replay buffer: ``add`` (general and generated), ``extend``, episode ends.

:class:`WritePath` takes a validated call from the writer (:class:`~rlreplay.writing.StepWriter`,
which checks and casts values by the schema and stores rows in the columns and the episode
index), waits for room when asked (``block``), paces it with the rate limiter
(:class:`~rlreplay.buffer.pacing.Pacing`), and tells the sampler how the sampleable set moved
(:class:`~rlreplay.buffer.events.SampleableEvents`). :meth:`WritePath.generated_add` builds the
per-buffer ``add`` that the buffer answers ``add`` with: the hottest path of the library, its
source built once per buffer from the writer's straight-line store code
(:meth:`StepWriter.store_source`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlreplay.buffer.events import SampleableEvents
from rlreplay.buffer.pacing import Pacing
from rlreplay.buffer.sync import Sync, check_timeout, flag
from rlreplay.codegen import define
from rlreplay.episodes.index import HEAD, EpisodeIndex
from rlreplay.errors import ShapeError
from rlreplay.writing.writer import MISSING, Prepared, StepWriter

__all__ = ["WritePath"]

Array = np.ndarray[Any, Any]


class WritePath:
    """Stores validated steps and tells the other parts (see the module docstring)."""

    def __init__(
        self,
        writer: StepWriter,
        index: EpisodeIndex,
        events: SampleableEvents,
        sync: Sync,
        pacing: Pacing,
    ) -> None:
        self.writer = writer
        self.index = index
        self.events = events
        self.sync = sync
        self.pacing = pacing
        self.num_envs = index.num_envs
        self.env_capacity = index.env_capacity

    def generated_add(self, doc: str | None, qualname: str) -> Callable[..., Array]:
        """A function ``add(**values)``, generated for this buffer's fields, that tries the
        fast path.

        The generated function has one keyword parameter per field and ``next_<obs>`` (so a
        call binds its values straight to them, with no ``**values`` dict and no lookups) and
        takes the options and unknown names in ``**_options``. A call with no options stores the
        values under the lock as :attr:`StepWriter.add_plain` does, with the writer's code for
        it inlined (:meth:`StepWriter.store_source`; generated again when the writer changes
        path); whatever that does not store goes on to the general path (:meth:`add`), which
        behaves as documented there. About 0.4 µs less per call than one ``add(**values)``
        method for both, and 0.13 µs less than calling ``add_plain``. It refers to the parts
        only, never to the buffer: a buffer dropped by its last reference is freed at once.
        """
        writer, names, sync = self.writer, self.writer.arg_names, self.sync
        store, scope = writer.store_source(names, "_out")  # names: fields, never "_..."
        scope.update({
            "_MISSING": MISSING, "_acquire": sync.lock.acquire, "_release": sync.lock.release,
            "_sync": sync, "_wake": sync.cond.notify_all, "_writer": writer, "_nd": np.ndarray,
            "_commit": self.commit, "_general": self.add,
            "_given": lambda *args: {n: v for n, v in zip(names, args, strict=True)
                                     if v is not MISSING},
        })  # fmt: skip
        args = ", ".join(names)
        lines = [
            f"def add(*, {', '.join(f'{n}=_MISSING' for n in names)}, **_options):",
            "    if not _options:",
            "        _acquire()  # the lock, as `with` would take it (0.14 µs less per call)",
            "        try:",
            "            if not _sync.closed:",
            *(f"                {line}" for line in store),
            "                if type(_out) is _nd:  # stored: the ids",
            "                    if _sync.waiting:",
            "                        _wake()",
            "                    return _out",
            "                if _out:  # an int: valid as given, but for the general store",
            f"                    _prep = _writer.prepared_plain(_given({args}), _out)",
            "                    return _commit(_prep, False, None)",
            "        finally:",
            "            _release()",
            f"    _options.update(_given({args}))",
            "    return _general(**_options)",
        ]
        add: Callable[..., Array] = define(lines, "add", scope, "<rlreplay add>")
        add.__doc__ = doc
        add.__qualname__ = qualname
        return add

    def add(self, **values: Any) -> Array:
        """The general path of ``add`` (see :meth:`rlreplay.ReplayBuffer.add`)."""
        env_ids = values.pop("env_ids", None)
        block = flag("block", values.pop("block", False))
        timeout = values.pop("timeout", None)
        writer = self.writer
        if self.pacing.limiter is not None:
            return self.pacing.commit(
                lambda: writer.prepare_step(values, env_ids), self.commit, block, timeout
            )
        with self.sync.lock:
            self.sync.check_open()
            return self.commit(writer.prepare_step(values, env_ids), block, timeout)

    def extend(
        self,
        /,
        *,
        env_id: int = 0,
        block: bool = False,
        timeout: float | None = None,
        **values: Any,
    ) -> Array:
        """Store ``T`` consecutive steps of one env in one call (leading axis ``T``).

        Args:
            env_id: The env the steps belong to.
            block: Wait for room for all ``T`` steps instead of overwriting (as in :meth:`add`).
            timeout: The most seconds to wait, for room with ``block`` and for the
                ``rate_limiter`` (as in :meth:`add`).
            **values: As in :meth:`add`, each with a leading axis ``T``.

        Returns:
            int64 ids of the ``T`` transitions.

        Raises:
            ReplayTimeout: As in :meth:`add`. A rate limiter grants the ``T`` inserts at once,
                so ``T * samples_per_insert`` must fit its band ``max_diff - min_diff`` once
                the buffer is past ``min_size_to_sample``: extend in shorter runs otherwise.
        """
        block = flag("block", block)
        writer = self.writer
        if self.pacing.limiter is not None:
            return self.pacing.commit(
                lambda: writer.prepare_extend(values, env_id), self.commit, block, timeout
            )
        with self.sync.lock:
            self.sync.check_open()
            return self.commit(writer.prepare_extend(values, env_id), block, timeout)

    def end_episode(self, /, env_id: int = 0, **final: Any) -> Array:
        """End env ``env_id``'s running episode at its newest stored step, as truncated.

        For callers that learn only afterwards that an episode was cut (a collection loop that
        stops, a reset without a terminal flag, a front-end whose API gives no final
        observation with the step): the newest step becomes the episode's last, flagged
        ``truncated``, with ``final`` as its next observation, so its windows become known and
        the next :meth:`add` starts a new episode.

        Args:
            env_id: The env.
            **final: ``next_<name>`` for every observation field (e.g. ``next_obs=...``).

        Returns:
            The id of the step that now ends the episode (shape ``(1,)``).

        Raises:
            InvalidIdError: The env stores no step, or its newest step already ends an episode.
            FieldError: Not exactly the ``next_<name>`` values.
        """
        sync = self.sync
        with sync.lock:
            sync.check_open()
            if sync.shared is not None:
                sync.shared.check_owner_write(np.asarray([env_id]).reshape(-1))
            before = self.events.before()
            ids = self.writer.end_episode(env_id, final)
            self.events.after(before)
            sync.wake()
            return ids

    def abandon_episode(self, env_id: int = 0) -> Array:
        """Abandon env ``env_id``'s running episode: end it at its newest step, unobserved.

        For a running episode whose continuation is lost (an actor that crashed, a restarted
        shard, an env reset without a final observation): unlike :meth:`end_episode` there is
        no final observation and no ``terminated``/``truncated`` flag. The episode's steps
        whose ``n_step``-step windows are complete inside it (``t + n_step <= newest``) stay
        sampleable exactly as they are; the others (its last ``n_step`` steps, with
        ``n_step=1`` just the newest one, whose next observation is unknown) stay stored, for
        :meth:`get_episode` and ``sample_sequences``, but are never sampleable: ``sample``
        never draws them, prioritized buffers give them no priority mass and ignore their
        ids in ``update_priorities``. The next step added for the env starts a new episode.
        The episode counts as ended without a final step: ``get_episode``,
        ``steps_to_episode_end`` and ``sample_sequences(within_episode=True)`` stop at the
        cut (the cut step's ``next_known`` is False), ``record_episodic_return`` records the
        returns of its stored steps up to the cut, and ``sample_episodes`` (complete
        episodes, with a final step) leaves it out. Checkpoints keep the cut.

        Args:
            env_id: The env.

        Returns:
            The id of the step that now ends the abandoned episode (shape ``(1,)``), or an
            empty array when no episode runs (no step added yet, or the newest step already
            ends its episode, e.g. right after :meth:`end_episode` or another abandon): then
            nothing changes. An episode whose stored steps were all overwritten, cleared or
            dequeued is still abandoned (the next step starts a new episode); its id is
            returned although it is no longer stored.

        Raises:
            InvalidIdError: ``env_id`` is not an env of this buffer.
            ConfigError: ``env_id`` is written by a shared-memory writer process.

        Example:
            >>> import numpy as np, rlreplay as rr
            >>> buf = rr.ReplayBuffer(8, {"obs": rr.Field((), np.float32)}, n_step=2)
            >>> for t in range(4):
            ...     _ = buf.add(obs=t, reward=1.0, terminated=False, truncated=False)
            >>> buf.sampleable_ids().tolist()  # steps 0 and 1 know their 2-step windows
            [0, 1]
            >>> buf.abandon_episode().tolist()  # steps 2 and 3 never will
            [3]
            >>> _ = buf.add(obs=9, reward=1.0, terminated=False, truncated=False)  # new episode
            >>> buf.episode_begin([4]).tolist(), buf.sampleable_ids().tolist()
            ([4], [0, 1])
        """
        sync = self.sync
        with sync.lock:
            sync.check_open()
            e = int(self.writer.check_env_ids([env_id], name="env_id")[0])
            if sync.shared is not None:
                sync.shared.check_owner_write(np.array([e], np.int64))
            before = self.events.before()
            t = self.index.abandon_running(e)
            if t < 0:
                return np.zeros(0, np.int64)
            if t >= int(self.index.env[e, HEAD]):
                self.writer._record_returns(
                    np.array([e], np.int64), np.array([t], np.int64), np.ones(1, np.bool_)
                )
            self.events.after(before)
            sync.wake()
            return np.array([t * self.num_envs + e], np.int64)

    def commit(self, prep: Prepared, block: bool, timeout: float | None) -> Array:
        """Store a validated call (after waiting for room if ``block``); tell the other parts.
        Under the lock."""
        if timeout is not None:
            check_timeout(timeout)
        sync = self.sync
        if sync.shared is not None:
            sync.shared.check_owner_write(prep.rows_env)
        if block:
            self.wait_for_room(prep.rows_env, timeout)
        before = self.events.before()
        ids = self.writer.store(prep)
        if before is not None:
            self.events.after(before, prep.rows_env, ids // self.num_envs)
        sync.wake()
        return ids

    def wait_for_room(self, rows_env: Array, timeout: float | None) -> None:
        """Wait until every env named in ``rows_env`` has room for its rows (``block=True``)."""
        need = np.bincount(rows_env, minlength=self.num_envs)
        if need.max() > self.env_capacity:
            raise ShapeError(
                f"block: {int(need.max())} steps for one env can never fit its "
                f"{self.env_capacity} slots; split the call"
            )
        room = self.env_capacity - need
        index = self.index

        def ready() -> bool:
            return bool((index.stored_per_env() <= room).all())

        self.sync.wait(ready, timeout, "add(block=True)")
