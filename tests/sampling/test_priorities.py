"""``Priorities`` (fused kernels, 8-ary sum and min trees) against a slow per-slot reference.

The reference keeps ``prio``, ``live``, ranks and the snapshot in Python lists, applies every
write and update one item at a time in call order, and rebuilds both trees from scratch
(:func:`ref_tree`) after every operation. Draws use ``rng.random(n)`` once, the per-draw
descent of :func:`ref_descend` and plain float arithmetic for ``P`` and the weights. Random
operation sequences (Hypothesis) check after each step that the state, every node of both
trees (bit for bit), the draws and the errors agree.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from rlreplay.errors import EmptyBufferError, PriorityError
from rlreplay.sampling.priorities import Priorities
from tests.sampling.test_tree_kernels import bits, ref_descend, ref_levels, ref_tree

Array = np.ndarray[Any, Any]


class RefPriorities:
    """The old ``Priorities`` semantics, one slot at a time."""

    def __init__(self, num_envs: int, C: int, alpha: float, rank_based: bool) -> None:
        self.C = C
        self.n = num_envs * C
        self.alpha = alpha
        self.rank_based = rank_based
        self.prio = [0.0] * self.n
        self.live = [False] * self.n
        self.rank = [1] * self.n
        self.snapshot: list[float] = []  # negated priorities, ascending
        self.changes = 0
        self.sum_leaves = [0.0] * self.n
        self.min_leaves = [math.inf] * self.n

    def mass(self, p: float, r: int) -> float:
        if p <= 0.0:
            return 0.0
        return float(r) ** -self.alpha if self.rank_based else p**self.alpha

    def set_leaf(self, s: int, m: float) -> None:
        self.sum_leaves[s] = m
        self.min_leaves[s] = m if m > 0.0 else math.inf

    def snap_rank(self, p: float) -> int:
        return bisect.bisect_left(self.snapshot, -p) + 1

    def on_write(
        self, removed: list[int], written: list[int], priority: float, added: list[int]
    ) -> None:
        for s in removed:
            self.live[s] = False
            self.rank[s] = 1  # a slot that is not live has a new sampler's rank
            self.set_leaf(s, 0.0)
        for s in written:
            self.prio[s] = priority
            if not self.live[s]:
                self.rank[s] = 1
        for s in added:
            self.live[s] = True
            r = 1
            if self.rank_based:
                r = self.rank[s] = self.snap_rank(self.prio[s])
            self.set_leaf(s, self.mass(self.prio[s], r))
        if self.rank_based:
            self.changes += len(removed) + len(added)

    def update(
        self,
        slots: list[int],
        stale: list[bool],
        values: list[float],
        clip: Any,
        eps: float,
        limit: float,
    ) -> float:
        for v in values:
            if not (v >= 0.0 and v < math.inf):
                raise PriorityError("bad value")
        lo, hi = clip if clip is not None else (0.0, math.inf)
        new = [min(max(v, lo), hi) + eps for v in values]
        for v, is_stale in zip(new, stale, strict=True):
            if not is_stale and v > limit:
                raise PriorityError("too large")
        for s, is_stale, v in zip(slots, stale, new, strict=True):
            if is_stale:
                continue
            self.prio[s] = v
            if self.live[s]:
                r = 1
                if self.rank_based:
                    r = self.rank[s] = self.snap_rank(v)
                self.set_leaf(s, self.mass(v, r))
                if self.rank_based:
                    self.changes += 1
        kept = [self.prio[s] for s, is_stale in zip(slots, stale, strict=True) if not is_stale]
        return max([0.0, *kept])

    def resort(self) -> None:
        ranked = sorted(
            (s for s in range(self.n) if self.live[s] and self.prio[s] > 0.0),
            key=lambda s: -self.prio[s],
        )
        self.snapshot = [-self.prio[s] for s in ranked]
        for j, s in enumerate(ranked):
            first = self.snapshot.index(self.snapshot[j])  # competition rank: first of equals
            self.rank[s] = first + 1
        self.changes = 0
        self.rebuild()

    def rebuild(self) -> None:
        for s in range(self.n):
            self.set_leaf(s, self.mass(self.prio[s], self.rank[s]) if self.live[s] else 0.0)

    def threshold(self, sort_interval: int | None) -> int:
        return sort_interval if sort_interval is not None else max(1, len(self.snapshot) // 100)

    def trees(self) -> tuple[Array, Array]:
        return ref_tree(self.sum_leaves, 0, 0.0), ref_tree(self.min_leaves, 1, math.inf)

    def levels(self) -> tuple[list[list[float]], list[list[float]]]:
        return ref_levels(self.sum_leaves, 0, 0.0), ref_levels(self.min_leaves, 1, math.inf)

    def draw(
        self, n: int, rng: np.random.Generator, stratified: bool, beta: float, lo: list[int]
    ) -> tuple[list[int], list[int], list[float], list[float]]:
        sums, mins = self.levels()
        total, min_mass = sums[0][0], mins[0][0]
        if total <= 0.0:
            raise EmptyBufferError("empty")
        u = rng.random(n).tolist()
        env, t, p, w = [], [], [], []
        for i in range(n):
            mass = (i + u[i]) * (total / n) if stratified else u[i] * total
            s, _ = ref_descend(sums, mass)
            m = self.sum_leaves[s]
            e = s // self.C
            env.append(e)
            t.append(lo[e] + (s - e * self.C - lo[e]) % self.C)
            p.append(m / total)
            w.append(float(np.float32((min_mass / m) ** beta)))
        return env, t, p, w


def assert_same(pr: Priorities, ref: RefPriorities) -> None:
    np.testing.assert_array_equal(pr.prio, ref.prio)
    np.testing.assert_array_equal(pr.live, ref.live)
    if ref.rank_based:
        np.testing.assert_array_equal(pr.rank, ref.rank)
        np.testing.assert_array_equal(pr.snapshot[: pr.snapshot_size], ref.snapshot)
        assert pr.changes == ref.changes
    sums, mins = ref.trees()
    np.testing.assert_array_equal(bits(pr.sum_tree._tree), bits(sums))
    np.testing.assert_array_equal(bits(pr.min_tree._tree), bits(mins))
    # The public trees are the two halves of the one allocation.
    np.testing.assert_array_equal(bits(pr._nodes[0]), bits(sums))
    np.testing.assert_array_equal(bits(pr._nodes[1]), bits(mins))


PRIORITIES = st.one_of(
    st.sampled_from([0.0, 0.5, 1.0, 2.0, 1e-300]), st.floats(0.0, 100.0, allow_subnormal=False)
)
BAD = st.sampled_from([math.nan, math.inf, -1.0, -1e-300, 1e300])


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    num_envs = draw(st.integers(1, 3))
    C = draw(st.integers(1, 9))
    rank_based = draw(st.booleans())
    return {
        "num_envs": num_envs,
        "C": C,
        "alpha": draw(st.sampled_from([0.0, 0.6, 1.0])),
        "rank_based": rank_based,
        "sort_interval": draw(st.sampled_from([None, 1, 3])) if rank_based else None,
        "ops": draw(st.lists(st.integers(0, 5), min_size=1, max_size=30)),
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=scenarios(), data=st.data())
def test_random_operation_sequences_match_reference(
    cfg: dict[str, Any], data: st.DataObject
) -> None:
    E, C, n = cfg["num_envs"], cfg["C"], cfg["num_envs"] * cfg["C"]
    variant = "rank_based" if cfg["rank_based"] else "proportional"
    pr = Priorities(E, C, alpha=cfg["alpha"], variant=variant, sort_interval=cfg["sort_interval"])
    ref = RefPriorities(E, C, cfg["alpha"], cfg["rank_based"])
    slots = st.lists(st.integers(0, n - 1), max_size=2 * n)
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
    lo = data.draw(st.lists(st.integers(0, 50), min_size=E, max_size=E))
    if data.draw(st.booleans()):  # start from a full buffer half of the time
        every = list(range(n))
        pr.on_write(np.empty(0, np.int64), np.arange(n), 1.0, np.arange(n))
        ref.on_write([], every, 1.0, every)
        note("on_write([], all, 1.0, all)")
    for op in cfg["ops"]:
        if op in (0, 1):  # a write: removals, new priorities, additions (a reused slot)
            removed, written, added = data.draw(slots), data.draw(slots), data.draw(slots)
            priority = data.draw(PRIORITIES)
            pr.on_write(
                np.array(removed, np.int64), np.array(written, np.int64), priority,
                np.array(added, np.int64),
            )  # fmt: skip
            ref.on_write(removed, written, priority, added)
            note(f"on_write({removed}, {written}, {priority!r}, {added})")
        elif op in (2, 3):  # an update, possibly with stale ids, duplicates, a bad value
            k = data.draw(st.integers(0, 2 * n))
            s = data.draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k))
            stale = data.draw(st.lists(st.booleans(), min_size=k, max_size=k))
            values = data.draw(st.lists(PRIORITIES, min_size=k, max_size=k))
            if k and data.draw(st.integers(0, 4)) == 0:  # one update in five has a bad value
                values[data.draw(st.integers(0, k - 1))] = data.draw(BAD)
            clip = data.draw(st.sampled_from([None, (0.0, 5.0), (1.0, 1.0)]))
            args = (np.array(s, np.int64), np.array(stale, bool), np.array(values, np.float64))
            note(f"update({s}, {stale}, {values}, {clip})")
            try:
                want: float | None = ref.update(s, stale, values, clip, 1e-6, pr._limit)
            except PriorityError:
                want = None
            if want is None:
                with pytest.raises(PriorityError):
                    pr.update(*args, clip, 1e-6)
            else:
                assert pr.update(*args, clip, 1e-6) == want
        elif op == 4:  # a draw (rank-based: re-sorts first when enough changes accumulated)
            batch = data.draw(st.integers(1, 12))
            stratified = data.draw(st.booleans())
            note(f"draw({batch}, stratified={stratified})")
            if ref.rank_based and ref.changes >= ref.threshold(cfg["sort_interval"]):
                ref.resort()
            try:
                want_draw = ref.draw(batch, rng_b, stratified, 0.4, lo)
            except EmptyBufferError:  # both re-sorted (if due) before finding nothing to draw
                with pytest.raises(EmptyBufferError):
                    pr.draw(batch, rng_a, stratified, 0.4, np.array(lo, np.int64))
            else:
                got = pr.draw(batch, rng_a, stratified, 0.4, np.array(lo, np.int64))
                assert [x.tolist() for x in got] == list(want_draw)
                assert got[3].dtype == np.float32
        else:  # a rebuild from the saved arrays (as after a checkpoint load)
            note("rebuild()")
            pr.rebuild()
            ref.rebuild()
        assert_same(pr, ref)


def test_rejected_update_changes_nothing() -> None:
    pr = Priorities(2, 8, alpha=2.0, variant="proportional", sort_interval=None)
    pr.on_write(np.empty(0, np.int64), np.arange(16), 1.0, np.arange(16))
    before = (pr.prio.copy(), pr._nodes.copy())
    slots, stale = np.array([1, 2, 3]), np.zeros(3, bool)
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(PriorityError, match="expected finite values >= 0"):
            pr.update(slots, stale, np.array([0.5, bad, 0.5]), None, 0.0)
    with pytest.raises(PriorityError, match="is above"):
        pr.update(slots, stale, np.array([0.5, 1e308, 0.5]), None, 0.0)
    np.testing.assert_array_equal(pr.prio, before[0])
    np.testing.assert_array_equal(bits(pr._nodes), bits(before[1]))


def test_draw_errors_are_those_of_sum_tree_sample() -> None:
    pr = Priorities(1, 4, alpha=0.6, variant="proportional", sort_interval=None)
    lo = np.zeros(1, np.int64)
    rng = np.random.default_rng(0)
    with pytest.raises(EmptyBufferError, match="total is 0"):
        pr.draw(3, rng, True, 0.4, lo)
    pr.on_write(np.empty(0, np.int64), np.arange(4), 1.0, np.arange(4))
    with pytest.raises(ValueError, match="n must be an integer >= 0"):
        pr.draw(-1, rng, True, 0.4, lo)
    with pytest.raises(TypeError, match=r"numpy\.random\.Generator"):
        pr.draw(3, np.random.RandomState(0), True, 0.4, lo)  # type: ignore[arg-type]
    env, t, p, w = pr.draw(0, rng, True, 0.4, lo)
    assert env.shape == t.shape == p.shape == w.shape == (0,)


def test_large_buffer_matches_reference_trees_and_draws() -> None:
    """16 envs x 4096 slots filled like a vector env, then sample/update rounds."""
    E, C = 16, 4096
    pr = Priorities(E, C, alpha=0.6, variant="proportional", sort_interval=None)
    rng = np.random.default_rng(3)
    for step in range(C + 100):  # wraps: removals of overwritten slots
        rows = np.arange(E, dtype=np.int64) * C + step % C
        pr.on_write(rows, rows, 1.0, rows)
    prios = np.zeros(E * C)
    prios[:] = 1.0
    lo = np.zeros(E, np.int64)
    for _ in range(20):
        u_rng = np.random.default_rng(int(rng.integers(1 << 30)))
        state = u_rng.bit_generator.state
        min_mass = pr.min_tree.min
        env, t, p, w = pr.draw(256, u_rng, True, 0.4, lo)
        slots = env * C + t % C
        # The same uniforms through the reference levels and the per-draw descent.
        u_rng.bit_generator.state = state
        u = u_rng.random(256)
        leaves = pr.sum_tree.get(np.arange(E * C))
        levels = ref_levels(leaves.tolist(), 0, 0.0)
        total = levels[0][0]
        want = [ref_descend(levels, (i + u[i]) * (total / 256))[0] for i in range(256)]
        np.testing.assert_array_equal(slots, want)
        np.testing.assert_array_equal(p, leaves[slots] / total)
        masses = leaves[slots].tolist()
        np.testing.assert_array_equal(w, np.float32([(min_mass / m) ** 0.4 for m in masses]))
        values = np.abs(rng.normal(size=256))
        pr.update(slots, np.zeros(256, bool), values, None, 1e-6)
        prios[slots] = values + 1e-6
    leaves = np.where(prios > 0, prios**0.6, 0.0)
    np.testing.assert_allclose(pr.sum_tree.get(np.arange(E * C)), leaves, rtol=1e-15, atol=0)
    fresh_sum = ref_tree(pr.sum_tree.get(np.arange(E * C)).tolist(), 0, 0.0)
    fresh_min = ref_tree(pr.min_tree.get(np.arange(E * C)).tolist(), 1, math.inf)
    np.testing.assert_array_equal(bits(pr.sum_tree._tree), bits(fresh_sum))
    np.testing.assert_array_equal(bits(pr.min_tree._tree), bits(fresh_min))
