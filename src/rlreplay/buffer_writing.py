"""Writing steps: ``add`` (with its generated per-buffer fast path), ``extend``, ``end_episode``.

A part of :class:`rlreplay.ReplayBuffer` (see :mod:`rlreplay.buffer_host`). The generated
``add`` is the hottest path of the library: its source is built once per buffer from the
writer's straight-line store code (:meth:`StepWriter.store_source`), so moving it here changed
no line of what runs per step.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from rlreplay.buffer_fifo import check_timeout
from rlreplay.buffer_host import Array, BufferHost
from rlreplay.codegen import define
from rlreplay.writer import MISSING, Prepared

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
            timeout: With ``block``, the most seconds to wait (``None``: for ever).
            **values: One value per field (``obs``, ``action``, ..., ``reward``, ``terminated``,
                ``truncated``), and ``next_<name>`` for every observation field when a step
                ends its episode (ignored on other steps).

        Returns:
            int64 ids of the stored transitions, one per env written.

        Raises:
            FieldError: Unknown or missing field, or a missing ``next_obs`` at an episode end.
            ShapeError: A value of the wrong shape, or bad ``env_ids``.
            DTypeError: An unsafe cast.
            ReplayTimeout: ``block`` and no room within ``timeout``.
            ReplayClosed: The buffer is (or got) closed.
        """
        # The general path. A buffer normally answers `add` with its generated function
        # (_install_fast_add), which comes here for what the fast path does not store.
        env_ids = values.pop("env_ids", None)
        block = bool(values.pop("block", False))
        timeout = values.pop("timeout", None)
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
            timeout: With ``block``, the most seconds to wait.
            **values: As in :meth:`add`, each with a leading axis ``T``.

        Returns:
            int64 ids of the ``T`` transitions.
        """
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
