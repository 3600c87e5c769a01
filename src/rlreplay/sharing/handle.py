"""Writer processes over shared memory: ``buf.share()``, :func:`attach` and the writer.

A buffer built with ``storage="shared"`` keeps its columns, final observations and episode index
in POSIX shared memory (:mod:`rlreplay.storage.shared`). ``handle = buf.share(env_ids)`` is a
picklable description of the segments; ``w = rr.attach(handle)`` in another process maps them
and returns a :class:`SharedWriter` that owns those envs.

Protocol (per env ``e``, ring of ``C`` slots; a header row and a per-slot record in shared memory):

* The writer of step ``t`` first raises ``BEGIN[e]`` to ``t + 1`` (then a fence): from now on
  slot ``t % C``, which held step ``t - C``, is being overwritten. It then writes the columns,
  the final observation (if the step ends its episode, at final record ``fid % C``) and the
  slot's record ``(t, episode start, fid, done)``, and finally, after a fence, *publishes*
  ``PUB[e] = t + 1``. A writer killed at any instant leaves ``PUB`` at its last complete step:
  what it half wrote is never folded. The next writer of the env resumes at ``PUB``.
* The owner *folds* published steps into its own index (under its lock, before every read):
  it copies the new records, then reads ``BEGIN`` (after a fence) and only accounts for the
  steps that were not overwritten meanwhile (``t >= BEGIN - C``); the index drops older ones.
  Folding gives prioritized buffers' new steps the max priority, as ``add`` does. It also
  drops the oldest ``guard`` steps ahead of the writer, so that a writer rarely overtakes a
  sample in progress.
* A sample is checked after it was gathered (a seqlock read): it read steps ``t - k + 1 ..``;
  if a writer's ``BEGIN`` moved past any of them meanwhile, the batch is drawn again. So no
  sampled transition is ever torn, and none is lost or duplicated by the fold.

The fences are real memory fences (see :mod:`rlreplay.storage.shared`), so this holds on x86
and on ARM. An env has one writer at a time: :func:`attach` takes a byte-range lock
(``lockf``) on the header segment per env, which the kernel releases when the writer's
process dies, however it dies; so a dead writer's envs can be attached again at once.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rlreplay.episodes.index import COUNT, F_COUNT, F_HEAD, FINAL_FID, HEAD, LAST_END
from rlreplay.errors import ConfigError, EmptyBufferError, ReplayTimeout
from rlreplay.sampling.uniform import DrawOptions
from rlreplay.sharing.writer import (
    BASE_FCOUNT,
    BASE_LAST_END,
    BASE_T,
    BEGIN,
    CLOSED,
    HCOLS,
    PUB,
    SHARED,
    W_DONE,
    W_FID,
    W_START,
    W_T,
    SharedHandle,
    SharedWriter,
    attach,
    begins_fenced,
    changed_envs,
)
from rlreplay.storage.shared import SharedBackend, load_acquire

if TYPE_CHECKING:
    from rlreplay.buffer.replay import ReplayBuffer
    from rlreplay.buffer.sampling import Draws

__all__ = ["SharedHandle", "SharedState", "SharedWriter", "attach", "share_buffer"]

Array = np.ndarray[Any, Any]


class SharedState:
    """The owner's side: header and per-slot records, folding, checked sampling.

    Attributes:
        guard: Steps per shared env dropped ahead of its writer at each fold.
        retries: Samples drawn again because a writer overtook them.
        timeout: Seconds a sample may spend redrawing before :class:`ReplayTimeout`.
    """

    def __init__(self, buf: ReplayBuffer) -> None:
        backend = buf._backend
        if not isinstance(backend, SharedBackend):
            raise ConfigError(
                f"share: needs a buffer built with storage='shared', got storage={backend.kind!r}"
            )
        if buf.record_episodic_return:
            raise ConfigError(
                "share: record_episodic_return is not computed for steps of writer processes"
            )
        E, C = buf.num_envs, buf._env_capacity
        i64 = np.dtype(np.int64)
        self.header = backend.allocate("shared-header", (E, HCOLS), i64)
        self.records = backend.allocate("shared-records", (E * C, 4), i64)
        self.records[:, W_T] = -1
        self.mask = np.zeros(E, np.bool_)
        self._seen = np.full(E, -1, np.int64)
        self.env_capacity = C
        self.guard = min(C // 8, 4096)
        self.retries = 0
        self.timeout = 10.0
        self._index = buf._index
        self._events = buf._events  # the sampler hears of folded steps

    # ------------------------------------------------------------------ owner writes
    def check_owner_write(self, rows_env: Array) -> None:
        """Refuse a write of the owner to an env handed to writer processes."""
        taken = rows_env[self.mask[rows_env]]
        if taken.size:
            raise ConfigError(
                f"env_ids: envs {sorted(set(taken.tolist()))} are written by writer processes "
                "(share()); this process no longer writes them"
            )

    def close(self) -> None:
        """Tell writers the buffer is closed (before its segments are unlinked)."""
        self.header[:, CLOSED] = 1

    # ------------------------------------------------------------------ folding
    def fold(self) -> None:
        """Account for every step the writers published since the last fold."""
        # Only envs whose writer published, began or ended something since the last fold.
        envs = changed_envs(self.header, self.mask, self._seen)
        if not envs.size:
            return
        index, events = self._index, self._events
        before = events.before()
        rows: list[tuple[int, int, int]] = []
        for e in envs.tolist():
            self._fold_env(index, int(e), rows)
        if before is not None:
            rows_env = np.zeros(0, np.int64)
            rows_t = rows_env
            if rows:
                rows_env = np.concatenate([np.full(b - a, e, np.int64) for e, a, b in rows])
                rows_t = np.concatenate([np.arange(a, b, dtype=np.int64) for _, a, b in rows])
            events.after(before, rows_env, rows_t)

    def _fold_env(self, index: Any, e: int, rows: list[tuple[int, int, int]]) -> None:
        C, hdr = self.env_capacity, self.header
        for _ in range(64):  # a writer that laps the whole ring during one fold: read again
            env = index.env
            c = int(env[e, COUNT])
            P = int(load_acquire(hdr, e, PUB))
            first = max(c - 1, P - C, 0)
            ts = np.arange(first, P, dtype=np.int64)
            meta = self.records[e * C + ts % C]  # a copy (fancy indexing)
            intact_from = int(begins_fenced(hdr)[e]) - C  # steps below were (being) overwritten
            if c >= 1 and first <= c - 1 and c - 1 >= max(intact_from, int(env[e, HEAD])):
                m = meta[c - 1 - first]
                # The writer ended the newest step already folded (its end_episode).
                if m[W_T] == c - 1 and m[W_DONE] and index.slot_meta[e * C + (c - 1) % C,
                                                                      FINAL_FID] < 0:  # fmt: skip
                    index.end_running(e)
            lo = max(c, intact_from)
            if lo >= P:
                if c < P:
                    continue
                break
            new = meta[lo - first :]
            if lo > c or (env[e, LAST_END] + 1, env[e, F_COUNT]) != (
                new[0, W_START],
                new[0, W_FID],
            ):
                index.jump(e, lo, int(new[0, W_START]) - 1, int(new[0, W_FID]))
            index.advance(np.full(P - lo, e, np.int64), new[:, W_DONE].astype(np.bool_))
            rows.append((e, lo, P))
            break
        # Keep the oldest `guard` steps ahead of the writer out of reach of samples.
        env = index.env
        drop = min(int(hdr[e, BEGIN]) + self.guard - C, int(env[e, COUNT])) - int(env[e, HEAD])
        if drop > 0:
            index.dequeue(np.array([e], np.int64), drop)

    # ------------------------------------------------------------------ sampling
    def intact(self, env_ids: Array, t: Array, frame_stack: int) -> bool:
        """Whether no step a sample read (``t - k + 1 ..``) was overwritten while it read."""
        begins = begins_fenced(self.header)
        lowest = t - (frame_stack - 1)
        bad = self.mask[env_ids] & (lowest < begins[env_ids] - self.env_capacity)
        return not bool(bad.any())

    def sample(self, draws: Draws, batch_size: int, opts: DrawOptions) -> Any:
        """The buffer's draw and assembly (its ``draws`` part), again until no writer overtook
        the batch."""
        deadline = time.monotonic() + self.timeout
        sampler = draws.sampler
        beta_step = getattr(sampler, "beta_step", None)
        redrawn = False
        while True:
            try:
                drawn = sampler.draw(draws.index, batch_size, draws.rng, opts)
            except EmptyBufferError:
                # The fold after an overtaken batch may have dropped every stored step (the
                # writers lapped their rings meanwhile): fold again until steps are there.
                if not redrawn:
                    raise
                drawn = None
            if drawn is not None:
                env_ids, t = drawn.env_ids, drawn.t
                batch = draws.batch(env_ids, t, drawn.extra())
                if self.intact(env_ids, t, draws.frame_stack):
                    return batch
            redrawn = True
            self.retries += 1
            if time.monotonic() > deadline:
                raise ReplayTimeout(
                    f"sample: writers overwrote every batch drawn for {self.timeout} s; "
                    "use a larger capacity"
                )
            if beta_step is not None:
                sampler.beta_step = beta_step  # type: ignore[attr-defined]  # one step per sample
            self.fold()


def share_buffer(buf: ReplayBuffer, env_ids: Any) -> SharedHandle:
    """``buf.share(env_ids)`` (called under the buffer's lock)."""
    if buf._sync.shared is None:
        buf._sync.shared = SharedState(buf)
    state: SharedState = buf._sync.shared
    if env_ids is None:
        envs = np.arange(buf.num_envs, dtype=np.int64)
    else:
        envs = buf._writer.check_env_ids(env_ids)
    index, hdr = buf._index, state.header
    buf._fast_add = False  # the generated add writes every env; the general one checks
    env, C = index.env, buf.env_capacity
    if index.finals_capacity < C:
        # Loaded from a checkpoint with fewer final records: writers need a ring of >= C per
        # env (a record is then reused only after its step was overwritten). Reserving room
        # for C - live ends of env 0 grows every env's ring (by doubling) to at least C.
        n = C - int(env[0, F_COUNT] - env[0, F_HEAD])
        buf._writer._reserve_finals(np.zeros(n, np.int64), np.ones(n, np.bool_))
    for e in envs.tolist():
        if hdr[e, SHARED]:
            continue  # shared before: its writers' state is in the header already
        env = index.env
        hdr[e, PUB] = hdr[e, BEGIN] = hdr[e, BASE_T] = env[e, COUNT]
        hdr[e, BASE_LAST_END] = env[e, LAST_END]
        hdr[e, BASE_FCOUNT] = env[e, F_COUNT]
        hdr[e, SHARED] = 1
        state.mask[e] = True
    return SharedHandle(
        segments=cast(SharedBackend, buf._backend).segments(),
        fields=buf.schema.to_json(),
        num_envs=buf.num_envs,
        env_capacity=buf.env_capacity,
        finals_capacity=index.finals_capacity,
        env_ids=tuple(int(e) for e in envs),
        owner_pid=os.getpid(),
    )
