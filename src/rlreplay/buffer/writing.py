"""Writing steps: ``add`` (with its generated per-buffer fast path), ``extend``, ``end_episode``.

A part of :class:`rlreplay.ReplayBuffer` (see :mod:`rlreplay.buffer.host`). The generated
``add`` is the hottest path of the library: its source is built once per buffer from the
writer's straight-line store code (:meth:`StepWriter.store_source`), so moving it here changed
no line of what runs per step.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from rlreplay.buffer.fifo import check_timeout, flag
from rlreplay.buffer.host import Array, BufferHost
from rlreplay.codegen import define
from rlreplay.episodes.index import HEAD
from rlreplay.errors import ConfigError
from rlreplay.limits import RateLimiter
from rlreplay.writing.writer import MISSING, Prepared

__all__ = ["WritingMixin"]


class WritingMixin(BufferHost):
    """``add``, ``extend`` and ``end_episode`` of :class:`rlreplay.ReplayBuffer`."""

    @property
    def _fast_add(self) -> bool:
        """Whether ``add`` takes the per-step fast path (tests turn it off for a reference)."""
        return "add" in self.__dict__

    @_fast_add.setter
    def _fast_add(self, on: bool) -> None:
        if not on:
            self.__dict__.pop("add", None)
        elif type(self).add is WritingMixin.add:  # a subclass's own add stays in charge
            self._install_fast_add()

    def _path_changed(self) -> None:
        """The writer took another path: inline the new one (unless ``add`` is not generated)."""
        if self._fast_add:
            self._install_fast_add()

    def _install_fast_add(self) -> None:
        """Give this buffer its own ``add``, generated for its fields, that tries the fast path.

        The generated function has one keyword parameter per field and ``next_<obs>`` (so a
        call binds its values straight to them, with no ``**values`` dict and no lookups) and
        takes the options and unknown names in ``**_options``. A call with no options stores the
        values under the lock as :attr:`StepWriter.add_plain` does, with the writer's code for
        it inlined (:meth:`StepWriter.store_source`; generated again when the writer changes
        path); whatever that does not store goes on to the general path (:meth:`add` below),
        which behaves as documented there. About 0.4 µs less per call than one
        ``add(**values)`` method for both, and 0.13 µs less than calling ``add_plain``.

        The function reaches the buffer through a weak proxy: a buffer dropped by its last
        reference is freed at once, not by the cycle collector. A subclass that defines its own
        ``add`` keeps it (no generated function); its ``super().add(...)`` is the general path.
        """
        writer, names = self._writer, self._writer.arg_names
        buf = weakref.proxy(self)
        store, scope = writer.store_source(names, "_out")  # names: fields, never "_..."
        scope.update({
            "_MISSING": MISSING, "_acquire": self._lock.acquire, "_release": self._lock.release,
            "_cond": self._cond, "_buf": buf,
            "_writer": writer, "_nd": np.ndarray, "_general": WritingMixin.add,
            "_given": lambda *args: {n: v for n, v in zip(names, args, strict=True)
                                     if v is not MISSING},
        })  # fmt: skip
        args = ", ".join(names)
        lines = [
            f"def add(*, {', '.join(f'{n}=_MISSING' for n in names)}, **_options):",
            "    if not _options:",
            "        _acquire()  # the lock, as `with` would take it (0.14 µs less per call)",
            "        try:",
            "            if not _buf._closed:",
            *(f"                {line}" for line in store),
            "                if type(_out) is _nd:  # stored: the ids",
            "                    if _buf._waiting:",
            "                        _cond.notify_all()",
            "                    return _out",
            "                if _out:  # an int: valid as given, but for the general store",
            f"                    _prep = _writer.prepared_plain(_given({args}), _out)",
            "                    return _buf._commit(_prep, False, None)",
            "        finally:",
            "            _release()",
            f"    _options.update(_given({args}))",
            "    return _general(_buf, **_options)",
        ]
        add = define(lines, "add", scope, "<rlreplay add>")
        add.__doc__ = WritingMixin.add.__doc__
        add.__qualname__ = f"{type(self).__name__}.add"
        self.__dict__["add"] = add

    def add(self, **values: Any) -> Array:
        """Store one environment step (of every env, or of the envs in ``env_ids``).

        ``add(*, env_ids=None, block=False, timeout=None, **values)``. The three options are
        keyword arguments like the fields (their names are reserved). Every buffer answers
        ``add`` with a function generated for its fields (one keyword parameter each), which
        stores a step of plain values on the fast path and hands everything else here.

        Args:
            env_ids: Which envs this step belongs to (unique ints in ``[0, num_envs)``); every
                value then has a leading axis ``len(env_ids)``. Default: all envs (leading axis
                ``num_envs`` when ``num_envs > 1``, none when ``num_envs == 1``).
            block: Wait for room in every named env instead of overwriting its oldest steps
                (FIFO use with :meth:`dequeue`), like :meth:`queue.Queue.put`.
            timeout: The most seconds to wait, for room with ``block`` and for the
                ``rate_limiter`` (``None``: for ever).
            **values: One value per field (``obs``, ``action``, ..., ``reward``, ``terminated``,
                ``truncated``), and ``next_<name>`` for every observation field when a step
                ends its episode (ignored on other steps).

        Returns:
            int64 ids of the stored transitions, one per env written.

        Raises:
            FieldError: Unknown or missing field, or a missing ``next_obs`` at an episode end.
            ShapeError: A value of the wrong shape, or bad ``env_ids``.
            DTypeError: An unsafe cast.
            ReplayTimeout: ``block`` and no room, or the ``rate_limiter`` did not let the
                step in, within ``timeout`` (nothing is stored).
            ReplayClosed: The buffer is (or got) closed.
        """
        # The general path. A buffer normally answers `add` with its generated function
        # (_install_fast_add), which comes here for what the fast path does not store.
        env_ids = values.pop("env_ids", None)
        block = flag("block", values.pop("block", False))
        timeout = values.pop("timeout", None)
        if self._limiter is not None:
            return self._limited_commit(
                lambda: self._writer.prepare_step(values, env_ids), block, timeout
            )
        with self._lock:
            self._check_open()
            return self._commit(self._writer.prepare_step(values, env_ids), block, timeout)

    def extend(
        self, *, env_id: int = 0, block: bool = False, timeout: float | None = None, **values: Any
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
        if self._limiter is not None:
            return self._limited_commit(
                lambda: self._writer.prepare_extend(values, env_id), block, timeout
            )
        with self._lock:
            self._check_open()
            return self._commit(self._writer.prepare_extend(values, env_id), block, timeout)

    def end_episode(self, env_id: int = 0, **final: Any) -> Array:
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
        with self._lock:
            self._check_open()
            if self._shared is not None:
                self._shared.check_owner_write(np.asarray([env_id]).reshape(-1))
            before = self._index.bounds() if self._tracks_sampleable else None
            ids = self._writer.end_episode(env_id, final)
            if before is not None:
                empty = np.zeros(0, np.int64)
                self._notify_sampleable(before, empty, empty)
            if self._waiting:
                self._cond.notify_all()
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
        with self._lock:
            self._check_open()
            e = int(self._writer.check_env_ids([env_id], name="env_id")[0])
            if self._shared is not None:
                self._shared.check_owner_write(np.array([e], np.int64))
            before = self._index.bounds() if self._tracks_sampleable else None
            t = self._index.abandon_running(e)
            if t < 0:
                return np.zeros(0, np.int64)
            if t >= int(self._index.env[e, HEAD]):
                self._writer._record_returns(
                    np.array([e], np.int64), np.array([t], np.int64), np.ones(1, np.bool_)
                )
            if before is not None:
                empty = np.zeros(0, np.int64)
                self._notify_sampleable(before, empty, empty)
            if self._waiting:
                self._cond.notify_all()
            return np.array([t * self.num_envs + e], np.int64)

    def _commit(self, prep: Prepared, block: bool, timeout: float | None) -> Array:
        """Store a validated call (after waiting for room if ``block``); tell the hooks."""
        if timeout is not None:
            check_timeout(timeout)
        if self._shared is not None:
            self._shared.check_owner_write(prep.rows_env)
        if block:
            self._wait_for_room(prep.rows_env, timeout)
        before = self._index.bounds() if self._tracks_sampleable else None
        ids = self._writer.store(prep)
        if before is not None:
            self._notify_sampleable(before, prep.rows_env, ids // self.num_envs)
        if self._waiting:
            self._cond.notify_all()
        return ids

    # ------------------------------------------------------------------ rate limiting
    @property
    def rate_limiter(self) -> RateLimiter | None:
        """The :class:`rlreplay.RateLimiter` that paces :meth:`add`/:meth:`extend` against
        ``sample``/``sample_sequences`` (``None``: no limiter); its ``stats`` are live.

        Those calls wait for it without holding the buffer's lock; inside ``atomic()`` they
        would wait holding it, so the other side could not store or draw what frees them
        (they then end only by their ``timeout``).
        """
        return self._limiter

    def _use_limiter(self, rate_limiter: RateLimiter | None, storage: str, num_envs: int) -> None:
        """Take ``rate_limiter`` (constructor argument); writes then leave the fast path."""
        if rate_limiter is not None:
            if not isinstance(rate_limiter, RateLimiter):
                raise ConfigError(
                    f"rate_limiter: expected None or an rr.RateLimiter (rr.MinSize, "
                    f"rr.SampleToInsertRatio), got {rate_limiter!r}"
                )
            if storage == "shared":
                raise ConfigError(
                    "rate_limiter: writer processes of storage='shared' cannot wait on a "
                    "limiter in this process; rate-limit many writers with "
                    "rlreplay.distributed.ReplayService(rate_limiter=...)"
                )
            spi, width = (
                rate_limiter.samples_per_insert,
                rate_limiter.max_diff - rate_limiter.min_diff,
            )
            if num_envs * spi > width:
                # Past the free stage samples keep diff >= min_diff, so a step of every env
                # (num_envs inserts at once) could never again fit under max_diff: a hang.
                raise ConfigError(
                    f"rate_limiter: a step of all {num_envs} envs is {num_envs} inserts, "
                    f"which need max_diff - min_diff >= num_envs * samples_per_insert = "
                    f"{num_envs * spi:g}; {rate_limiter!r} has {width:g} (widen error_buffer)"
                )
            rate_limiter.bind(self)
            # Every write waits on the limiter before taking the lock, which the generated
            # add does not; buffers without a limiter keep it (and its speed) untouched.
            self._fast_add = False
        self._limiter = rate_limiter

    def _limiter_counts(self) -> dict[str, Any]:
        """The limiter's parameters and counters, for the state (pending inserts: not in)."""
        assert self._limiter is not None
        state = self._limiter.state_dict()
        return {**self._limiter.to_json(), "inserts": state["inserts"], "samples": state["samples"]}

    def _restore_limiter(self, counts: Any) -> None:
        """Take back :meth:`_limiter_counts` if this buffer's limiter has the saved parameters
        (a load may give another limiter; it starts afresh). The size follows in
        :meth:`_limiter_resized` once the arrays are in."""
        limiter = self._limiter
        if limiter is None or counts is None:
            return
        if {k: v for k, v in counts.items() if k not in ("inserts", "samples")} != (
            limiter.to_json()
        ):
            return
        inserts, samples = int(counts["inserts"]), int(counts["samples"])
        if min(inserts, samples) < 0:
            raise ConfigError(f"rate_limiter: counters must be >= 0, got {dict(counts)!r}")
        state = {"config": limiter.config(), "inserts": inserts, "samples": samples, "size": 0}
        limiter.load_state_dict(state)

    def _limiter_resized(self) -> None:
        """Tell the limiter the sampleable count after a removal (``clear``, ``dequeue``)."""
        if self._limiter is not None:
            self._limiter.set_size(self.num_sampleable)

    def _limited_commit(
        self, prepare: Callable[[], Prepared], block: bool, timeout: float | None
    ) -> Array:
        """:meth:`_commit` paced by the rate limiter: validate, wait for the grant, store.

        The grant is awaited without the buffer's lock (a sampler needs the lock to pay for
        the inserts a writer waits on); the call is validated first, so a rejected call is
        never granted, and a grant whose store raises is handed back. ``timeout`` bounds the
        limiter's wait and the wait for room together.
        """
        limiter = self._limiter
        assert limiter is not None  # only called with a limiter
        if timeout is not None:
            check_timeout(timeout)
        with self._lock:
            self._check_open()
            prep = prepare()
        n = int(prep.rows_env.shape[0])
        if n == 0:  # nothing to insert: nothing to ask for
            with self._lock:
                self._check_open()
                return self._commit(prep, block, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        limiter.await_insert(n, timeout)
        committed = False
        try:
            with self._lock:
                self._check_open()
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                ids = self._commit(prep, block, left)
                # Under the lock: commits reach the limiter in the order of the stores.
                limiter.commit_insert(n, self.num_sampleable)
                committed = True
                return ids
        finally:
            if not committed:
                limiter.cancel_insert(n)
