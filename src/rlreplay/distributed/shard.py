"""One shard of a :class:`~rlreplay.distributed.ReplayService`: a core buffer in a Ray actor.

The class is plain Python (the service wraps it with ``ray.remote``), so it is tested without
Ray too. Every method runs whole on the actor's one thread: a shard's answer about its masses
and the draw that follows in the same call see the same state.

Recovery. Ray restarts a dead shard actor by running its constructor again with the same
arguments, so what must outlive the process lives in files of the service's ``home``
directory, one pair per shard:

* ``shard-K.json`` (rewritten atomically: temporary file, then rename): the last checkpoint
  file of the shard, how many steps the shard had stored at that checkpoint, its restarts and
  the steps lost so far;
* ``shard-K.added``: one int64, the steps stored since the service started, updated in place
  (an mmap) after every write: a memory store, so it costs nothing per write, and the page
  cache keeps it when the process is killed.

A constructor that finds ``shard-K.json`` is a restart: it reloads the named checkpoint (or
starts empty if none was ever written) and counts ``added - added at the checkpoint`` steps as
lost. It then abandons every env's running episode (``abandon_episode``): the steps written
next start new episodes, so no n-step window spans the lost steps; the reloaded steps whose
windows stay incomplete for ever are counted as ``abandoned``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlreplay import (
    Batch,
    CheckpointError,
    ConfigError,
    Field,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    ReplayError,
    load,
)
from rlreplay.distributed.split import unpack_updates
from rlreplay.distributed.wire import Reply, pack_columns

# A restarted shard's write versions must exceed its dead incarnation's, for the limiter.
_VERSION_STRIDE = 1 << 40


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename (atomic)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


__all__ = ["Shard"]

Array = np.ndarray[Any, Any]


class Shard:
    """A core buffer with the calls the service makes on it.

    Args:
        capacity: The shard's buffer capacity (the service's ``capacity // num_shards``).
        fields: As for :class:`rlreplay.ReplayBuffer`.
        num_envs: Local envs (service envs ``e`` with ``e % num_shards`` equal to the shard).
        prioritized: A :class:`rlreplay.PrioritizedReplayBuffer` (proportional) if True.
        seed: The buffer's seed.
        options: Other constructor arguments (``n_step``, ``gamma``, ``alpha``, ...).
        home: The service's recovery directory (``None``: no recovery, e.g. without Ray).
        index: The shard's number ``K`` (names its files in ``home``).
        limiter: The service's rate limiter actor (or ``None``): a restarted shard tells it
            its reloaded size at once, not only at its next write.
    """

    def __init__(
        self,
        capacity: int,
        fields: Mapping[str, Field | tuple[Any, Any]],
        num_envs: int,
        prioritized: bool,
        seed: int,
        options: Mapping[str, Any],
        home: str | None = None,
        index: int = 0,
        limiter: Any = None,
    ) -> None:
        cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
        self.buffer: ReplayBuffer = cls(capacity, fields, num_envs=num_envs, seed=seed, **options)
        self.prioritized = prioritized
        self.version = 0  # counts writes, so the limiter can order the sizes it is told
        self.added = 0  # steps stored since the service started (reloads set it back)
        self.record: dict[str, Any] = {
            "checkpoint": None,  # file of the last save (or restore)
            "checkpoint_added": 0,  # ``added`` when it was written
            "restarts": 0,
            "lost": 0,  # steps stored but dropped by reloads, over all restarts
            "abandoned": 0,  # reloaded steps whose windows the cut at a reload left incomplete
        }
        self._home = None if home is None else Path(home)
        self._index = index
        self._counter: np.memmap[Any, np.dtype[np.int64]] | None = None
        if self._home is not None and self._recover() and limiter is not None:
            limiter.report_size.remote(index, self.version, self.buffer.num_sampleable)

    # ------------------------------------------------------------------ recovery
    def _paths(self) -> tuple[Path, Path]:
        assert self._home is not None  # only called with a home
        return self._home / f"shard-{self._index}.json", self._home / f"shard-{self._index}.added"

    def _recover(self) -> bool:
        """First start: create the record; a restart: reload the last checkpoint, count losses.

        Returns:
            Whether this was a restart.
        """
        record_path, counter_path = self._paths()
        if record_path.exists():
            record = json.loads(record_path.read_text(encoding="utf-8"))
            counter = np.memmap(counter_path, np.int64, mode="r+", shape=(1,))
            added_before = int(counter[0])
            record["restarts"] = int(record["restarts"]) + 1
            record["lost"] = int(record["lost"]) + max(
                0, added_before - int(record["checkpoint_added"])
            )
            self.record = record
            if record["checkpoint"] is not None:
                self._replace(load(record["checkpoint"]))
            record["abandoned"] = int(record.get("abandoned", 0)) + self._abandon_running()
            self.added = int(record["checkpoint_added"])
            self.version = int(record["restarts"]) * _VERSION_STRIDE
        else:
            counter = np.memmap(counter_path, np.int64, mode="w+", shape=(1,))
        self._counter = counter
        self._publish()
        return self.version > 0

    def _abandon_running(self) -> int:
        """Cut every env's running episode where the reloaded checkpoint left it.

        The steps lost since the checkpoint were the continuation of those episodes; steps
        written after the restart must not extend them (their windows would bootstrap across
        the gap). Returns how many reloaded steps thereby never become sampleable (at most
        ``n_step`` per env: the windows that needed a lost step).
        """
        buf = self.buffer
        index = buf._index

        def hole_steps() -> int:
            holes = index.holes()
            return 0 if holes is None else int(holes.sizes.sum())

        before = hole_steps()
        for e in range(buf.num_envs):
            buf.abandon_episode(env_id=e)
        return hole_steps() - before

    def _publish(self) -> None:
        """Write the record and the counter (after a restart, a save or a load)."""
        if self._home is None:
            return
        if self._counter is not None:
            self._counter[0] = self.added
        write_json_atomic(self._paths()[0], self.record)

    def _replace(self, buffer: ReplayBuffer) -> None:
        """Swap in a loaded buffer after checking it fits this shard's configuration."""
        old = self.buffer
        mine = {k: v for k, v in old.config().items() if k != "seed"}
        theirs = {k: v for k, v in buffer.config().items() if k != "seed"}
        if type(buffer) is not type(old) or mine != theirs:
            diff = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
            buffer.close()
            raise CheckpointError(
                f"shard {self._index}: the checkpoint's buffer ({type(buffer).__name__}, "
                f"differing in {diff or 'class'}) is not this shard's ({type(old).__name__})"
            )
        self.buffer = buffer
        old.close()

    def save(self, path: str) -> dict[str, Any]:
        """Write the buffer's checkpoint to ``path`` (the core's atomic ``save``) and remember
        it as the file to reload after a restart.

        Returns:
            ``{"added", "stored", "sampleable", "bytes"}`` at the checkpoint.
        """
        self.buffer.save(path)
        self.record["checkpoint"] = str(path)
        self.record["checkpoint_added"] = self.added
        self._publish()
        return {
            "added": self.added,
            "stored": len(self.buffer),
            "sampleable": self.buffer.num_sampleable,
            "bytes": os.path.getsize(path),
        }

    def load(self, path: str, added: int) -> tuple[int, int, int]:
        """Replace the contents by the checkpoint ``path`` (``added`` steps at its save).

        Returns:
            ``(version, stored, sampleable)`` after the load.

        Raises:
            CheckpointError: A missing, corrupt or foreign checkpoint (the shard is unchanged).
        """
        self._replace(load(path))
        self.added = int(added)
        self.record["checkpoint"] = str(path)
        self.record["checkpoint_added"] = self.added
        self.version += 1
        self._publish()
        return (self.version, *self.sizes())

    def status(self) -> dict[str, Any]:
        """Sizes, restarts, steps lost to them, reloaded steps whose windows the restarts' cuts
        left incomplete, and steps a death now would lose (one call, so one incarnation
        answers)."""
        return {
            "stored": len(self.buffer),
            "sampleable": self.buffer.num_sampleable,
            "restarts": int(self.record["restarts"]),
            "lost": int(self.record["lost"]),
            "abandoned": int(self.record.get("abandoned", 0)),
            "since_checkpoint": self.added - int(self.record["checkpoint_added"]),
            "checkpoint": self.record["checkpoint"],
        }

    def extend(self, chunks: Sequence[tuple[int, Mapping[str, Any]]]) -> tuple[int, int, int]:
        """Store runs of consecutive steps, one ``(local env, values with axis T)`` each.

        Returns:
            ``(version, sampleable count, steps stored)`` after the writes.
        """
        stored = 0
        try:
            for env, values in chunks:
                n = int(self.buffer.extend(env_id=env, **values).shape[0])
                stored += n
                self.added += n
        finally:
            self.version += 1
            if self._counter is not None:
                self._counter[0] = self.added
        return self.version, self.buffer.num_sampleable, stored

    def info(self, updates: bytes = b"") -> tuple[int, float, float, BaseException | None]:
        """``(sampleable count, mass, smallest positive mass, error)``: the mass is the count
        for a uniform shard and ``sum p ** alpha`` for a prioritized one (``inf``: no mass),
        read after applying ``updates`` (see :meth:`draw`; ``error`` is theirs)."""
        error = self._apply(updates)
        buf = self.buffer
        if isinstance(buf, PrioritizedReplayBuffer):
            # The buffer's own sum and min trees (exact), read together under its lock.
            total, smallest, count = buf.priority_mass()
            return count, total, smallest, error
        count = buf.num_sampleable
        return count, float(count), 1.0 if count else float("inf"), error

    def sample(self, batch_size: int) -> Reply:
        """Draw ``batch_size`` with the shard's own law, packed (:mod:`.wire`) with its masses
        at the draw."""
        _, mass, smallest, _ = self.info()  # a draw changes no mass: read before it
        layout, payload = pack_columns(self.buffer.sample(batch_size))
        return layout, payload, mass, smallest, None

    def draw(self, batch_size: int, updates: bytes = b"") -> Reply:
        """Apply the packed priority ``updates`` (:func:`~.split.pack_updates`; their error is
        returned, not raised), then :meth:`sample` ``batch_size`` if the shard has mass (else
        an empty layout), with its masses at the draw: the service's one-round-trip sampling,
        which splits the batch with these masses and keeps the first ``n_k`` rows of shard
        ``k``'s i.i.d. draws. One call does both, so a learner's queued updates cost no call
        of their own and land before the draw."""
        error = self._apply(updates)
        _, mass, smallest, _ = self.info()  # a draw changes no mass: read once, before it
        if not mass > 0.0:
            return (), b"", mass, smallest, error
        layout, payload = pack_columns(self.buffer.sample(batch_size))
        return layout, payload, mass, smallest, error

    def _apply(self, updates: bytes) -> BaseException | None:
        """:meth:`update_priorities` of ``updates`` (if any); its rlreplay error, returned."""
        if not updates:
            return None
        try:
            self.update_priorities(updates)
        except ReplayError as exc:  # a rejected update changes nothing (the core's rule)
            return exc
        return None

    def update_priorities(self, packed: bytes) -> int:
        """The core's ``update_priorities`` (stale ids ignored) of local ids and priorities
        packed by :func:`~rlreplay.distributed.split.pack_updates` (one cheap Ray argument)."""
        buf = self.buffer
        if not isinstance(buf, PrioritizedReplayBuffer):
            raise ConfigError("update_priorities: the service is not prioritized")
        ids, priorities = unpack_updates(packed)
        return buf.update_priorities(ids, priorities)

    def sizes(self) -> tuple[int, int]:
        """``(stored, sampleable)`` transitions."""
        return len(self.buffer), self.buffer.num_sampleable

    def get_transitions(self, ids: Array) -> Batch:
        """The core's :meth:`~rlreplay.ReplayBuffer.get_transitions` (local ids)."""
        return self.buffer.get_transitions(ids)

    def close(self) -> None:
        """Close the buffer."""
        self.buffer.close()
