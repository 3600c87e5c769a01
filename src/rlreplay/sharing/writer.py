"""The writer process side of ``storage="shared"``: the shared layout, :class:`SharedHandle`,
:func:`attach` and :class:`SharedWriter`.

The protocol (what is written in which order, and why a killed writer never shows a torn
step) is described in :mod:`rlreplay.sharing.handle`, which holds the owner's side.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from rlreplay.errors import ConfigError, InvalidIdError, ReplayClosed
from rlreplay.sharing.fastpath import build_add
from rlreplay.spec.arguments import as_array, shown, timeout_seconds
from rlreplay.spec.schema import Schema
from rlreplay.storage.shared import MappedSegment, fence, store_release

__all__ = ["SharedHandle", "SharedWriter", "attach"]

Array = np.ndarray[Any, Any]

# Header columns, one row (one 64-byte cache line) per env; ENDS counts the writers'
# end_episode calls (which change a published step's record, not PUB).
PUB, BEGIN, PID, SHARED, CLOSED, BASE_T, BASE_LAST_END, BASE_FCOUNT, ENDS = range(9)
HCOLS = 16
# Per-slot record written by the writer: the step, its episode's first step, its final-record
# id (the env's count of ended episodes before it) and whether it ends its episode.
W_T, W_START, W_FID, W_DONE = range(4)


@numba.njit(cache=True)
def _begin(hdr: Array, rows_env: Array, t: Array) -> None:  # pragma: no cover - compiled
    """Raise ``BEGIN`` of each row's env to its step + 1, then fence (before the data)."""
    for i in range(rows_env.shape[0]):
        e = rows_env[i]
        hdr[e, BEGIN] = max(hdr[e, BEGIN], t[i] + 1)
    fence()


@numba.njit(cache=True)
def _publish(hdr: Array, rows_env: Array, t: Array) -> None:  # pragma: no cover - compiled
    """Fence (after the data), then ``PUB`` of each row's env = its step + 1."""
    fence()
    for i in range(rows_env.shape[0]):
        e = rows_env[i]
        hdr[e, PUB] = max(hdr[e, PUB], t[i] + 1)


@numba.njit(cache=True)
def _begin_one(hdr: Array, e: int, t: int) -> None:  # pragma: no cover - compiled
    """:func:`_begin` of one step."""
    hdr[e, BEGIN] = max(hdr[e, BEGIN], t + 1)
    fence()


@numba.njit(cache=True)
def _publish_one(hdr: Array, e: int, t: int) -> None:  # pragma: no cover - compiled
    """:func:`_publish` of one step."""
    store_release(hdr, e, PUB, max(hdr[e, PUB], t + 1))


@numba.njit(cache=True)
def begins_fenced(hdr: Array) -> Array:  # pragma: no cover - compiled
    """Fence (after the data was read), then a copy of every env's ``BEGIN``."""
    fence()
    return hdr[:, BEGIN].copy()


@numba.njit(cache=True)
def changed_envs(hdr: Array, mask: Array, seen: Array) -> Array:  # pragma: no cover - compiled
    """The envs of ``mask`` whose ``PUB``, ``BEGIN`` or ``ENDS`` changed since ``seen``, then
    fence; their new keys are stored in ``seen``.

    An env's key is ``PUB * 1000003 + BEGIN * 7919 + ENDS``: the three only grow, so the key
    grows strictly whenever one of them moves (no two states share a key). One kernel call, so
    a fold with nothing new (every ``update_priorities``/``sample`` of a quiet buffer) costs
    about a microsecond.
    """
    E = hdr.shape[0]
    keys = np.empty(E, np.int64)
    n = 0
    for e in range(E):
        keys[e] = hdr[e, PUB] * 1000003 + hdr[e, BEGIN] * 7919 + hdr[e, ENDS]
        if mask[e] and keys[e] != seen[e]:
            n += 1
    fence()
    out = np.empty(n, np.int64)
    n = 0
    for e in range(E):
        if mask[e] and keys[e] != seen[e]:
            out[n] = e
            seen[e] = keys[e]  # read before the fold: a later change differs
            n += 1
    return out


@numba.njit(cache=True)
def _plan(
    rows_env: Array, t: Array, done: Array, last_end: Array, fcount: Array, out: Array
) -> None:  # pragma: no cover - compiled
    """Each row's record ``(t, episode start, fid, done)``; advances the writer's counters."""
    for i in range(rows_env.shape[0]):
        e = rows_env[i]
        out[i, W_T] = t[i]
        out[i, W_START] = last_end[e] + 1
        out[i, W_FID] = fcount[e]
        out[i, W_DONE] = done[i]
        if done[i]:
            last_end[e] = t[i]
            fcount[e] += 1


@dataclass(frozen=True)
class SharedHandle:
    """What a writer process needs to map a shared buffer (picklable, no live objects).

    Attributes:
        segments: Array name -> (segment name, shape, dtype string).
        fields: The buffer's schema (:meth:`rlreplay.spec.schema.Schema.to_json`).
        num_envs: ``E``.
        env_capacity: ``C``, slots per env.
        finals_capacity: Final-observation records per env (at least ``C``, so a record is
            only reused once the step that owns it was overwritten).
        env_ids: The envs a writer attached with this handle owns.
        owner_pid: The owning process (writers stop when it is gone).
    """

    segments: dict[str, tuple[str, tuple[int, ...], str]]
    fields: dict[str, Any]
    num_envs: int
    env_capacity: int
    finals_capacity: int
    env_ids: tuple[int, ...]
    owner_pid: int


# ---------------------------------------------------------------------- the writer process side
# Segments this process mapped, by name, with the number of writers using each. POSIX record
# locks belong to the process and are all dropped when *any* descriptor of the file closes, so
# one descriptor per segment serves every writer of this process, closed with the last one.
_MAPPED: dict[str, list[Any]] = {}
# (header segment, env) attached by a writer of this process: locks do not exclude the process
# that holds them, so a second attach here is caught by this set.
_ATTACHED: set[tuple[str, int]] = set()


def _map(name: str) -> MappedSegment:
    entry = _MAPPED.get(name)
    if entry is None:
        entry = _MAPPED[name] = [MappedSegment(name), 0]
    entry[1] += 1
    seg: MappedSegment = entry[0]
    return seg


def _unmap(name: str) -> None:
    entry = _MAPPED.get(name)
    if entry is not None:
        entry[1] -= 1
        if entry[1] <= 0:
            del _MAPPED[name]
            entry[0].close()


def attach(handle: SharedHandle, *, timeout: float | None = 0.0) -> SharedWriter:
    """Map a shared buffer in this process and own the handle's envs for writing.

    Args:
        handle: From ``buf.share(env_ids)`` in the owning process.
        timeout: Seconds to wait for envs still attached elsewhere to become free (0: none;
            ``None`` or ``inf``: for ever; NaN or negative: :class:`rlreplay.ConfigError`).

    Returns:
        A :class:`SharedWriter`.

    Raises:
        ConfigError: An env is attached by another live writer (after ``timeout``), the
            buffer is gone, ``handle`` is not a :class:`~rlreplay.SharedHandle` or ``timeout``
            is not a valid timeout.
    """
    return SharedWriter(handle, timeout)


class SharedWriter:
    """Writes steps of its envs into a shared buffer owned by another process.

    ``add``, ``extend`` and ``end_episode`` take the buffer's arguments and validate them as the
    buffer does; a step is visible to the owner's samples once published (at the end of each
    call). Not thread-safe: one writer per thread.

    Args:
        handle: From ``buf.share(env_ids)``.
        timeout: As in :func:`attach`.
    """

    def __init__(self, handle: SharedHandle, timeout: float | None = 0.0) -> None:
        seconds = timeout_seconds(timeout)  # before anything is mapped or locked
        if not isinstance(handle, SharedHandle):
            raise ConfigError(
                f"handle: expected the SharedHandle of buf.share(), got {type(handle).__name__}"
            )
        self.handle = handle
        self.schema = Schema.from_json(handle.fields)
        self.num_envs, C = handle.num_envs, handle.env_capacity
        self.env_capacity = C
        self.finals_capacity = handle.finals_capacity
        self.env_ids = np.array(handle.env_ids, np.int64)
        self._plain_keys = frozenset(self.schema.fields)
        self._next_names = frozenset(self.schema.next_names())
        self._full_keys = self._plain_keys | self._next_names
        self._one_id = np.zeros(1, np.int64)
        self._names: list[str] = []
        arrays: dict[str, Array] = {}
        try:
            for name, (seg, shape, dtype) in handle.segments.items():
                arrays[name] = _map(seg).array(shape, dtype)
                self._names.append(seg)
        except BaseException:
            for seg in self._names:
                _unmap(seg)
            raise
        self._steps = {n: arrays[n] for n in self.schema.fields}
        self._finals = {n: arrays[f"final-{n}"] for n in self.schema.observation_names}
        self._hdr, self._records = arrays["shared-header"], arrays["shared-records"]
        self._hdr_seg = handle.segments["shared-header"][0]
        self._fd = _MAPPED[self._hdr_seg][0].fd
        self._locked: list[int] = []
        self._closed = False
        self._due = [0.0]  # when the owner's liveness is to be checked next
        try:
            self._acquire(seconds)
        except BaseException:
            self.close()
            raise
        E = self.num_envs
        self._t = np.zeros(E, np.int64)
        self._last_end = np.full(E, -1, np.int64)
        self._fcount = np.zeros(E, np.int64)
        for e in self._locked:
            self._resume(e)
        if len(self._locked) == 1:
            self._install_fast_add()

    # ------------------------------------------------------------------ ownership
    def _acquire(self, timeout: float | None) -> None:
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        for e in self.env_ids.tolist():
            while True:
                mine = (self._hdr_seg, e) in _ATTACHED
                if not mine:
                    try:
                        fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, e)
                        break
                    except OSError:
                        pass
                if time.monotonic() >= deadline:
                    who = "this process" if mine else f"process {int(self._hdr[e, PID])}"
                    raise ConfigError(
                        f"attach: env {e} is attached to a live writer ({who}); an env has one "
                        "writer at a time: close() that writer first (or let it exit)"
                    )
                time.sleep(0.01)
            _ATTACHED.add((self._hdr_seg, e))
            self._locked.append(e)

    def _resume(self, e: int) -> None:
        """Continue env ``e`` where its last writer (or the owner) published."""
        hdr, C = self._hdr, self.env_capacity
        if hdr[e, CLOSED]:
            raise ReplayClosed("attach: the shared buffer is closed")
        P = int(hdr[e, PUB])
        if hdr[e, BASE_T] == P:
            last_end, fcount = int(hdr[e, BASE_LAST_END]), int(hdr[e, BASE_FCOUNT])
        else:
            m = self._records[e * C + (P - 1) % C]
            done = int(m[W_DONE])
            last_end = P - 1 if done else int(m[W_START]) - 1
            fcount = int(m[W_FID]) + done
        self._t[e], self._last_end[e], self._fcount[e] = P, last_end, fcount
        dead = int(hdr[e, PID]) != 0  # its writer never closed: it died
        hdr[e, PID] = os.getpid()
        if dead and P > 0 and last_end != P - 1 and hdr[e, BASE_T] <= P - 1:
            # The dead writer's episode cannot go on with this writer's steps: end it at its
            # last published step, truncated, with that step's own observation as the final
            # one (the true next observation died with the writer).
            slot = e * C + (P - 1) % C
            self.end_episode(e, **{f"next_{n}": self._steps[n][slot] for n in self._finals})

    def _install_fast_add(self) -> None:
        """Answer ``add`` with a function generated for this schema and env, which stores a
        step of plain values itself and hands the rest to :meth:`add` below
        (:mod:`rlreplay.sharing.fastpath`; a one-env writer only)."""
        e = self._locked[0]
        self.__dict__["add"] = build_add(
            self, SharedWriter.add, e, (e * HCOLS + PUB, e * HCOLS + BEGIN, e * HCOLS + CLOSED),
            (self._t, self._last_end, self._fcount), self._due,
        )  # fmt: skip

    def _check_alive(self) -> None:
        if self._closed:
            raise ReplayClosed("SharedWriter is closed")
        if self._hdr[self._locked[0], CLOSED] if self._locked else False:
            raise ReplayClosed("the shared buffer was closed by its owner")
        now = time.monotonic()
        if now >= self._due[0]:  # the owner's liveness, at most once a second
            self._due[0] = now + 1.0
            try:
                os.kill(self.handle.owner_pid, 0)
            except ProcessLookupError:
                raise ReplayClosed("the process owning the shared buffer is gone") from None
            except PermissionError:
                pass

    def _rows(self, env_ids: Any) -> Array:
        try:
            arr = np.asarray(env_ids)
        except (ValueError, TypeError, OverflowError):  # ragged nests, unconvertible objects
            arr = np.empty((), object)
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise InvalidIdError(f"env_ids: expected a 1-D sequence of ints, got {shown(env_ids)}")
        arr = arr.astype(np.int64)
        foreign = sorted(set(arr.tolist()) - set(self._locked))
        if foreign or np.unique(arr).size != arr.size:
            raise InvalidIdError(
                f"env_ids: expected unique envs of this writer {self._locked}, got {arr.tolist()}"
            )
        return arr

    def next_step(self, env_id: int) -> int:
        """The absolute step the next ``add`` of ``env_id`` stores (its id is ``t * E + e``)."""
        return int(self._t[int(self._rows([env_id])[0])])

    # ------------------------------------------------------------------ writing
    def add(self, *, env_ids: Any = None, **values: Any) -> Array:
        """Store one step of every env of this writer (or of ``env_ids``).

        Values have a leading axis ``len(env_ids)`` (default: the writer's envs; no leading
        axis when it owns exactly one env and ``env_ids`` is not given), as
        :meth:`rlreplay.ReplayBuffer.add`. A writer owning one env answers ``add`` with a
        function generated for its fields (:mod:`rlreplay.sharing.fastpath`, about
        3 µs a step), which stores a step of plain values itself and hands every other call to
        this general path.

        Returns:
            The ids of the stored transitions.
        """
        self._check_alive()
        if env_ids is None:
            rows = np.array(self._locked, np.int64)
            lead: tuple[int, ...] = () if rows.size == 1 else (rows.size,)
        else:
            rows = self._rows(env_ids)
            lead = (rows.size,)
        if not lead:
            return self._store_one(self._locked[0], self._convert(values, lead))
        return self._store(rows, self._convert(values, lead), lead)

    def extend(self, *, env_id: int | None = None, **values: Any) -> Array:
        """Store ``T`` consecutive steps of one env (leading axis ``T``)."""
        self._check_alive()
        e = self._locked[0] if env_id is None else int(self._rows([env_id])[0])
        shape = as_array("terminated", values.get("terminated", 0)).shape
        if len(shape) != 1:
            raise InvalidIdError(f"terminated: extend expects shape (T,), got {shape}")
        T = shape[0]
        conv = self._convert(values, (T,))
        ids = []
        for a in range(0, T, self.env_capacity):  # no slot twice in one assignment
            b = min(T, a + self.env_capacity)
            part = {k: np.asarray(v)[a:b] for k, v in conv.items()}
            ids.append(self._store(np.full(b - a, e, np.int64), part, (b - a,)))
        return np.concatenate(ids) if ids else np.zeros(0, np.int64)

    def _convert(self, values: dict[str, Any], lead: tuple[int, ...]) -> dict[str, Any]:
        keys = values.keys()
        if keys != self._plain_keys and any(values.get(k, 0) is None for k in self._next_names):
            # next_<obs>=None means "not given", as in ReplayBuffer.add
            values = {k: v for k, v in values.items() if v is not None or k not in self._next_names}
            keys = values.keys()
        full = keys == self._full_keys
        if not full and keys != self._plain_keys:
            self.schema.check_keys(values, ending=False)  # names what is unknown or missing
        conv = self.schema.convert_all(values, lead)
        if not full and (
            (bool(conv["terminated"]) or bool(conv["truncated"]))
            if not lead
            else (conv["terminated"].any() or conv["truncated"].any())
        ):
            self.schema.check_keys(values, ending=True)  # names the missing next_<obs>
        return conv

    def _store_one(self, e: int, conv: dict[str, Any]) -> Array:
        """:meth:`_store` of one unbatched step (scalar slot writes: the per-step path)."""
        C, F = self.env_capacity, self.finals_capacity
        t = int(self._t[e])
        slot = e * C + t % C
        done = bool(conv["terminated"]) or bool(conv["truncated"])
        start, fid = int(self._last_end[e]) + 1, int(self._fcount[e])
        _begin_one(self._hdr, e, t)
        for name, col in self._steps.items():
            col[slot] = conv[name]
        if done:
            for name, col in self._finals.items():
                col[e * F + fid % F] = conv["next_" + name]
            self._last_end[e], self._fcount[e] = t, fid + 1
        self._records[slot] = (t, start, fid, done)
        _publish_one(self._hdr, e, t)
        self._t[e] = t + 1
        out = self._one_id.copy()
        out[0] = t * self.num_envs + e
        return out

    def _store(self, rows: Array, conv: dict[str, Any], lead: tuple[int, ...]) -> Array:
        C, F = self.env_capacity, self.finals_capacity
        n = rows.shape[0]
        # One env's rows are consecutive steps (extend), or each env appears once (add).
        t = self._t[rows] + (np.arange(n) if n > 1 and rows[0] == rows[-1] else 0)
        done = np.logical_or(conv["terminated"], conv["truncated"]).reshape(n)
        slots = rows * C + t % C
        plan = np.empty((n, 4), np.int64)
        _plan(rows, t, done, self._last_end, self._fcount, plan)
        _begin(self._hdr, rows, t)
        for name, col in self._steps.items():
            col[slots] = conv[name]
        if done.any():
            pos = rows[done] * F + plan[done, W_FID] % F
            for name, col in self._finals.items():
                v = conv["next_" + name]
                col[pos] = v if not lead else np.asarray(v)[done]
        self._records[slots] = plan
        _publish(self._hdr, rows, t)
        self._t[rows] = t + 1 if n == 1 or rows[0] != rows[-1] else t[-1] + 1
        out: Array = t * self.num_envs + rows
        return out

    def end_episode(self, env_id: int | None = None, **final: Any) -> Array:
        """End the env's running episode at its newest step, as truncated (see the buffer's).

        Raises:
            InvalidIdError: The env has no step, or its newest step already ends an episode.
            FieldError: Not exactly the ``next_<name>`` values.
        """
        self._check_alive()
        e = self._locked[0] if env_id is None else int(self._rows([env_id])[0])
        self.schema.check_keys({**dict.fromkeys(self.schema.fields), **final}, ending=True)
        conv = self.schema.convert_all(final, ())
        t = int(self._t[e]) - 1
        if t < 0 or self._last_end[e] == t:
            raise InvalidIdError(f"env_id: env {e} has no running episode to end")
        C, F = self.env_capacity, self.finals_capacity
        slot = e * C + t % C
        fid = int(self._fcount[e])
        for name, col in self._finals.items():
            col[e * F + fid % F] = conv["next_" + name]
        self._steps["truncated"][slot] = True
        store_release(self._records, slot, W_DONE, 1)  # after the final observation
        store_release(self._hdr, e, ENDS, int(self._hdr[e, ENDS]) + 1)
        self._last_end[e], self._fcount[e] = t, fid + 1
        return np.array([t * self.num_envs + e], np.int64)

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Release the envs (another process may attach them) and unmap. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._due[0] = -math.inf  # a generated add held elsewhere takes the general path
        self.__dict__.pop("add", None)
        for e in self._locked:
            self._hdr[e, PID] = 0
            _ATTACHED.discard((self._hdr_seg, e))
            with contextlib.suppress(OSError):
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, e)
        self._locked = []
        for seg in self._names:
            _unmap(seg)
        self._names = []

    def __enter__(self) -> SharedWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
