"""PrioritizedReplayBuffer: weights, priorities, updates, errors, annealing and checkpoints."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr

FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}


def make(capacity: int = 64, **kw: Any) -> rr.PrioritizedReplayBuffer:
    kw.setdefault("seed", 0)
    return rr.PrioritizedReplayBuffer(capacity, FIELDS, **kw)


def feed(
    buf: rr.ReplayBuffer, n: int, *, env_id: int = 0, every: int = 0, start: int = 0
) -> np.ndarray:
    """``n`` steps of one env via ``extend``; an episode ends every ``every`` steps (0: never)."""
    c = np.arange(start, start + n)
    ends = (c % every == every - 1) if every else np.zeros(n, bool)
    return buf.extend(
        env_id=env_id,
        obs=np.stack([c, -c], 1).astype(np.float32),
        action=c,
        reward=(c % 5).astype(np.float32),
        terminated=ends,
        truncated=np.zeros(n, bool),
        next_obs=np.stack([c + 0.5, -c - 0.5], 1).astype(np.float32),
    )


def feed_all(buf: rr.ReplayBuffer, n: int, every: int = 0) -> np.ndarray:
    """``n`` steps of every env via ``add`` (leading axis ``num_envs``)."""
    E = buf.num_envs
    ids = []
    for i in range(n):
        c = np.arange(E) + 100 * i
        ends = np.full(E, bool(every) and i % every == every - 1)
        ids.append(
            buf.add(
                env_ids=np.arange(E),
                obs=np.stack([c, -c], 1).astype(np.float32),
                action=c,
                reward=np.ones(E, np.float32),
                terminated=ends,
                truncated=np.zeros(E, bool),
                next_obs=np.zeros((E, 2), np.float32),
            )
        )
    return np.concatenate(ids) if ids else np.zeros(0, np.int64)


def masses(buf: rr.PrioritizedReplayBuffer) -> dict[int, float]:
    """Expected sampling mass of every sampleable id, from its priority (exact ranks)."""
    ids = buf.sampleable_ids()
    p = buf.get_priorities(ids)
    if buf.variant == "proportional":
        m = np.where(p > 0, p**buf.alpha, 0.0)
    else:
        rank = 1 + (p[None, :] > p[:, None]).sum(1)
        m = np.where(p > 0, rank.astype(float) ** -buf.alpha, 0.0)
    return dict(zip(ids.tolist(), m.tolist(), strict=True))


def check_trees(buf: rr.PrioritizedReplayBuffer) -> None:
    """Both trees hold exactly the masses in use, recomputed from scratch; nothing else."""
    pr = buf._prios
    slots = np.arange(pr.num_slots)
    live = np.zeros(pr.num_slots, bool)
    ids = buf.sampleable_ids()
    env, t, _ = buf._index.split_ids(ids)
    live[buf._index.slots(env, t)] = True
    np.testing.assert_array_equal(pr.live, live)
    raw = pr.rank.astype(float) ** -buf.alpha if pr.rank_based else pr.prio**buf.alpha
    expect = np.where(live & (pr.prio > 0), raw, 0.0)
    # numpy's pow may differ from the kernels' by an ulp; the zero/inf pattern must be exact.
    leaves = pr.sum_tree.get(slots)
    np.testing.assert_allclose(leaves, expect, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(leaves > 0, expect > 0)
    np.testing.assert_array_equal(pr.min_tree.get(slots), np.where(leaves > 0, leaves, np.inf))
    # Nodes are recomputed from the leaves: a tree built from scratch has the same root.
    fresh = rr.SumTree(pr.num_slots)
    fresh.set(slots, leaves)
    assert pr.sum_tree.total == fresh.total
    assert pr.min_tree.min == (leaves[leaves > 0].min() if (leaves > 0).any() else math.inf)


def full_state(buf: rr.PrioritizedReplayBuffer) -> dict[str, Any]:
    state = buf.state_dict()
    pr = buf._prios
    slots = np.arange(pr.num_slots)
    state["trees"] = (pr.sum_tree.get(slots), pr.min_tree.get(slots), pr.sum_tree.total)
    return state


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["config"] == b["config"]
    assert a["meta"] == b["meta"]
    assert a["arrays"].keys() == b["arrays"].keys()
    for k in a["arrays"]:
        np.testing.assert_array_equal(a["arrays"][k], b["arrays"][k], err_msg=k)
    for x, y in zip(a["trees"], b["trees"], strict=True):
        np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------------- weights, probabilities


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_closed_form_weights_and_probabilities(alpha: float, beta: float) -> None:
    buf = make(16, alpha=alpha, beta=beta, eps=0.0)
    ids = feed(buf, 8, every=8)
    prio = np.array([1.0, 2.0, 4.0, 8.0, 0.5, 3.0, 6.0, 1.5])
    assert buf.update_priorities(ids, prio) == 0
    N = 8
    P = prio**alpha / (prio**alpha).sum()
    w_all = (N * P) ** -beta
    expected_w = w_all / w_all.max()  # normalised by the largest weight in the buffer
    b = buf.sample(64)
    idx = b.ids  # ids 0..7 are the rows of prio
    np.testing.assert_allclose(b.probabilities, P[idx], rtol=1e-12)
    np.testing.assert_allclose(b.weights, expected_w[idx], rtol=1e-6)
    assert b.weights.dtype == np.float32 and b.probabilities.dtype == np.float64
    check_trees(buf)


def test_weights_use_the_buffer_minimum_not_the_batch_maximum() -> None:
    buf = make(128, alpha=1.0, beta=1.0, eps=0.0)
    ids = feed(buf, 100, every=100)
    prio = np.ones(100)
    prio[7] = 1e-3  # the one transition of largest weight; almost never drawn
    buf.update_priorities(ids, prio)
    b = buf.sample(8)
    assert 7 not in b.ids.tolist()
    # w = (P / P_min)^-1 = 1e-3 for every priority-1 transition, not 1 as a batch max would give.
    np.testing.assert_allclose(b.weights, 1e-3, rtol=1e-6)


def test_beta_zero_gives_ones_and_alpha_zero_is_uniform() -> None:
    buf = make(32, alpha=0.0, beta=0.7)
    ids = feed(buf, 20, every=10)
    buf.update_priorities(ids, np.linspace(0.1, 5.0, 20))
    b = buf.sample(50)
    np.testing.assert_allclose(b.probabilities, 1 / 20)
    np.testing.assert_array_equal(b.weights, 1.0)
    buf2 = make(32, alpha=0.8, beta=0.0)
    ids = feed(buf2, 20, every=10)
    buf2.update_priorities(ids, np.linspace(0.1, 5.0, 20))
    np.testing.assert_array_equal(buf2.sample(50).weights, 1.0)


def test_beta_annealing() -> None:
    buf = make(32, alpha=1.0, beta=0.2, beta_final=1.0, beta_steps=4, eps=0.0)
    ids = feed(buf, 10, every=10)
    prio = np.arange(1.0, 11.0)
    buf.update_priorities(ids, prio)
    expected = [0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 1.0]
    for beta in expected:
        assert buf.beta == pytest.approx(beta)
        b = buf.sample(16)
        np.testing.assert_allclose(b.weights, (prio[b.ids] / 1.0) ** -beta, rtol=1e-6)
    constant = make(32, beta=0.3, beta_final=1.0, beta_steps=0)
    feed(constant, 10, every=10)
    for _ in range(3):
        constant.sample(4)
        assert constant.beta == 0.3
    # A failed sample does not advance beta.
    empty = make(32, beta=0.2, beta_steps=2)
    with pytest.raises(rr.EmptyBufferError):
        empty.sample(4)
    assert empty.beta == 0.2


def test_rank_based_closed_form() -> None:
    buf = make(16, variant="rank_based", alpha=0.7, beta=0.5, eps=0.0, sort_interval=1)
    ids = feed(buf, 6, every=6)
    prio = np.array([3.0, 1.0, 5.0, 1.0, 0.2, 9.0])
    buf.update_priorities(ids, prio)
    rank = np.array([3, 4, 2, 4, 6, 1])  # ties share the better rank
    m = rank**-0.7
    P = m / m.sum()
    b = buf.sample(40)
    np.testing.assert_allclose(b.probabilities, P[b.ids], rtol=1e-12)
    np.testing.assert_allclose(b.weights, (P[b.ids] / P.min()) ** -0.5, rtol=1e-6)
    check_trees(buf)


# ---------------------------------------------------------------------- what is drawn


@pytest.mark.parametrize("variant", ["proportional", "rank_based"])
def test_zero_priority_and_unsampleable_never_drawn(variant: str) -> None:
    buf = make(64, n_step=3, variant=variant, eps=0.0)
    ids = feed(buf, 30)  # one running episode: its last 3 steps are not sampleable yet
    sampleable = buf.sampleable_ids()
    assert sampleable.tolist() == ids[:27].tolist()
    zero = ids[::3]
    buf.update_priorities(zero, np.zeros(zero.shape))
    allowed = set(sampleable.tolist()) - set(zero.tolist())
    for _ in range(20):
        b = buf.sample(64)
        assert set(b.ids.tolist()) <= allowed
        assert (b.probabilities > 0).all()
    check_trees(buf)
    # Every sampleable priority 0: nothing to draw.
    buf.update_priorities(sampleable, np.zeros(sampleable.shape))
    with pytest.raises(rr.EmptyBufferError, match="priority 0"):
        buf.sample(4)


def test_transition_drawn_once_sampleable_with_its_written_priority() -> None:
    buf = make(64, n_step=2, eps=0.0, alpha=1.0)
    ids = feed(buf, 5)
    buf.update_priorities(ids[:3], [1.0, 1.0, 7.0])  # max priority becomes 7
    late = feed(buf, 1, start=5)  # written with priority 7, sampleable only 2 steps later
    assert buf.get_priorities(late)[0] == 7.0
    assert late[0] not in buf.sampleable_ids()
    drawn = np.concatenate([buf.sample(32).ids for _ in range(10)])
    assert late[0] not in drawn
    feed(buf, 2, start=6)
    assert late[0] in buf.sampleable_ids()
    assert late[0] in np.concatenate([buf.sample(32).ids for _ in range(10)])
    check_trees(buf)


def test_rounding_never_leaves_the_stored_data() -> None:
    buf = make(40, alpha=1.0, eps=0.0)
    ids = feed(buf, 30, every=10)
    prio = np.full(30, 1e-300)
    prio[-1] = 1e300  # the last sampleable slot holds nearly all the mass
    prio[3] = 0.0
    buf.update_priorities(ids, prio)
    feed(buf, 5, start=30)  # not sampleable yet (running episode, n_step 1: 4 of them are)
    sampleable = set(buf.sampleable_ids().tolist())
    for stratified in (True, False):
        buf.stratified = stratified
        for _ in range(20):
            b = buf.sample(256)
            assert set(b.ids.tolist()) <= sampleable - {int(ids[3])}
    check_trees(buf)


# ---------------------------------------------------------------------- updates


def test_stale_updates_are_ignored_and_counted() -> None:
    buf = make(10, eps=0.0)
    old = feed(buf, 10, every=5)
    feed(buf, 4, start=10, every=5)  # overwrites the slots of ids 0..3
    new_ids = buf.sampleable_ids()
    before = buf.get_priorities(new_ids)
    got = buf.update_priorities(old, np.full(10, 50.0))
    assert got == 4 and isinstance(got, int)
    after = dict(zip(new_ids.tolist(), buf.get_priorities(new_ids).tolist(), strict=True))
    for i in new_ids.tolist():
        expected = 50.0 if i in old[4:] else before[new_ids.tolist().index(i)]
        assert after[i] == expected
    # A cleared transition is stale too; ids keep counting after clear.
    buf.clear()
    assert buf.update_priorities(new_ids, np.ones(new_ids.shape)) == new_ids.size
    check_trees(buf)


def test_stale_update_does_not_raise_the_max_priority() -> None:
    buf = make(10, eps=0.0)
    old = feed(buf, 10, every=5)
    feed(buf, 5, start=10, every=5)
    buf.update_priorities(old[:5], np.full(5, 99.0))  # all stale
    assert buf.max_priority == 0.0
    new = feed(buf, 1, start=15)
    assert buf.get_priorities(new)[0] == 1.0


def test_duplicate_ids_last_one_wins() -> None:
    buf = make(32, eps=0.0, alpha=1.0)
    ids = feed(buf, 10, every=10)
    dup = np.array([ids[2], ids[5], ids[2], ids[2], ids[5], ids[7]])
    buf.update_priorities(dup, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    np.testing.assert_array_equal(buf.get_priorities(ids[[2, 5, 7]]), [4.0, 5.0, 6.0])
    assert buf.max_priority == 6.0
    check_trees(buf)


def test_new_item_priority_rule() -> None:
    buf = make(64, eps=0.5, initial_priority=2.0)
    a = feed(buf, 4)
    np.testing.assert_array_equal(buf.get_priorities(a), 2.0)
    buf.update_priorities(a[:2], [0.5, 1.0])  # stored 1.0, 1.5: below initial_priority
    b = feed(buf, 1, start=4)
    assert buf.get_priorities(b)[0] == 2.0
    buf.update_priorities(a[:1], [9.5])  # stored 10.0
    c = feed(buf, 1, start=5)
    assert buf.get_priorities(c)[0] == 10.0
    buf.update_priorities(a[:1], [0.0])  # lowering a priority does not lower the maximum
    d = feed(buf, 1, start=6)
    assert buf.get_priorities(d)[0] == 10.0
    assert buf.max_priority == 10.0


def test_priority_clip_then_eps() -> None:
    buf = make(64, eps=0.01, priority_clip=(0.1, 2.0))
    ids = feed(buf, 4)
    buf.update_priorities(ids, [0.0, 0.5, 5.0, 2.0])
    np.testing.assert_allclose(buf.get_priorities(ids), [0.11, 0.51, 2.01, 2.01])


def test_not_yet_sampleable_keeps_its_update() -> None:
    buf = make(64, n_step=3, eps=0.0, alpha=1.0)
    ids = feed(buf, 5)
    pending = ids[-1]
    assert pending not in buf.sampleable_ids()
    buf.update_priorities([pending], [42.0])
    check_trees(buf)
    feed(buf, 3, start=5)
    assert pending in buf.sampleable_ids()
    assert masses(buf)[int(pending)] == 42.0
    check_trees(buf)


BAD_UPDATES: list[tuple[Any, Any, type[Exception], str]] = [
    ([0, 1], [1.0, math.nan], rr.PriorityError, "finite values >= 0.*position 1"),
    ([0, 1], [-1.0, 1.0], rr.PriorityError, "finite values >= 0"),
    ([0], [math.inf], rr.PriorityError, "finite"),
    ([0], [-math.inf], rr.PriorityError, "finite"),
    ([0, 1], ["a", "b"], rr.PriorityError, "real numbers"),
    ([0, 1], [True, False], rr.PriorityError, "real numbers"),
    ([0, 10_000], [1.0, 1.0], rr.InvalidIdError, "never issued"),
    ([-1], [1.0], rr.InvalidIdError, "never issued"),
    ([0.0], [1.0], rr.InvalidIdError, "integer"),
    ([0, 1], [1.0], rr.ShapeError, "one per id"),
]


@pytest.mark.parametrize(("ids", "prio", "error", "pattern"), BAD_UPDATES)
@pytest.mark.parametrize("variant", ["proportional", "rank_based"])
def test_rejected_update_changes_nothing(
    ids: Any, prio: Any, error: type[Exception], pattern: str, variant: str
) -> None:
    buf = make(16, variant=variant, alpha=1.0, eps=0.0)
    feed(buf, 12, every=4)
    buf.update_priorities(np.arange(8), np.arange(8.0))
    before = full_state(buf)
    with pytest.raises(error, match=pattern) as info:
        buf.update_priorities(ids, prio)
    assert isinstance(info.value, ValueError)
    assert_same_state(full_state(buf), before)
    check_trees(buf)


def test_priorities_that_could_overflow_the_sum_are_refused() -> None:
    # A mass above float64 max / (2 * 16 slots) is refused up front, so a later write of new
    # transitions (given the max priority) can never overflow the sum tree.
    buf = make(16, alpha=1.0, eps=0.0)
    ids = feed(buf, 12, every=4)
    before = full_state(buf)
    with pytest.raises(rr.PriorityError, match="overflow"):
        buf.update_priorities(ids[:2], [1.0, 1e308])
    assert_same_state(full_state(buf), before)
    buf.update_priorities(ids[:2], [1.0, 5e306])  # 2 * 16 * 5e306 < 1.8e308
    feed(buf, 20, start=12, every=4)
    check_trees(buf)
    # Rank-based masses are at most 1: any finite priority is fine.
    rank = make(16, variant="rank_based", eps=0.0)
    ids = feed(rank, 12, every=4)
    rank.update_priorities(ids[:2], [1.0, 1e308])
    check_trees(rank)


def test_tree_errors_are_priority_errors() -> None:
    tree = rr.SumTree(4)
    with pytest.raises(rr.PriorityError):
        tree.set([0], [-1.0])
    with pytest.raises(rr.PriorityError):
        rr.MinTree(4).set([0], [math.nan])


# ---------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "kw",
    [
        {"alpha": -0.1},
        {"alpha": math.nan},
        {"alpha": True},
        {"beta": -1.0},
        {"beta_final": math.inf},
        {"beta_steps": -1},
        {"beta_steps": 1.5},
        {"eps": -1e-6},
        {"variant": "ranked"},
        {"initial_priority": 0.0},
        {"initial_priority": math.inf},
        {"initial_priority": 1e308, "alpha": 1.0},  # 16 slots of it would overflow a sum
        {"priority_clip": (2.0, 1.0)},
        {"priority_clip": (-1.0, 1.0)},
        {"priority_clip": 3.0},
        {"stratified": "yes"},
        {"sort_interval": 10},  # proportional
        {"variant": "rank_based", "sort_interval": 0},
    ],
)
def test_bad_config(kw: dict[str, Any]) -> None:
    with pytest.raises(rr.ConfigError):
        make(16, **kw)


def test_core_arguments_still_checked_and_from_spaces() -> None:
    with pytest.raises(rr.ConfigError):
        make(16, n_step=0)
    gym = pytest.importorskip("gymnasium")
    buf = rr.PrioritizedReplayBuffer.from_spaces(
        gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), capacity=32, alpha=0.5
    )
    assert isinstance(buf, rr.PrioritizedReplayBuffer) and buf.alpha == 0.5


# ---------------------------------------------------------------------- checkpoints


def _drive(buf: rr.PrioritizedReplayBuffer, rng: np.random.Generator, start: int) -> list[Any]:
    out = []
    for i in range(6):
        feed(buf, 5, env_id=i % buf.num_envs, start=start + 5 * i, every=7)
        b = buf.sample(16)
        out.append((b.ids, b.weights, b.probabilities, b.obs))
        buf.update_priorities(b.ids, rng.random(16) * 3)
        s = buf.sample_sequences(4, 3, pad=i % 2 == 0)
        out.append((s.ids, s.weights, s.probabilities, s.obs))
    return out


@pytest.mark.parametrize(
    "kw",
    [
        {"beta_steps": 10},
        {"variant": "rank_based", "sort_interval": 7, "num_envs": 2},
        {"variant": "rank_based", "n_step": 3, "frame_stack": 2},
        {"stratified": False, "priority_clip": (0.0, 2.0), "num_envs": 3},
    ],
)
@pytest.mark.parametrize("how", ["file", "state_dict"])
def test_checkpoint_round_trip_gives_the_same_sample_stream(
    kw: dict[str, Any], how: str, tmp_path: Path
) -> None:
    a, twin = make(60, **kw), make(60, **kw)
    _drive(a, np.random.default_rng(1), 0)
    _drive(twin, np.random.default_rng(1), 0)
    if how == "file":
        a.save(tmp_path / "per.ckpt")
        loaded = rr.load(tmp_path / "per.ckpt")
        assert isinstance(loaded, rr.PrioritizedReplayBuffer)
    else:
        loaded = make(60, **kw)
        loaded.load_state_dict(a.state_dict())
    assert loaded.beta == twin.beta and loaded.max_priority == twin.max_priority
    check_trees(loaded)
    assert_same_state(full_state(loaded), full_state(twin))
    got = _drive(loaded, np.random.default_rng(2), 1000)
    want = _drive(twin, np.random.default_rng(2), 1000)
    for g, w in zip(got, want, strict=True):
        for x, y in zip(g, w, strict=True):
            np.testing.assert_array_equal(x, y)


def test_closed_buffer_refuses_updates() -> None:
    buf = make(32)
    ids = feed(buf, 4)
    buf.close()
    with pytest.raises(rr.ReplayClosed):
        buf.update_priorities(ids, np.ones(4))
    with pytest.raises(rr.ReplayClosed):
        buf.sample(2)


def test_load_state_dict_refuses_other_config() -> None:
    a = make(32, alpha=0.5)
    with pytest.raises(rr.CheckpointError):
        make(32, alpha=0.6).load_state_dict(a.state_dict())


# ---------------------------------------------------------------------- sequences


@pytest.mark.parametrize("variant", ["proportional", "rank_based"])
@pytest.mark.parametrize("pad", [True, False])
def test_sample_sequences_draws_starts_by_priority(variant: str, pad: bool) -> None:
    kw: dict[str, Any] = {"sort_interval": 1} if variant == "rank_based" else {}
    buf = make(64, variant=variant, alpha=1.0, beta=0.5, beta_steps=4, eps=0.0, **kw)
    ids = feed(buf, 40, every=10)
    prio = np.arange(40.0) % 7
    buf.update_priorities(ids, prio)
    m = masses(buf)
    ok = {i: v for i, v in m.items() if v > 0}
    if not pad:  # the 4 steps from a start are all real: the last 3 of an episode never start
        ok = {i: v for i, v in ok.items() if i % 10 < 7}
    total = sum(ok.values())
    for step in range(3):
        beta = buf.beta
        assert beta == pytest.approx(0.5 + 0.25 * step)  # two draws per round
        b = buf.sample_sequences(64, 4, pad=pad)
        assert set(b.ids.tolist()) <= set(ok)
        p = np.array([ok[i] / total for i in b.ids.tolist()])
        np.testing.assert_allclose(b.probabilities, p, rtol=1e-12)
        np.testing.assert_allclose(b.weights, (min(ok.values()) / total / p) ** beta, 1e-6)
        buf.sample(1)  # sample and sample_sequences share the beta schedule
        ref = buf.get_sequences(b.ids, 4)
        for name in ref:
            np.testing.assert_array_equal(b[name], ref[name], err_msg=name)
        if not pad:
            assert b.mask.all()


def test_sample_sequences_without_any_full_start() -> None:
    buf = make(64, eps=0.0)
    feed(buf, 6, every=3)
    with pytest.raises(rr.EmptyBufferError, match="real steps"):
        buf.sample_sequences(4, 5, pad=False)
    assert buf.sample_sequences(4, 5).ids.shape == (4,)


# ---------------------------------------------------------------------- n-step and frame stacks


@pytest.mark.parametrize("variant", ["proportional", "rank_based"])
def test_nstep_and_frame_stacks_match_the_uniform_buffer(variant: str) -> None:
    kw: dict[str, Any] = {"n_step": 3, "frame_stack": 4, "gamma": 0.9, "num_envs": 2}
    per = make(2 * 23, variant=variant, **kw)
    uni = rr.ReplayBuffer(2 * 23, FIELDS, seed=0, **kw)
    rng = np.random.default_rng(5)
    for i in range(12):
        for env in (0, 1):
            n, every = int(rng.integers(1, 9)), int(rng.integers(2, 6))
            for b in (per, uni):
                feed(b, n, env_id=env, start=100 * i + 10 * env, every=every)
        batch = per.sample(32)
        per.update_priorities(batch.ids, rng.random(32))
        ref = uni.get_transitions(batch.ids)
        assert set(ref) | {"probabilities"} == set(batch)
        for name in ref:
            if name != "weights":
                np.testing.assert_array_equal(batch[name], ref[name], err_msg=name)
    np.testing.assert_array_equal(per.sampleable_ids(), uni.sampleable_ids())


def test_sequence_priorities_reduce_per_step_errors_r2d2_style() -> None:
    buf = rr.PrioritizedReplayBuffer(
        64, {"obs": rr.Field((), np.float32)}, alpha=1.0, beta=0.0, eps=0.0, seed=0
    )
    for t in range(20):
        buf.add(obs=float(t), reward=0.0, next_obs=0.0, terminated=t == 19, truncated=False)
    seq = buf.sample_sequences(2, 4)
    errors = np.array([[1.0, 3.0, 2.0, 10.0], [4.0, 0.0, 0.0, 0.0]])
    mask = np.array([[True, True, True, False], [True, True, True, True]])
    buf.update_priorities(seq.ids, errors, mask=mask, eta=0.9)
    expected = {
        int(seq.ids[0]): 0.9 * 3.0 + 0.1 * 2.0,
        int(seq.ids[1]): 0.9 * 4.0 + 0.1 * 1.0,
    }
    if seq.ids[0] == seq.ids[1]:  # duplicates: the last one wins
        expected = {int(seq.ids[1]): 0.9 * 4.0 + 0.1 * 1.0}
    got = buf.get_priorities(np.array(list(expected)))
    np.testing.assert_allclose(got, list(expected.values()))
    with pytest.raises(rr.ShapeError, match="mask"):
        buf.update_priorities(seq.ids, errors, mask=mask[:, :2])
    # No sequences (with steps or without): nothing to update; sequences without steps: refused.
    assert buf.update_priorities(np.zeros((0,), np.int64), np.zeros((0, 0))) == 0
    assert buf.update_priorities(np.zeros((0,), np.int64), np.zeros((0, 4))) == 0
    with pytest.raises(rr.ShapeError, match="at least one real step"):
        buf.update_priorities(seq.ids, np.zeros((2, 0)))
