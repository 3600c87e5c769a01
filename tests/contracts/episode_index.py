"""The episode index's contract (:class:`rlreplay.episodes.EpisodeIndex`) as check functions.

Every check takes a factory ``make(num_envs, env_capacity, n_step, frame_stack, finals_capacity)``
returning a fresh index, drives it as the buffer's writer does (``reserve_finals`` before steps
that end episodes, then ``advance``; ``defer_plain`` for lockstep steps; ``end_running``,
``abandon_running``, ``dequeue``, ``clear``) and compares every answer with :class:`RefIndex`,
a slow model that keeps the kind of every step ever added and derives everything from it by
definition. ``index_checks()`` lists the checks; ``check_episode_index(make)`` runs them all.

The definitions the model states (for env ``e`` with ``count`` steps added, ``C`` slots, window
``n`` and stack ``k``):

* step ``t`` has the id ``t * E + e``; it is *stored* while ``head <= t < count``, where
  ``head = max(count - C, the first step not dequeued or cleared)``; an issued id of a step that
  is not stored is *stale*;
* its episode runs from ``start`` (after the previous end) to ``end`` (the first end at or after
  it, or none while it runs); an end either has a final observation or is *abandoned*;
* it is *sampleable* exactly when it is stored, its window is known (its episode ended with a
  final observation; or ``t + n <= end`` for an abandoned one; or ``t + n <= count - 1`` while
  it runs) and no frame it stacks was overwritten: ``max(start, t - k + 1) >= head``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.episodes import EpisodeIndex
from rlreplay.episodes.index import COUNT, EP_START, HEAD

__all__ = ["Driver", "IndexFactory", "RefIndex", "check_episode_index", "index_checks"]

Array = np.ndarray[Any, Any]
IndexFactory = Callable[[int, int, int, int, int], EpisodeIndex]

STEP, END, CUT = "step", "end", "cut"  # a plain step; an end with a final; an abandoned end


class RefIndex:
    """The slow, obviously correct model: per env, the kind of every step ever added."""

    def __init__(self, num_envs: int, env_capacity: int, n_step: int, frame_stack: int) -> None:
        self.E, self.C, self.n, self.k = num_envs, env_capacity, n_step, frame_stack
        self.kinds: list[list[str]] = [[] for _ in range(num_envs)]
        self.floor = [0] * num_envs  # steps before it were dequeued or cleared

    # ------------------------------------------------------------------ definitions
    def count(self, e: int) -> int:
        return len(self.kinds[e])

    def head(self, e: int) -> int:
        return max(self.floor[e], self.count(e) - self.C)

    def stored(self, e: int, t: int) -> bool:
        return self.head(e) <= t < self.count(e)

    def start(self, e: int, t: int) -> int:
        j = t - 1
        while j >= 0 and self.kinds[e][j] == STEP:
            j -= 1
        return j + 1

    def end(self, e: int, t: int) -> int:
        """The step that ends ``t``'s episode, ``-1`` while it runs."""
        for j in range(t, self.count(e)):
            if self.kinds[e][j] != STEP:
                return j
        return -1

    def sampleable(self, e: int, t: int) -> bool:
        if not self.stored(e, t):
            return False
        a = self.end(e, t)
        if a < 0:
            known = t + self.n <= self.count(e) - 1
        elif self.kinds[e][a] == END:
            known = True
        else:
            known = t + self.n <= a
        return known and max(self.start(e, t), t - self.k + 1) >= self.head(e)

    def in_hole(self, e: int, t: int) -> bool:
        """A stored step whose abandoned episode leaves its window incomplete for ever."""
        a = self.end(e, t)
        return a >= 0 and self.kinds[e][a] == CUT and t + self.n > a

    def issued(self) -> list[tuple[int, int]]:
        return [(e, t) for e in range(self.E) for t in range(self.count(e))]

    # ------------------------------------------------------------------ operations
    def add(self, e: int, done: bool) -> int:
        self.kinds[e].append(END if done else STEP)
        return self.count(e) - 1

    def end_running(self, e: int) -> int:
        """The step that now ends, or -1 where the index must refuse."""
        t = self.count(e) - 1
        if t < self.head(e) or self.kinds[e][t] != STEP:
            return -1
        self.kinds[e][t] = END
        return t

    def abandon(self, e: int) -> int:
        t = self.count(e) - 1
        if t < 0 or self.kinds[e][t] != STEP:
            return -1
        self.kinds[e][t] = CUT
        return t

    def dequeue(self, e: int, n: int) -> None:
        self.floor[e] = self.head(e) + n

    def clear(self) -> None:
        self.floor = [self.count(e) for e in range(self.E)]


@dataclass
class Driver:
    """An index and its model, driven together as the buffer's writer drives the index.

    ``positions`` tracks where each ended step's final record is (as ``advance`` and
    ``end_running`` said, moved as ``reserve_finals`` said): what a storage's finals follow.
    """

    index: EpisodeIndex
    ref: RefIndex
    positions: dict[tuple[int, int], int] = field(default_factory=dict)
    ids: set[int] = field(default_factory=set)

    @classmethod
    def make(cls, make: IndexFactory, E: int, C: int, n: int, k: int, F: int) -> Driver:
        return cls(make(E, C, n, k, F), RefIndex(E, C, n, k))

    def _reserve(self, rows_env: Array, rows_done: Array) -> None:
        moved = self.index.reserve_finals(rows_env, rows_done)
        if moved is not None:
            old, new = moved
            assert len(set(new.tolist())) == new.shape[0], "two live records moved to one row"
            where = dict(zip(old.tolist(), new.tolist(), strict=True))
            # Every stored step's record is live and moves; a dead one's row may be reused.
            self.positions = {
                key: where[p] for key, p in self.positions.items() if self.ref.stored(*key)
            }

    def advance(self, rows: list[tuple[int, bool]]) -> None:
        """New steps, one per ``(env, done)`` row (one env's rows in time order)."""
        rows_env = np.array([e for e, _ in rows], np.int64)
        rows_done = np.array([d for _, d in rows], np.bool_)
        if rows_done.any():
            self._reserve(rows_env, rows_done)
        t, slots, fpos, same = self.index.advance(rows_env, rows_done)
        want_t = [self.ref.add(e, d) for e, d in rows]
        assert t.tolist() == want_t
        assert slots.tolist() == [e * self.ref.C + s % self.ref.C for (e, _), s in
                                  zip(rows, want_t, strict=True)]  # fmt: skip
        assert bool(same) == (len(set(want_t)) == 1)
        for (e, d), s, p in zip(rows, want_t, fpos.tolist(), strict=True):
            if d:
                self.positions[(e, s)] = p
            else:
                assert p == -1
            self.issue(e, s)

    def issue(self, e: int, t: int) -> None:
        new = t * self.ref.E + e
        assert new not in self.ids, f"id {new} issued twice"
        self.ids.add(new)

    def lockstep(self) -> None:
        """One plain step of every env through ``defer_plain`` (-1 unless counts are equal)."""
        counts = {self.ref.count(e) for e in range(self.ref.E)}
        t = self.index.defer_plain()
        if len(counts) != 1:
            assert t == -1
            return
        assert t == counts.pop()
        for e in range(self.ref.E):
            self.ref.add(e, False)
            self.issue(e, t)

    def end_running(self, e: int) -> None:
        if self.ref.count(e) > self.ref.head(e):  # as the writer: reserve if a step is stored
            self._reserve(np.array([e], np.int64), np.ones(1, np.bool_))
        t = self.ref.end_running(e)
        if t < 0:
            with pytest.raises(rr.InvalidIdError):
                self.index.end_running(e)
            return
        got_t, slot, pos = self.index.end_running(e)
        assert (got_t, slot) == (t, e * self.ref.C + t % self.ref.C)
        self.positions[(e, t)] = pos

    def abandon(self, e: int) -> None:
        assert self.index.abandon_running(e) == self.ref.abandon(e)

    def dequeue(self, e: int, n: int) -> None:
        if self.ref.count(e) - self.ref.head(e) >= n:  # the index's precondition
            self.index.dequeue(np.array([e], np.int64), n)
            self.ref.dequeue(e, n)

    def clear(self) -> None:
        self.index.clear()
        self.ref.clear()

    def check(self) -> None:
        """Every answer of the index is the model's."""
        assert_matches(self.index, self.ref, self.positions)


def assert_matches(
    index: EpisodeIndex, ref: RefIndex, positions: dict[tuple[int, int], int] | None = None
) -> None:
    """Ids, staleness, sampleability, sizes, episode bounds and final records as defined."""
    E, C = ref.E, ref.C
    assert index.stored_per_env().tolist() == [ref.count(e) - ref.head(e) for e in range(E)]
    assert index.stored == sum(ref.count(e) - ref.head(e) for e in range(E))
    issued = ref.issued()
    ids = np.array([t * E + e for e, t in issued], np.int64)
    env_ids, t, stale = index.split_ids(ids)
    assert env_ids.tolist() == [e for e, _ in issued] and t.tolist() == [s for _, s in issued]
    assert stale.tolist() == [not ref.stored(e, s) for e, s in issued]
    for e in range(E):  # the next id of every env was never issued
        with pytest.raises(rr.InvalidIdError):
            index.split_ids(np.array([ref.count(e) * E + e], np.int64))
    ok = index.sampleable(env_ids, t)
    assert ok.tolist() == [ref.sampleable(e, s) for e, s in issued]
    want = [(e, s) for e, s in issued if ref.sampleable(e, s)]
    got_e, got_t = index.sampleable_steps()
    assert list(zip(got_e.tolist(), got_t.tolist(), strict=True)) == want
    assert index.sizes().tolist() == [sum(1 for w in want if w[0] == e) for e in range(E)]
    stored = [(e, s) for e, s in issued if ref.stored(e, s)]
    if not stored:
        return
    se = np.array([e for e, _ in stored], np.int64)
    st_ = np.array([s for _, s in stored], np.int64)
    slots = index.slots(se, st_)
    assert slots.tolist() == [e * C + s % C for e, s in stored]  # env e's ring only
    assert index.in_hole(se, st_).tolist() == [ref.in_hole(e, s) for e, s in stored]
    assert index.ep_start[slots].tolist() == [ref.start(e, s) for e, s in stored]
    assert index.ep_end[slots].tolist() == [ref.end(e, s) for e, s in stored]
    F = index.finals_capacity
    fid = index.final_fid[slots]
    for (e, s), f in zip(stored, fid.tolist(), strict=True):
        kind = ref.kinds[e][s]
        assert (f >= 0) == (kind == END) and (f == -1) == (kind == STEP), (e, s, f, kind)
        if kind == END:  # a live final record, owned by this step, in env e's records
            pos = e * F + f % F
            assert index.final_owner[pos] == s
            if positions is not None:
                assert positions[(e, s)] == pos


def copy_into_fresh(make: IndexFactory, index: EpisodeIndex, F0: int = 2) -> EpisodeIndex:
    """A fresh index given ``index``'s state arrays, as a checkpoint load gives them."""
    fresh = make(index.num_envs, index.env_capacity, index.n_step, index.frame_stack, F0)
    fresh.set_finals_capacity(index.finals_capacity)
    src, dst = index.state_arrays(), fresh.state_arrays()
    assert list(src) == list(dst)
    for name, arr in src.items():
        assert dst[name].shape == arr.shape and dst[name].dtype == arr.dtype, name
        dst[name][...] = arr
    fresh.check_loaded()
    return fresh


def episodes(d: Driver, e: int, lengths: list[int], last_runs: bool = False) -> None:
    """Episodes of the given lengths on env ``e``, each added step by step (the last one left
    running if ``last_runs``)."""
    for i, length in enumerate(lengths):
        for j in range(length):
            done = j == length - 1 and not (last_runs and i == len(lengths) - 1)
            d.advance([(e, done)])


# ---------------------------------------------------------------------- the checks
def check_ids_name_one_step_forever(make: IndexFactory) -> None:
    """Step ``t`` of env ``e`` gets the id ``t * E + e``, never another; after the rings wrapped
    many times, every id ever issued still maps back to its ``(env, step)``, is stale exactly
    when overwritten, and the next id of an env was never issued."""
    E, C = 3, 4
    d = Driver.make(make, E, C, 1, 1, C + 4)
    rng = np.random.default_rng(0)
    for _ in range(40):
        rows = [(int(e), bool(rng.random() < 0.3)) for e in rng.integers(0, E, 3)]
        d.advance(rows)
    assert d.ids == {t * E + e for e, t in d.ref.issued()}
    ids = np.array(sorted(d.ids), np.int64)
    env_ids, t, slots, stale, n_stale = d.index.locate(ids)
    assert (t * E + env_ids == ids).all()
    assert stale.tolist() == [
        not d.ref.stored(int(e), int(s)) for e, s in zip(env_ids, t, strict=True)
    ]
    assert n_stale == int(stale.sum()) > 0
    live = ~stale
    assert (slots[live] == env_ids[live] * C + t[live] % C).all()
    d.check()
    with pytest.raises(rr.InvalidIdError):
        d.index.split_ids(np.array([-1], np.int64))
    with pytest.raises(rr.InvalidIdError):
        d.index.split_ids(np.array([1.0]))


def check_overwritten_ids_are_stale(make: IndexFactory) -> None:
    """An id turns stale when its slot is written again, when it is dequeued and when the
    buffer is cleared, and stays stale; ids keep counting after a clear."""
    E, C = 2, 3
    d = Driver.make(make, E, C, 1, 1, C + 4)
    episodes(d, 0, [2, 2])  # env 0: steps 0..3, step 0 overwritten by step 3
    episodes(d, 1, [2])
    _, _, stale = d.index.split_ids(np.array([0, 2, 6, 1], np.int64))
    assert stale.tolist() == [True, False, False, False]
    d.dequeue(1, 1)  # env 1's step 0 (id 1) is dropped
    assert d.index.split_ids(np.array([1], np.int64))[2].tolist() == [True]
    d.clear()
    assert d.index.split_ids(np.array([2, 4, 6, 3], np.int64))[2].all()
    d.advance([(0, False)])
    env_ids, t, stale = d.index.split_ids(np.array([2, 4, 6, 8], np.int64))
    assert env_ids.tolist() == [0, 0, 0, 0] and t.tolist() == [1, 2, 3, 4]
    assert stale.tolist() == [True, True, True, False]
    d.check()


def check_sampleable_exactly_when_window_known(make: IndexFactory) -> None:
    """A scripted life of one env (n = 2, k = 3): a running episode's newest ``n`` steps wait for
    their successors; an ended episode is sampleable whole; an abandoned one keeps the steps
    whose windows it completed; an episode cut by overwriting loses the steps whose stacks
    reach below the ring, and no step of an overwritten slot is sampleable."""
    d = Driver.make(make, 1, 8, 2, 3, 12)
    episodes(d, 0, [5], last_runs=True)  # steps 0..4 running: 0..2 known
    assert d.index.sampleable_steps()[1].tolist() == [0, 1, 2]
    d.end_running(0)  # ends at 4 with a final observation: all five known
    assert d.index.sampleable_steps()[1].tolist() == [0, 1, 2, 3, 4]
    episodes(d, 0, [4], last_runs=True)  # steps 5..8
    d.abandon(0)  # abandoned at 8: 5, 6 keep complete windows, 7, 8 never will
    # Step 0 is overwritten, so the episode 0..4 is cut: 1 and 2 would stack frame 0.
    assert d.index.sampleable_steps()[1].tolist() == [3, 4, 5, 6]
    episodes(d, 0, [6])  # steps 9..14; ring holds 7..14, step 7 starts a cut episode
    got = d.index.sampleable_steps()[1].tolist()
    assert got == [9, 10, 11, 12, 13, 14]  # 7, 8 in the hole; the stack of 9 starts at 9
    d.check()


def check_frames_cut_by_overwriting_are_never_read(make: IndexFactory) -> None:
    """With ``k > 1``, the first ``k - 1`` stored steps of an episode that began before the
    oldest stored step are not sampleable (their stacks would read overwritten frames); the
    same after a dequeue or a clear cut a running episode."""
    d = Driver.make(make, 1, 5, 1, 3, 9)
    episodes(d, 0, [9], last_runs=True)  # steps 0..8, stored 4..8, episode started at 0
    assert d.index.sampleable_steps()[1].tolist() == [6, 7]  # 4, 5 stack below 4; 8 waits
    d.dequeue(0, 1)  # stored 5..8
    assert d.index.sampleable_steps()[1].tolist() == [7]
    d.clear()
    episodes(d, 0, [4], last_runs=True)  # steps 9..12 continue the episode begun at 0
    assert d.index.sampleable_steps()[1].tolist() == [11]
    d.check()


def check_nothing_crosses_envs(make: IndexFactory) -> None:
    """Whatever is done to one env (steps, ends, abandons, dequeues) leaves every other env's
    counters, slots and final records as they were."""
    E, C = 3, 4
    d = Driver.make(make, E, C, 2, 2, 4)  # F = 4: no reallocation moves other envs' records
    for e in range(E):
        episodes(d, e, [2, 3], last_runs=True)
    F = d.index.finals_capacity

    def env_tables(e: int) -> list[bytes]:
        arrays = d.index.state_arrays()
        return [
            arrays["env"][e].tobytes(),
            arrays["slot_meta"][e * C : (e + 1) * C].tobytes(),
            arrays["final_owner"][e * F : (e + 1) * F].tobytes(),
        ]

    for e, op in [(1, "step"), (1, "end"), (0, "steps"), (2, "abandon"), (1, "dequeue")]:
        others = {o: env_tables(o) for o in range(E) if o != e}
        if op == "step":
            d.advance([(e, False)])
        elif op == "end":
            d.end_running(e)
        elif op == "steps":
            d.advance([(e, False), (e, True), (e, False)])
        elif op == "abandon":
            d.abandon(e)
        else:
            d.dequeue(e, 2)
        assert d.index.finals_capacity == F
        assert {o: env_tables(o) for o in others} == others, op
        d.check()


def check_final_records_grow_and_stay_owned(make: IndexFactory) -> None:
    """Final records grow by doubling when an env needs more (``reserve_finals`` says how the
    live ones move); every stored step that ends its episode keeps owning its record."""
    E, C = 2, 8
    d = Driver.make(make, E, C, 1, 1, 1)
    for _ in range(3):  # episodes of one step: every stored step holds a record
        d.advance([(0, True), (1, True), (0, True)])
    assert d.index.finals_capacity >= 6  # env 0 holds 6 live records
    assert d.index.finals_capacity & (d.index.finals_capacity - 1) == 0  # a power of two
    d.check()
    for _ in range(6):
        d.advance([(0, True), (0, True), (1, False)])
    d.check()  # records of overwritten steps died; the live ones kept their owners


def check_deferred_plain_steps_account_as_steps(make: IndexFactory) -> None:
    """Lockstep steps deferred with ``defer_plain`` leave exactly the tables that the same steps
    through ``advance`` leave, however many are deferred (more than a ring, too)."""
    E, C = 3, 5
    a = Driver.make(make, E, C, 2, 2, 2)
    b = Driver.make(make, E, C, 2, 2, 2)
    for d in (a, b):
        for e in range(E):
            episodes(d, e, [2], last_runs=False)
    for steps in (1, 3, 12):
        for _ in range(steps):
            a.lockstep()
            b.advance([(e, False) for e in range(E)])
        a.check()
        b.check()
        sa, sb = a.index.state_arrays(), b.index.state_arrays()
        for name in sa:
            np.testing.assert_array_equal(sa[name], sb[name], err_msg=name)
    a.advance([(1, True)])  # envs out of lockstep: defer_plain refuses
    assert a.index.defer_plain() == -1
    a.check()


def check_state_arrays_round_trip(make: IndexFactory) -> None:
    """The state arrays copied into a fresh index (final records resized first) pass
    ``check_loaded`` and answer every query the same; the same further steps then give the
    same ids and tables in both."""
    E, C = 2, 6
    d = Driver.make(make, E, C, 2, 2, C + 4)
    rng = np.random.default_rng(1)
    for _ in range(15):
        d.advance([(int(rng.integers(E)), bool(rng.random() < 0.3))])
    d.abandon(0)
    d.end_running(1)
    fresh = Driver(copy_into_fresh(make, d.index), d.ref, dict(d.positions), set(d.ids))
    fresh.check()
    twin = Driver(d.index, RefIndex(E, C, 2, 2), dict(d.positions), set(d.ids))
    twin.ref.kinds = [list(k) for k in d.ref.kinds]
    twin.ref.floor = list(d.ref.floor)
    for _ in range(10):
        rows = [(int(rng.integers(E)), bool(rng.random() < 0.3))]
        twin.advance(rows)
        fresh.advance(rows)
    fresh.check()
    sa, sb = twin.index.state_arrays(), fresh.index.state_arrays()
    for name in sa:
        np.testing.assert_array_equal(sa[name], sb[name], err_msg=name)


def check_loaded_tables_no_writes_produce_are_refused(make: IndexFactory) -> None:
    """``check_loaded`` refuses tables no sequence of writes produces (``CheckpointError``)."""
    d = Driver.make(make, 2, 4, 1, 1, 2)
    episodes(d, 0, [2, 3], last_runs=True)
    episodes(d, 1, [1])
    good = {k: np.array(v) for k, v in d.index.state_arrays().items()}

    def broken(change: Callable[[dict[str, Array]], None]) -> None:
        fresh = make(2, 4, 1, 1, 2)
        fresh.set_finals_capacity(d.index.finals_capacity)
        arrays = {k: v.copy() for k, v in good.items()}
        change(arrays)
        for name, dst in fresh.state_arrays().items():
            dst[...] = arrays[name]
        with pytest.raises(rr.CheckpointError):
            fresh.check_loaded()

    def negative_count(a: dict[str, Array]) -> None:
        a["env"][0, COUNT] = -1

    def head_past_count(a: dict[str, Array]) -> None:
        a["env"][1, HEAD] = a["env"][1, COUNT] + 1

    def foreign_owner(a: dict[str, Array]) -> None:
        a["final_owner"][:] = -1

    def wrong_start(a: dict[str, Array]) -> None:
        a["slot_meta"][:, EP_START] += 1

    for change in (negative_count, head_past_count, foreign_owner, wrong_start):
        broken(change)


# ---------------------------------------------------------------------- random sequences
_op = st.one_of(
    st.tuples(
        st.just("advance"),
        st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=4),
    ),
    st.tuples(st.just("lockstep"), st.integers(1, 4)),
    st.tuples(st.just("end"), st.integers(0, 2)),
    st.tuples(st.just("abandon"), st.integers(0, 2)),
    st.tuples(st.just("dequeue"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("roundtrip")),
)


def _run_program(d: Driver, make: IndexFactory, program: list[tuple[Any, ...]]) -> Driver:
    for op in program:
        if op[0] == "advance":
            d.advance(list(op[1]))
        elif op[0] == "lockstep":
            for _ in range(op[1]):
                d.lockstep()
        elif op[0] == "end":
            d.end_running(op[1])
        elif op[0] == "abandon":
            d.abandon(op[1])
        elif op[0] == "dequeue":
            d.dequeue(op[1], op[2])
        elif op[0] == "clear":
            d.clear()
        else:  # continue on a fresh index given this one's state arrays
            d = Driver(copy_into_fresh(make, d.index), d.ref, d.positions, d.ids)
        d.check()
    return d


def check_random_operations_match_a_reference(make: IndexFactory) -> None:
    """Random sequences of steps (batched, lockstep and deferred), ends, abandons, dequeues,
    clears and state round trips, with final records that grow: after every operation, every
    answer of the index is the model's."""
    _random_programs(make, finals_capacity=1)


def check_random_operations_without_growth_match_a_reference(make: IndexFactory) -> None:
    """:func:`check_random_operations_match_a_reference` with final records that never need
    to grow (``F`` above the ring plus a call's rows)."""
    _random_programs(make, finals_capacity=16)


def _random_programs(make: IndexFactory, finals_capacity: int) -> None:
    @settings(max_examples=30, deadline=None)
    @given(st.integers(1, 3), st.integers(1, 3), st.lists(_op, max_size=25))
    def run(n: int, k: int, program: list[tuple[Any, ...]]) -> None:
        d = Driver.make(make, 3, 6, n, k, finals_capacity)
        _run_program(d, make, program)

    run()


def index_checks() -> list[Callable[[IndexFactory], None]]:
    """Every check of the episode index's contract."""
    return [
        check_ids_name_one_step_forever,
        check_overwritten_ids_are_stale,
        check_sampleable_exactly_when_window_known,
        check_frames_cut_by_overwriting_are_never_read,
        check_nothing_crosses_envs,
        check_final_records_grow_and_stay_owned,
        check_deferred_plain_steps_account_as_steps,
        check_state_arrays_round_trip,
        check_loaded_tables_no_writes_produce_are_refused,
        check_random_operations_match_a_reference,
        check_random_operations_without_growth_match_a_reference,
    ]


def check_episode_index(make: IndexFactory) -> None:
    """Run every check of the episode index's contract on indexes from ``make``."""
    for check in index_checks():
        check(make)
