"""Stand-in for ``nnabla_rl.replay_buffer``: nnabla-rl's ``ReplayBuffer`` over the rlreplay core.

nnabla-rl keeps *experiences*, any Python objects (usually tuples ``(s, a, r, non_terminal,
s_next, info)``), and hands them back by position (index 0 is the oldest kept experience)
exactly as appended. This front-end does the same with two stores, chosen per buffer without
the user asking:

* **columnar** (the fast path, :mod:`~rlreplay.compat.nnabla_rl._codec`): while every
  experience is such a tuple whose arrays and numbers have the kinds, dtypes and shapes of the
  first one, they live in one :class:`rlreplay.ReplayBuffer` (one env, ``n_step=1``):

  ==========================  ===========================================================
  nnabla-rl                   core
  ==========================  ===========================================================
  ``s`` (array)               observation field ``obs``
  ``s`` (tuple of arrays)     observation fields ``obs_0``, ``obs_1``, ... (one per element)
  ``a`` (array / tuple)       field ``action`` (or ``action_0``, ``action_1``, ...)
  ``r``                       ``reward``
  ``non_terminal == 0``       ``terminated`` (the final observation is ``s_next``)
  episode cut (see below)     ``truncated`` (the final observation is ``s_next``)
  ``s_next``                  *not stored*: the next step's ``s``, or the final observation
  ``non_terminal``, ``info``  Python objects in a side ring aligned with the core's ids
  ==========================  ===========================================================

* **object store** (:mod:`~rlreplay.compat.nnabla_rl._store`): the experiences themselves,
  as nnabla-rl keeps them. A buffer whose first experience does not fit the columnar layout
  starts here; a columnar buffer moves every kept experience here, in order, at the first
  experience that does not fit, and stays here.

Episode boundaries (columnar store). The core stores each observation once (the ``s_next`` of
a step is the ``s`` of the following step of its episode), so the adapter tells it where
episodes end: at ``non_terminal == 0`` (terminated), at a true ``info["TimeLimit.truncated"]``
(nnabla-rl's environment wrappers set it; truncated), and when an appended experience's ``s``
differs (byte for byte) from the newest experience's ``s_next``: the newest step's episode is
then cut with the core's :meth:`rlreplay.ReplayBuffer.end_episode`, ``s_next`` becoming its
final observation. The adapter caches the newest step's row while its episode runs (its
``s_next`` is known nowhere else). A bounded buffer stages the usual experiences (checked and
copied at ``append``) and writes them to the core only when something reads the core, in one
core ``extend`` per batch (:mod:`~rlreplay.compat.nnabla_rl._staging`; the core may then start
anew, its ids offset by ``_core_offset``); other experiences go to the core one by one. Each
staged experience is handed back as the tuple staging made for it at ``append``
(``_handed``, a ring aligned with the ids): the same object at every read, as nnabla-rl's
stored object, its arrays read-only views of the copies; reads of those experiences never
touch the core, so a loop of appends and samples never writes it. The draw is NumPy's, made
by a kernel where it can (:mod:`~rlreplay.compat.nnabla_rl._choice`).

Capacity. ``capacity=None`` is unbounded: the core starts with room for
``_INITIAL_CAPACITY`` steps and, when full, is rebuilt with twice the room and every stored
step re-added (:mod:`~rlreplay.compat.nnabla_rl._growth`; amortised O(1) per append;
nothing is ever dropped). A bounded buffer keeps the
newest ``capacity`` experiences, as nnabla-rl's ring does.

Random numbers: see :mod:`rlreplay.compat.nnabla_rl.random`. Pickling and copies:
:mod:`~rlreplay.compat.nnabla_rl._by_value`.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

import rlreplay.compat.nnabla_rl.random as rl_random
from rlreplay import Batch, Field, ShapeError
from rlreplay import ReplayBuffer as CoreBuffer
from rlreplay.compat.nnabla_rl._by_value import ByValue
from rlreplay.compat.nnabla_rl._checks import (
    Indices,
    PositionError,
    PositionKeyError,
    ZeroCapacityError,
    as_indices,
    check_capacity,
    check_count,
    check_seed,
    distinct_draw,
)
from rlreplay.compat.nnabla_rl._choice import choice_without_replacement
from rlreplay.compat.nnabla_rl._codec import TIMELIMIT_KEY, Codec, Row, Unfit, same
from rlreplay.compat.nnabla_rl._growth import grow_core
from rlreplay.compat.nnabla_rl._staging import Staging, staging_for, write_staged
from rlreplay.compat.nnabla_rl._store import ObjectStore
from rlreplay.compat.nnabla_rl._stored import StoredTuple
from rlreplay.spec import check_rows

__all__ = [
    "TIMELIMIT_KEY",
    "Experience",
    "Indices",
    "ReplayBuffer",
    "as_indices",
    "check_capacity",
    "check_count",
    "check_seed",
    "distinct_draw",
]

Array = np.ndarray[Any, Any]
#: An experience: any object; usually ``(s, a, r, non_terminal, s_next, info)``.
Experience = Any

_INTS = (int, np.integer)
#: The largest element of a 1-D array (the ufunc's reduce: no dispatch through ``max``).
_MAX = np.maximum.reduce
_ONES: dict[int, Array] = {}  # np.ones((n, 1)) by n, copied for each sample


def ones_column(n: int) -> Array:
    """A new ``np.ones((n, 1))`` (float64): a copy of a kept one (cheaper than ``np.ones``)."""
    kept = _ONES.get(n)
    if kept is None:
        kept = np.ones((n, 1))
        if len(_ONES) < 64:  # the few batch sizes a program uses
            _ONES[n] = kept
    return kept.copy()


#: Core room (steps) of an unbounded buffer before its first doubling.
_INITIAL_CAPACITY = 1024


class ReplayBuffer(ByValue):
    """nnabla-rl's replay buffer: experiences by position, uniform sampling without replacement.

    Holds the newest ``capacity`` experiences (all of them when ``capacity`` is None), any
    objects, each given back as appended. Index 0 is the oldest kept experience and
    ``len(buffer) - 1`` the newest. :meth:`sample` draws ``num_samples`` *distinct* indices
    uniformly from ``[0, len - num_steps + 1)``; with ``num_steps > 1`` it returns, for each
    ``j < num_steps``, the experiences at ``index + j`` (consecutive kept experiences, which may
    belong to different episodes, as in nnabla-rl). ``info["weights"]`` is
    ``np.ones((num_samples, 1))``.

    Positions out of range raise nnabla-rl's exceptions: a bounded buffer (nnabla-rl's ring)
    raises ``KeyError`` for any position outside ``[0, len)``, negative ones included; an
    unbounded one (nnabla-rl's deque) counts negative positions from the newest and raises
    ``IndexError``.

    Invariants: exactly one store is active: the core (``_core``, with ``_codec`` and the side
    ring ``_extras`` of ``(non_terminal, info, ...)`` at slot ``id % core capacity``) or the
    object store (``_objects``). With staging, ``_handed[id % core capacity]`` is the tuple
    handed out for each kept id that was staged, None for one stored one by one; staged
    experiences not yet written count in ``len``. Ids count appended experiences: the
    experience at position ``i`` has id ``_first_id() + i`` in both stores, and id
    ``_core_offset + j`` in the core is the core's id ``j``. In the core, episodes end exactly
    where the appended experiences' episodes end (see the module docstring).

    Hooks for subclasses (the prioritized, hindsight, Atari and trajectory buffers):

    * ``_objects_allowed`` (class attribute): False keeps a buffer columnar; an experience that
      does not fit then raises :class:`rlreplay.ShapeError` and values of another dtype are cast
      as NumPy assignment casts. Subclasses that override ``_build_core`` are columnar-only.
    * ``_frame_stack``: frames per state the core rebuilds (set before the first append).
    * ``_make_codec(experience)``, ``_build_core(capacity, fields, seed)``: the schema and the
      core (built at the first experience that fits).
    * ``_first_id()``, ``_next_id``: ids of the oldest kept and of the next experience.
    * ``_experiences(ids)`` / ``_raw_experiences(ids)``: experiences at ids, decorated or as
      stored; ``_decode_batch(batch)``: experiences of a core batch (as stored);
      ``_decorate(e)``: applied to every experience handed out.
    * ``_on_written(ended)`` after each core step, ``_on_cut()`` after a cut episode.

    Cost: :meth:`append` is O(size of one experience) (amortised, with the doublings of an
    unbounded buffer, or a bounded one's batched core writes when the core is read);
    :meth:`sample` is O(num_samples * num_steps), independent of the buffer's size: the
    staged experiences' tuples gathered in one C loop, others by one vectorised core gather
    and new tuples.

    Args:
        capacity: Most experiences kept (an int ``>= 0``), or None for no limit.
        seed: Seed of a random generator of this buffer's own (an rlreplay addition); without
            it the buffer draws from nnabla-rl's global ``random.drng``, as nnabla-rl does.

    Raises:
        AssertionError: A negative ``capacity`` (as nnabla-rl; also an ``rr.ConfigError``).
        TypeError: A ``capacity`` that is not an int.
        ConfigError: A bad ``seed`` (a ``ValueError``).

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
        >>> buffer = ReplayBuffer(capacity=100, seed=0)
        >>> for t in range(5):
        ...     s, s_next = np.full(3, t, np.float32), np.full(3, t + 1, np.float32)
        ...     buffer.append((s, np.array([t % 2]), 1.0, float(t < 4), s_next, {}))
        >>> experiences, info = buffer.sample(num_samples=2)
        >>> len(experiences), info["weights"].shape, len(buffer), buffer[0][3]
        (2, (2, 1), 5, 1.0)
        >>> buffer.append(7)  # any object: the buffer moves to its object store
        >>> buffer[5], buffer[0][3]
        (7, 1.0)
    """

    #: Whether experiences that do not fit the columnar layout go to an object store.
    _objects_allowed: ClassVar[bool] = True
    #: The buffer's id of the core's id 0 (a class default for buffers pickled without it).
    _core_offset: int = 0

    def __init__(self, capacity: int | None = None, *, seed: int | None = None) -> None:
        self._capacity = check_capacity("capacity", capacity, allow_none=True)
        self._frame_stack = 1  # frames per state the core rebuilds (Atari: stacked_frames)
        self._seed = check_seed(seed)
        self._own_rng = None if self._seed is None else np.random.default_rng(self._seed)
        self._generation = 0  # cores built so far (each gets its own derived seed)
        self._core: CoreBuffer | None = None
        self._core_offset = 0  # the buffer's id of the core's id 0 (_staging restarts it)
        self._core_len: int | None = 0  # len(self._core), kept by the adapter (None: unknown)
        self._codec: Codec | None = None
        self._extras: list[tuple[Any, ...] | None] = []  # slot id % core capacity
        self._next_id = 0  # the id of the next appended experience
        self._newest: Row | None = None  # the core's newest step while its episode runs
        self._objects: ObjectStore | None = None  # the object store, once active
        self._staging: Staging | None = None  # usual experiences awaiting the core (_staging)
        # With staging: the tuple handed out for each id at slot id % core capacity (as
        # _extras), None where the experience went to the core one by one (_staging)
        self._handed: list[StoredTuple | None] | None = None

    @property
    def _rng(self) -> np.random.Generator:
        """The generator draws come from: the buffer's own (``seed=``) or nnabla-rl's ``drng``."""
        return rl_random.drng if self._own_rng is None else self._own_rng

    # ------------------------------------------------------------------ sizes
    @property
    def capacity(self) -> int | None:
        """Capacity (max length) of this replay buffer otherwise None."""
        return self._capacity

    def __len__(self) -> int:
        if self._objects is not None:
            return len(self._objects)
        st = self._staging
        if st is not None and self._next_id != st.synced:
            # the core's steps and the staged ones, without writing them (a bounded buffer)
            core_len = self._core_len
            if core_len is None:
                assert self._core is not None
                core_len = self._core_len = len(self._core)
            n = core_len + self._next_id - st.synced
            capacity = self._capacity
            return n if capacity is None or n < capacity else capacity
        return self._core_visible()

    def _core_visible(self) -> int:
        """How many of the core's newest steps are kept experiences."""
        n = self._core_size()
        return n if self._capacity is None else min(n, self._capacity)

    def _core_size(self) -> int:
        """``len(self._core)``, without asking the core again until it changes.

        The core's ``len`` takes its lock and sums its env table (a few microseconds); the
        adapter knows the count after each of its own writes (one step per ``add``, the oldest
        overwritten when full) and asks the core only after other changes (``_core_changed``).
        Staged experiences are written first: every read of the core comes through here.
        """
        st = self._staging
        if st is not None and self._next_id != st.synced:
            write_staged(self, st)
        if self._core is None:
            return 0
        if self._core_len is None:
            self._core_len = len(self._core)
        return self._core_len

    def _core_changed(self) -> None:
        """Forget the cached core size (after an ``end_episode``, ``dequeue`` or rebuild)."""
        self._core_len = None

    def _stored_count(self) -> int:
        """Experiences in the active store (the trajectory buffer adds its running steps)."""
        return len(self)

    def _first_id(self) -> int:
        """Id of the oldest experience in the active store (position 0)."""
        return self._next_id - self._stored_count()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity}, len={len(self)})"

    # ------------------------------------------------------------------ core construction
    def _columnar_only(self) -> bool:
        return not self._objects_allowed or type(self)._build_core is not ReplayBuffer._build_core

    def _make_codec(self, experience: Any) -> Codec:
        return Codec.infer(experience, cast=self._columnar_only())

    def _core_capacity(self) -> int:
        """Steps the core keeps: ``capacity`` plus the frames the oldest stacks reach back to."""
        k = self._frame_stack
        if self._capacity is None:
            return max(_INITIAL_CAPACITY, k + 1)
        return max(self._capacity + k - 1, k + 1)

    def _build_core(self, capacity: int, fields: dict[str, Field], seed: int | None) -> CoreBuffer:
        """The core buffer (subclasses choose another class or add transforms)."""
        return CoreBuffer(
            capacity,
            fields,
            n_step=1,
            gamma=1.0,
            frame_stack=self._frame_stack,
            stack_pad="first",  # what a FrameStack wrapper shows at an episode's start
            seed=seed,
        )

    def _new_core(self, capacity: int) -> CoreBuffer:
        assert self._codec is not None
        seed = None
        if self._seed is not None:
            ss = np.random.SeedSequence([self._seed, self._generation])
            seed = int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))
        self._generation += 1
        return self._build_core(capacity, self._codec.fields(), seed)

    def _encode(self, experience: Any) -> Row | None:
        """The row of an experience, or None if it goes to the object store.

        The first experience also fixes the schema and builds the core. A buffer without an
        object store raises :class:`rlreplay.ShapeError` for an experience that does not fit.
        """
        if self._objects is not None:
            return None
        try:
            if self._codec is None or self._core is None:
                if self._capacity == 0:
                    return None  # nothing to store: the object store raises nnabla-rl's error
                codec = self._make_codec(experience)
                row = codec.encode(experience)
                self._codec = codec
                self._core = self._new_core(self._core_capacity())
                self._core_changed()
                self._extras = [None] * self._core.capacity
                self._handed = [None] * self._core.capacity  # (the staging keeps this ring)
                self._staging = self._make_staging()
                if self._staging is None:
                    self._handed = None
                return row
            return self._codec.encode(experience)
        except Unfit as exc:
            if self._columnar_only():
                raise ShapeError(f"experience: {exc}") from None
            return None

    # ------------------------------------------------------------------ writing
    def append(self, experience: Experience) -> None:
        """Add new experience to the replay buffer.

        Args:
            experience: Any object; usually ``(s, a, r, non_terminal, s_next, info)``. It
                comes back exactly as appended (its arrays as equal copies when it is kept in
                the columnar store).

        Raises:
            ZeroDivisionError: The buffer's capacity is 0 (as nnabla-rl's ring).

        Notes:
            If the replay buffer size is full, the oldest (head of the buffer) experience will
            be dropped off and the given experience will be added to the tail of the buffer.
        """
        st = self._staging
        if st is not None:
            if st.push(self, experience):  # staged (checked, copied, handed out from now on)
                return
            write_staged(self, st)  # an unusual experience: the one-by-one path, in order
        row = self._encode(experience)
        if row is None:
            self._append_object(experience)
            return
        # the first experience built the core, and the staging
        if st is None and self._staging is not None and self._staging.push(self, experience):
            return
        self._append_row(row)

    def _make_staging(self) -> Staging | None:
        """Staging for this buffer's appends, or None (see :func:`staging_for`)."""
        return staging_for(self, ReplayBuffer)

    def _append_row(self, row: Row) -> None:
        """Store a row after the newest step, cutting the running episode if ``s`` changed."""
        if self._newest is not None and not self._continues(self._newest, row):
            self._cut()
        self._write(row, self._end_of(row))

    def append_all(self, experiences: Sequence[Experience]) -> None:
        """Add list of experiences to the replay buffer (each as :meth:`append`)."""
        for experience in experiences:
            self.append(experience)

    @staticmethod
    def _end_of(row: Row) -> str | None:
        if row.terminal:
            return "terminated"
        return "truncated" if row.timelimit else None

    def _continues(self, prev: Row, row: Row) -> bool:
        """Whether ``row`` is the step after ``prev`` in one episode."""
        return same(row.obs, prev.next_obs)

    def _cut(self) -> None:
        """End the running episode at the core's newest step, its ``s_next`` as the final."""
        newest = self._newest
        assert newest is not None and self._core is not None and self._codec is not None
        self._core.end_episode(0, **self._codec.final_values(newest))
        self._core_changed()
        self._newest = None
        self._on_cut()

    def _write(self, row: Row, end: str | None) -> None:
        """Add one step to the core (``end``: None, ``"terminated"`` or ``"truncated"``)."""
        assert self._codec is not None and self._core is not None
        if self._capacity is None and self._core_size() == self._core.capacity:
            grow_core(self)  # unbounded: twice the room (_growth)
        core = self._core
        stored = self._core_size()
        values = self._codec.step_values(row)
        values["terminated"] = end == "terminated"
        values["truncated"] = end == "truncated"
        if end is not None:
            values.update(self._codec.final_values(row))
        core.add(**values)
        self._core_len = min(stored + 1, core.capacity)
        self._extras[self._next_id % core.capacity] = row.side
        if self._handed is not None:
            self._handed[self._next_id % core.capacity] = None  # read from the core
        self._next_id += 1
        if self._staging is not None:
            self._staging.synced = self._next_id  # (the core holds every older experience)
        self._newest = row if end is None else None
        self._on_written(end is not None)

    def _on_written(self, ended: bool) -> None:
        """Hook after each stored step (the trajectory buffer counts trajectories)."""

    def _on_cut(self) -> None:
        """Hook after :meth:`_cut` ended the running episode."""

    # ------------------------------------------------------------------ the object store
    def _object_capacity(self) -> int | None:
        """Room of the object store (the trajectory buffer drops whole trajectories itself)."""
        return self._capacity

    def _append_object(self, experience: Any) -> None:
        if self._capacity == 0:
            raise ZeroCapacityError(
                "append: the buffer's capacity is 0 (nnabla-rl's ring divides by it)"
            )
        if self._objects is None:
            self._to_objects()
        assert self._objects is not None
        self._objects.append(experience)
        self._next_id += 1

    def _to_objects(self) -> None:
        """Move every stored experience, in order, from the core to a new object store."""
        n = self._stored_count()
        ids = self._first_id() + np.arange(n, dtype=np.int64)
        kept = self._raw_experiences(ids) if n else []
        self._objects = ObjectStore(self._object_capacity(), kept)
        self._staging, self._handed = None, None
        if self._core is not None:
            self._core.close()
        self._core, self._codec, self._extras, self._newest = None, None, [], None
        self._core_offset = 0
        self._core_changed()

    # ------------------------------------------------------------------ reading
    def __getitem__(self, item: int) -> Experience:
        if self._bounded() and (item < 0 or item >= len(self)):
            # nnabla-rl's ring compares before it indexes: KeyError even for a float
            raise PositionKeyError(
                f"index {item!r} is out of range for a buffer of {len(self)} experiences"
            )
        pos = self._positions(np.array([operator.index(item)], np.int64))
        return self._experiences(self._first_id() + pos)[0]

    def _bounded(self) -> bool:
        """Whether nnabla-rl keeps this buffer in its ring (else in a deque)."""
        return self._capacity is not None

    def _positions(self, pos: Array) -> Array:
        """Positions made non-negative as nnabla-rl's ring (bounded) or deque (unbounded) does.

        Raises:
            KeyError: Bounded: a position outside ``[0, len)``.
            IndexError: Unbounded: a position outside ``[-len, len)``.
        """
        n = len(self)
        bounded = self._bounded()
        if not bounded:
            pos = np.where(pos < 0, pos + n, pos)
        bad = (pos < 0) | (pos >= n)
        if bad.any():
            error = PositionKeyError if bounded else PositionError
            raise error(f"index {int(pos[bad][0])} is out of range for a buffer of {n} experiences")
        return pos

    def _transitions(self, ids: Array) -> Batch:
        """The core's transitions at stored, sampleable ``ids`` (HER relabels them)."""
        assert self._core is not None
        self._core_size()  # staged experiences are written first
        return self._core.get_transitions(ids - self._core_offset if self._core_offset else ids)

    def _sides_of(self, ids: Array) -> list[tuple[Any, ...]]:
        """``(non_terminal, info, ...)`` of each core id, as appended."""
        assert self._core is not None
        extras = self._extras
        out: list[Any] = list(map(extras.__getitem__, (ids % self._core.capacity).tolist()))
        if None in out:
            return [(1.0,) if e is None else e for e in out]
        return out

    def _extras_of(self, ids: Array) -> list[tuple[Any, ...]]:
        """``(info, ...)`` of each core id, as appended."""
        return [side[1:] for side in self._sides_of(ids)]

    def _decode_batch(self, batch: Mapping[str, Array]) -> list[Experience]:
        assert self._codec is not None
        ids = np.asarray(batch["ids"]) + self._core_offset  # the buffer's ids
        return self._codec.decode(batch, self._sides_of(ids))

    def _raw_experiences(self, ids: Array) -> list[Experience]:
        """Experiences at kept ids, as stored (not decorated), in order."""
        if self._objects is not None:
            return self._objects.get((ids - self._first_id()).tolist())
        if not ids.size:
            return []  # e.g. an empty trajectory, possibly before any store exists
        handed = self._handed
        if handed is not None:
            # the tuples handed out since their append (each as nnabla-rl's stored object)
            cached = list(map(handed.__getitem__, (ids % len(handed)).tolist()))
            if all(cached):  # (a tuple of an experience is never empty; None is false)
                return cached
            # some were stored one by one: those from the core, the others as handed out
            missing = np.flatnonzero(~np.fromiter(map(bool, cached), bool, len(cached)))
            for j, e in zip(missing.tolist(), self._from_core(ids[missing]), strict=True):
                cached[j] = e
            return cached
        return self._from_core(ids)

    def _from_core(self, ids: Array) -> list[Experience]:
        """Experiences at kept ids (not empty), new tuples decoded from the core."""
        self._core_size()  # the core is read: staged experiences are written first
        codec = self._codec
        assert codec is not None
        if self._newest is None or int(ids.max()) < self._next_id - 1:  # (ids are kept ids)
            return self._decode_batch(self._transitions(ids))
        cached = ids == self._next_id - 1
        out: list[Experience] = [None] * ids.shape[0]
        stored = np.flatnonzero(~cached)
        if stored.size:
            decoded = self._decode_batch(self._transitions(ids[stored]))
            for j, e in zip(stored.tolist(), decoded, strict=True):
                out[j] = e
        for j in np.flatnonzero(cached).tolist():
            row = self._newest
            assert row is not None
            out[j] = codec.decode(codec.row_batch(row), [row.side])[0]
        return out

    def _experiences(self, ids: Array) -> list[Experience]:
        """Experiences at kept ids, decorated, in order."""
        raw = self._raw_experiences(ids)
        if type(self)._decorate is ReplayBuffer._decorate:
            return raw  # nothing to decorate: no per-item call
        return [self._decorate(e) for e in raw]

    def _decorate(self, experience: Experience) -> Experience:
        """Hook applied to every experience handed out (DecorableReplayBuffer)."""
        return experience

    # ------------------------------------------------------------------ sampling
    def sample(
        self, num_samples: int = 1, num_steps: int = 1
    ) -> tuple[list[Experience] | tuple[list[Experience], ...], dict[str, Any]]:
        """Randomly sample num_samples experiences from the replay buffer.

        The steps are nnabla-rl 0.16.0's, in its order (so the same calls fail and the same
        draws are made): ``max_index = len - num_steps + 1``; ``num_samples > max_index``
        raises; :meth:`_random_indices` draws; :meth:`sample_indices` checks ``num_steps`` and
        reads (a ``num_steps`` below 1 is thus rejected after the draw, as there).

        Args:
            num_samples: Number of samples to sample from the replay buffer. Defaults to 1.
            num_steps: Number of timesteps to sample. Should be greater than 0. Defaults to 1.

        Returns:
            ``(experiences, info)``: a list of ``num_samples`` experiences, or with
            ``num_steps > 1`` a tuple of ``num_steps`` such lists (entry ``j`` holds the
            experiences ``j`` steps after the drawn ones); ``info["weights"]`` is
            ``np.ones((num_samples, 1))``.

        Raises:
            ValueError: num_samples exceeds the maximum possible index, num_samples is 0
                ("Indices are empty") or negative (NumPy's draw), or num_steps is 0 or
                negative.
            TypeError: A num_samples NumPy's draw does not take as a size (a float, a bool).
        """
        n = len(self)
        max_index = n - num_steps + 1
        if num_samples > max_index:
            raise ValueError(
                f"num_samples: {num_samples} is greater than the size of buffer: {max_index}"
            )
        if (
            type(num_samples) is int
            and type(num_steps) is int
            and num_steps == 1
            and num_samples > 0
            and self._handed is not None
            and type(self)._random_indices is ReplayBuffer._random_indices
            and type(self).sample_indices is ReplayBuffer.sample_indices
        ):
            # The steps below, for the usual call and this class's draw (its positions are in
            # [0, max_index), max_index = len): the size check, the draw, the handed tuples
            check_rows("num_samples", num_samples, max_index, 32, "sample")
            rng = self._own_rng
            if rng is None:
                rng = rl_random.drng
            indices = choice_without_replacement(rng, max_index, num_samples)
            handed = self._handed
            ring = len(handed)
            head = (self._next_id - n) % ring  # slot of position 0
            # position p is at slot (p + head) % ring, which the list reads at index
            # p + head - ring (in [-ring, ring): a negative index counts from the end)
            slots = indices + (head - ring) if head else indices
            out = list(map(handed.__getitem__, slots.tolist()))
            if all(out):  # (a tuple of an experience is never empty; None is false)
                if type(self)._decorate is not ReplayBuffer._decorate:
                    out = [self._decorate(e) for e in out]
                return out, {"weights": ones_column(num_samples)}
            return self.sample_indices(indices, num_steps=1)
        if isinstance(num_samples, _INTS) and isinstance(num_steps, _INTS):
            # Before the draw: NumPy's draw without replacement permutes max_index positions
            # (a num_steps below 1 raises it), and the reads of num_steps steps follow.
            b, k = int(num_samples), max(1, int(num_steps))
            check_rows("num_samples", num_samples, max(int(max_index), b * k), 32, "sample")
        indices = self._random_indices(num_samples=num_samples, max_index=max_index)
        return self.sample_indices(indices, num_steps=num_steps)

    def _random_indices(self, num_samples: int, max_index: int | None = None) -> Array:
        """``num_samples`` distinct positions of ``[0, max_index)`` (default: ``len``).

        nnabla-rl's draw, ``drng.choice(max_index, size=num_samples, replace=False)``; its
        errors are NumPy's (a subclass overriding this changes how :meth:`sample` draws, as
        in nnabla-rl).
        """
        if max_index is None:
            max_index = len(self)
        # NumPy's numbers, drawn by a kernel where it can (_choice)
        return choice_without_replacement(self._rng, max_index, num_samples)

    def sample_indices(
        self, indices: Indices, num_steps: int = 1
    ) -> tuple[list[Experience] | tuple[list[Experience], ...], dict[str, Any]]:
        """Sample experiences for given indices from the replay buffer.

        Entry ``j`` of the result holds ``buffer[index + j]`` for each index, as nnabla-rl
        reads them (so an unbounded buffer counts a negative ``index + j`` from the newest).
        Indices that are not a 1-D integer array or sequence are read one by one with
        ``buffer[index + j]``, as nnabla-rl reads every index (so they fail as there).

        Args:
            indices: Positions of the experiences (0 is the oldest kept one).
            num_steps: Number of timesteps to sample. Should be greater than 0. Defaults to 1.

        Returns:
            As :meth:`sample`, for the given indices.

        Raises:
            ValueError: If indices are empty or num_steps is 0 or negative.
            KeyError: Bounded buffer: an ``index + j`` outside ``[0, len)``.
            IndexError: Unbounded buffer: an ``index + j`` outside ``[-len, len)``.
            TypeError: A non-integer ``num_steps`` other than 1 (``range`` of it), or a
                non-integer index nnabla-rl's containers reject.
        """
        if len(indices) == 0:
            raise ValueError("Indices are empty")
        if num_steps < 1:
            raise ValueError(f"num_steps: {num_steps} should be greater than 0!")
        steps = 1 if num_steps == 1 else operator.index(num_steps)  # range(2.0) fails there
        weights = ones_column(len(indices))
        idx = np.asarray(indices)
        if idx.ndim != 1 or idx.dtype.kind not in "iub":  # read as nnabla-rl reads them
            if steps == 1:
                return [self[index] for index in indices], {"weights": weights}
            rows = tuple([self[index + j] for index in indices] for j in range(steps))
            return rows, {"weights": weights}
        if idx.dtype != np.int64:
            idx = idx.astype(np.int64)
        return self._read(idx, steps), {"weights": weights}

    def _read(self, idx: Array, steps: int) -> list[Experience] | tuple[list[Experience], ...]:
        """:meth:`sample_indices`' read of int64 positions ``idx`` (1-D, not empty), steps >= 1."""
        if steps == 1:  # (the prioritized buffers read through here too)
            if self._handed is not None:
                # every position in [0, len) (a negative int64 is a uint64 beyond any length)
                top, n = int(_MAX(idx.view(np.uint64))), len(self)
                if top < n:
                    out = self._handed_at(idx, top, n)
                    if out is not None:
                        return out
            return self._experiences(self._first_id() + self._positions(idx))
        self._check_window(idx, steps)
        pos = self._positions((idx[None, :] + np.arange(steps)[:, None]).reshape(-1))
        flat, B = self._experiences(self._first_id() + pos), idx.shape[0]
        return tuple(flat[j * B : (j + 1) * B] for j in range(steps))

    def _handed_at(self, idx: Array, top: int, n: int) -> list[Experience] | None:
        """The handed tuples at int64 positions ``idx`` (each in ``[0, top]``, ``top < n``,
        ``n = len(self)``), decorated; None if one was not staged (it is read from the core).

        The tuples are the ones staging made at ``append`` (the experience as nnabla-rl's
        stored object: the same one at every read), gathered in one C loop.
        """
        handed = self._handed
        assert handed is not None
        ring = len(handed)
        head = (self._next_id - n) % ring  # slot of position 0
        # position p is at slot (p + head) % ring: list index p + head - ring (see sample)
        slots = idx + (head - ring) if head else idx
        out = list(map(handed.__getitem__, slots.tolist()))
        if not all(out):  # (a tuple of an experience is never empty; None is false)
            return None
        if type(self)._decorate is ReplayBuffer._decorate:
            return out
        return [self._decorate(e) for e in out]

    def _check_window(self, idx: Array, steps: int) -> None:
        """Raise what nnabla-rl's reads would, before ``len(idx) * steps`` positions are made.

        nnabla-rl reads ``buffer[index + j]`` for ``j`` in ``range(steps)``, each index in
        turn: the first read out of range raises (a ``KeyError`` bounded, an ``IndexError``
        unbounded). That read is found here in ``O(len(idx))`` and made, so a ``steps`` far
        beyond the buffer fails as there without allocating; reads that are all in range but
        would take more than the size budget raise :class:`rlreplay.ConfigError` (a
        ``ValueError``, as nnabla-rl's refusals of sizes).
        """
        n = len(self)
        lo = 0 if self._bounded() else -n
        # first j at which index i leaves the range: 0 if it starts outside, else n - i
        first_bad = np.where((idx < lo) | (idx >= n), 0, n - idx)
        k = int(np.argmin(first_bad))
        if int(first_bad[k]) < steps:
            self._positions(np.array([int(idx[k]) + int(first_bad[k])], np.int64))
        check_rows("num_steps", steps, idx.shape[0] * steps, 32, "sample_indices")

    def update_priorities(self, errors: Any) -> None:
        """Does nothing: only prioritized buffers keep priorities (as in nnabla-rl)."""
