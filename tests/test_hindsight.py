"""Hindsight relabelling (rlreplay.transforms.hindsight) and sample-time transforms in general.

Test trajectories encode where every goal came from: in env ``e`` the achieved goal stored at
absolute step ``s`` is ``[1000e + s] * 2`` and the final ``next_achieved_goal`` of an episode
ending at step ``d`` is ``1000e + d + 0.5`` (so it differs from the next episode's first
achieved goal). The stored desired goal is ``-1`` everywhere, so a relabelled row is one whose
desired goal is not ``-1``. ``ng(j)`` below is the achieved goal after step ``j``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats

import rlreplay as rr
from rlreplay.transforms.hindsight import goal_step_range

GOAL = rr.Field((2,), np.float32, observation=True)
STORED_DG = -1.0


def diff_reward(ag: np.ndarray, g: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    """Identifies both arguments: ag - g on the first coordinate."""
    return (ag[:, 0] - g[:, 0]).astype(np.float32)


def make_buffer(capacity: int = 64, **kwargs: Any) -> rr.ReplayBuffer:
    fields = {
        "obs": rr.Field((3,), np.float32),
        "action": rr.Field((), np.int64),
        "achieved_goal": GOAL,
        "desired_goal": GOAL,
    }
    kwargs.setdefault("seed", 0)
    return rr.ReplayBuffer(capacity, fields, **kwargs)


class Log:
    """What was written: per env the episodes ``(first, last, finished)``, for reference checks."""

    def __init__(self, num_envs: int) -> None:
        self.episodes: list[list[tuple[int, int, bool]]] = [[] for _ in range(num_envs)]
        self.count = [0] * num_envs

    def episode_of(self, e: int, t: int) -> tuple[int, int, bool]:
        for first, last, finished in self.episodes[e]:
            if first <= t <= last:
                return first, last, finished
        raise AssertionError(f"step {t} of env {e} not logged")


def write(buf: rr.ReplayBuffer, log: Log, e: int, length: int, *, end: str | None) -> None:
    """Append an episode of ``length`` steps to env ``e``; ``end`` is 'terminated',
    'truncated' or None (the episode keeps running)."""
    t0 = log.count[e]
    s = np.arange(t0, t0 + length)
    v = (1000 * e + s).astype(np.float32)
    nxt = v + 1
    te = np.zeros(length, bool)
    tr = np.zeros(length, bool)
    if end is not None:
        nxt[-1] = v[-1] + 0.5
        (te if end == "terminated" else tr)[-1] = True
    two = np.stack([v, v], axis=1)
    two_next = np.stack([nxt, nxt], axis=1)
    dg = np.full((length, 2), STORED_DG, np.float32)
    buf.extend(
        env_id=e,
        obs=np.repeat(v[:, None], 3, axis=1),
        action=100 * s,
        achieved_goal=two,
        desired_goal=dg,
        reward=s.astype(np.float32),
        terminated=te,
        truncated=tr,
        next_obs=np.repeat(nxt[:, None], 3, axis=1),
        next_achieved_goal=two_next,
        next_desired_goal=dg,
    )
    # A running episode continues in the next call: merge with the open episode of the log.
    eps = log.episodes[e]
    first = eps.pop()[0] if eps and not eps[-1][2] else t0
    eps.append((first, t0 + length - 1, end is not None))
    log.count[e] = t0 + length


def ng(e: int, j: int, last: int) -> float:
    return 1000 * e + j + 1 if j < last else 1000 * e + last + 0.5


def candidates(
    buf: rr.ReplayBuffer, log: Log, e: int, t: int, strategy: str
) -> tuple[set[float], int]:
    """Reference goal candidates of step t of env e (and the episode's last step)."""
    first, last, _ = log.episode_of(e, t)
    head = max(0, log.count[e] - buf.env_capacity)
    lo = {"future": t, "final": last, "episode": max(first, head)}[strategy]
    return {ng(e, j, last) for j in range(lo, last + 1)}, last


def check_rows(
    buf: rr.ReplayBuffer, log: Log, batch: rr.Batch, strategy: str, *, prob_one: bool = True
) -> int:
    """Check every row against the reference model (n_step = 1); return #relabelled rows."""
    ref = buf.get_transitions(batch.ids)
    for k in ref:
        if k not in ("desired_goal", "next_desired_goal", "reward"):
            np.testing.assert_array_equal(batch[k], ref[k], err_msg=k)
    relabelled = 0
    E = buf.num_envs
    for i, id_ in enumerate(batch.ids.tolist()):
        e, t = id_ % E, id_ // E
        goal = batch.desired_goal[i]
        np.testing.assert_array_equal(batch.next_desired_goal[i], goal)
        _, last, finished = log.episode_of(e, t)
        if goal[0] == STORED_DG:
            assert not (finished and prob_one), f"finished row {id_} not relabelled"
            assert batch.reward[i] == ref.reward[i]
            continue
        assert finished, f"row {id_} of an unfinished episode was relabelled"
        relabelled += 1
        cands, last = candidates(buf, log, e, t, strategy)
        assert goal[0] == goal[1] and float(goal[0]) in cands, (id_, goal, cands)
        assert batch.reward[i] == np.float32(ng(e, t, last) - goal[0])
    return relabelled


# ---------------------------------------------------------------------- golden tables
def golden_buffer(strategy: str, prob: float = 1.0, **kwargs: Any) -> rr.ReplayBuffer:
    her = rr.HindsightRelabel(diff_reward, strategy=strategy, relabel_prob=prob)
    buf = make_buffer(transforms=[her], **kwargs)
    log = Log(1)
    write(buf, log, 0, 3, end="terminated")  # steps 0..2
    write(buf, log, 0, 4, end="truncated")  # steps 3..6
    write(buf, log, 0, 2, end=None)  # steps 7..8, running (7 sampleable, 8 not)
    return buf


# t -> (ng(t) = ag_{t+1}, the goal(s) of the strategy); None: not relabelled (unfinished).
GOLDEN_FINAL = {0: (1, 2.5), 1: (2, 2.5), 2: (2.5, 2.5), 3: (4, 6.5), 4: (5, 6.5), 5: (6, 6.5),
                6: (6.5, 6.5), 7: None}  # fmt: skip
GOLDEN_FUTURE = {0: {1, 2, 2.5}, 1: {2, 2.5}, 2: {2.5}, 3: {4, 5, 6, 6.5}, 4: {5, 6, 6.5},
                 5: {6, 6.5}, 6: {6.5}, 7: None}  # fmt: skip
GOLDEN_EPISODE = {t: ({1, 2, 2.5} if t < 3 else {4, 5, 6, 6.5}) for t in range(7)} | {7: None}
NEXT_AG = {0: 1, 1: 2, 2: 2.5, 3: 4, 4: 5, 5: 6, 6: 6.5}


def test_golden_final() -> None:
    buf = golden_buffer("final")
    b = buf.sample(200)
    assert set(b.ids.tolist()) == set(range(8))
    for i, t in enumerate(b.ids.tolist()):
        row = GOLDEN_FINAL[t]
        if row is None:
            assert b.desired_goal[i].tolist() == [STORED_DG] * 2
            assert b.reward[i] == t  # stored per-step reward
            continue
        ag_next, goal = row
        assert b.desired_goal[i].tolist() == [goal, goal]
        assert b.next_desired_goal[i].tolist() == [goal, goal]
        assert b.reward[i] == np.float32(ag_next - goal)


@pytest.mark.parametrize(
    ("strategy", "table"), [("future", GOLDEN_FUTURE), ("episode", GOLDEN_EPISODE)]
)
def test_golden_candidate_sets(strategy: str, table: dict[int, Any]) -> None:
    buf = golden_buffer(strategy)
    b = buf.sample(4000)
    seen: dict[int, set[float]] = {t: set() for t in table}
    for i, t in enumerate(b.ids.tolist()):
        if table[t] is None:
            assert b.desired_goal[i].tolist() == [STORED_DG] * 2
            assert b.reward[i] == t
            continue
        goal = float(b.desired_goal[i, 0])
        seen[t].add(goal)
        assert b.next_desired_goal[i].tolist() == [goal, goal]
        assert b.reward[i] == np.float32(NEXT_AG[t] - goal)
    for t, cands in table.items():
        if cands is not None:
            assert seen[t] == cands, (t, seen[t], cands)  # every candidate, nothing else


def test_goal_step_range_kernel() -> None:
    t, first, end = np.array([3, 5]), np.array([1, 4]), np.array([6, 5])
    assert [x.tolist() for x in goal_step_range("future", t, first, end)] == [[3, 5], [6, 5]]
    assert [x.tolist() for x in goal_step_range("final", t, first, end)] == [[6, 5], [6, 5]]
    assert [x.tolist() for x in goal_step_range("episode", t, first, end)] == [[1, 4], [6, 5]]
    with pytest.raises(rr.ConfigError):
        goal_step_range("past", t, first, end)


# ---------------------------------------------------------------------- distributions
@pytest.mark.parametrize("strategy", ["future", "episode"])
def test_strategy_distribution_chi_square(strategy: str) -> None:
    her = rr.HindsightRelabel(diff_reward, strategy=strategy, relabel_prob=1.0)
    buf = make_buffer(transforms=[her], seed=123)
    log = Log(1)
    write(buf, log, 0, 5, end="terminated")
    write(buf, log, 0, 3, end="truncated")
    cells: dict[tuple[int, float], float] = {}
    n_trans = 8  # every step is sampleable, uniformly
    for t in range(n_trans):
        cands, _ = candidates(buf, log, 0, t, strategy)
        for g in cands:
            cells[(t, g)] = 1 / n_trans / len(cands)
    b = buf.sample(40_000)
    observed = dict.fromkeys(cells, 0)
    for t, g in zip(b.ids.tolist(), b.desired_goal[:, 0].tolist(), strict=True):
        observed[(t, g)] += 1  # KeyError = a goal outside the candidates
    keys = sorted(cells)
    exp = np.array([cells[k] for k in keys]) * b.batch_size
    _, p = stats.chisquare([observed[k] for k in keys], exp)
    assert p > 1e-3, p


@pytest.mark.parametrize("prob", [0.0, 0.3, 0.8, 1.0])
def test_relabel_prob_fraction(prob: float) -> None:
    buf = golden_buffer("final", prob)
    B = 40_000
    b = buf.sample(B)
    finished = b.ids < 7
    relabelled = b.desired_goal[:, 0] != STORED_DG
    assert not relabelled[~finished].any()
    frac = relabelled[finished].mean()
    n = finished.sum()
    assert abs(frac - prob) <= 4 * np.sqrt(prob * (1 - prob) / n) + 1e-12, frac


def test_prob_zero_is_identity() -> None:
    buf = golden_buffer("future", 0.0)
    b = buf.sample(64)
    ref = buf.get_transitions(b.ids)
    assert set(b) == set(ref)
    for k in ref:
        np.testing.assert_array_equal(b[k], ref[k], err_msg=k)


def test_unfinished_episodes_never_relabelled() -> None:
    her = rr.HindsightRelabel(diff_reward, strategy="episode", relabel_prob=1.0)
    buf = make_buffer(transforms=[her], num_envs=2, capacity=64)
    log = Log(2)
    write(buf, log, 0, 6, end=None)  # env 0: only a running episode
    write(buf, log, 1, 4, end="terminated")
    write(buf, log, 1, 5, end=None)
    b = buf.sample(2000)
    remaining = buf.steps_to_episode_end(b.ids)
    relabelled = b.desired_goal[:, 0] != STORED_DG
    assert (remaining == -1).any() and (remaining >= 0).any()
    np.testing.assert_array_equal(relabelled, remaining >= 0)
    ref = buf.get_transitions(b.ids)
    np.testing.assert_array_equal(b.reward[~relabelled], ref.reward[~relabelled])
    check_rows(buf, log, b, "episode")


# ---------------------------------------------------------------------- wrap-around, multi-env
@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_wrap_around_cut_episode(strategy: str) -> None:
    her = rr.HindsightRelabel(diff_reward, strategy=strategy, relabel_prob=1.0)
    buf = make_buffer(capacity=8, transforms=[her])
    log = Log(1)
    write(buf, log, 0, 10, end="truncated")  # steps 0..9; 0..4 get overwritten
    write(buf, log, 0, 3, end="terminated")  # steps 10..12 (step 10 reuses step 2's slot)
    assert buf.episode_begin(np.array([5])).tolist() == [0]  # the episode was cut
    b = buf.sample(3000)
    assert check_rows(buf, log, b, strategy) == b.batch_size
    cut = b.ids < 10
    goals = set(b.desired_goal[cut, 0].tolist())
    # Steps 5..9 are stored: never ng(4) = 5 (step 4 is overwritten), never episode 2's goals.
    want = {"future": {6, 7, 8, 9, 9.5}, "final": {9.5}, "episode": {6, 7, 8, 9, 9.5}}
    assert goals == want[strategy]


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_multi_env_with_wrap(strategy: str) -> None:
    her = rr.HindsightRelabel(diff_reward, strategy=strategy, relabel_prob=1.0)
    buf = make_buffer(capacity=30, num_envs=3, transforms=[her], seed=7)  # 10 steps per env
    log = Log(3)
    rng = np.random.default_rng(1)
    for _ in range(4):
        for e in range(3):
            end = ["terminated", "truncated", None][int(rng.integers(3))]
            write(buf, log, e, int(rng.integers(1, 6)), end=end)
    for e in range(3):  # every env ends with a finished episode
        write(buf, log, e, 2, end="terminated")
    b = buf.sample(3000)
    assert set((b.ids % 3).tolist()) == {0, 1, 2}
    relabelled = check_rows(buf, log, b, strategy)
    assert relabelled > 0
    # A goal always comes from the sampled row's own env.
    rows = b.desired_goal[:, 0] != STORED_DG
    np.testing.assert_array_equal(b.desired_goal[rows, 0] // 1000, b.env_ids[rows])


# ---------------------------------------------------------------------- n-step windows
def test_nstep_rewards_recomputed_over_window() -> None:
    seen_keys: list[set[str]] = []

    def fn(ag: np.ndarray, g: np.ndarray, info: dict[str, Any]) -> np.ndarray:
        seen_keys.append(set(info))
        assert info["reward"].shape == ag.shape[:1] == g.shape[:1]
        # Uses info_j: the action and the per-step stored reward of step t+j.
        return (ag[:, 0] - g[:, 0] + info["action"] / 1000 + info["reward"]).astype(np.float32)

    gamma = 0.9
    her = rr.HindsightRelabel(fn, strategy="future", relabel_prob=1.0)
    buf = make_buffer(n_step=3, gamma=gamma, transforms=[her])
    log = Log(1)
    write(buf, log, 0, 5, end="terminated")  # steps 0..4
    write(buf, log, 0, 2, end="truncated")  # steps 5..6
    write(buf, log, 0, 5, end=None)  # steps 7..11: 7, 8 sampleable, unfinished
    b = buf.sample(500)
    ref = buf.get_transitions(b.ids)
    assert set(b.ids.tolist()) == set(range(9))
    for k in ("terminated", "truncated", "discount", "steps", "next_obs", "next_achieved_goal"):
        np.testing.assert_array_equal(b[k], ref[k], err_msg=k)  # stay as stored
    for i, t in enumerate(b.ids.tolist()):
        _, last, finished = log.episode_of(0, t)
        goal = float(b.desired_goal[i, 0])
        if not finished:
            assert goal == STORED_DG and b.reward[i] == ref.reward[i]
            continue
        assert goal in candidates(buf, log, 0, t, "future")[0]
        m = min(3, last - t + 1)
        assert b.steps[i] == m
        want = np.float32(0)
        for j in range(m):
            r = np.float32(ng(0, t + j, last) - goal + 100 * (t + j) / 1000 + (t + j))
            want += gamma**j * r
        np.testing.assert_allclose(b.reward[i], want, rtol=1e-6)
    goal_keys = {"achieved_goal", "desired_goal", "next_achieved_goal", "next_desired_goal"}
    assert seen_keys and all(not (keys & goal_keys) for keys in seen_keys)
    assert all({"obs", "action", "ids", "next_obs", "discount"} <= keys for keys in seen_keys)


def test_nstep_identity_reward_matches_buffer_sum() -> None:
    """A reward_fn returning the stored per-step reward reproduces the buffer's n-step sum."""
    her = rr.HindsightRelabel(
        lambda ag, g, info: info["reward"], strategy="episode", relabel_prob=1.0
    )
    buf = make_buffer(n_step=4, gamma=0.97, transforms=[her])
    log = Log(1)
    for length in (6, 3, 1, 7):
        write(buf, log, 0, length, end="terminated")
    b = buf.sample(300)
    np.testing.assert_array_equal(b.reward, buf.get_transitions(b.ids).reward)
    assert (b.desired_goal[:, 0] != STORED_DG).all()


# ---------------------------------------------------------------------- stored data, determinism
def test_stored_data_unchanged() -> None:
    buf = golden_buffer("future")
    ids = np.arange(9)
    before = {name: buf.get_field(name, ids).copy() for name in buf.schema.fields}
    arrays_before = buf.state_dict()["arrays"]
    for _ in range(5):
        b = buf.sample(64)
        b.desired_goal[...] = 123.0  # the batch's arrays are its own
    for name, value in before.items():
        np.testing.assert_array_equal(buf.get_field(name, ids), value, err_msg=name)
    for k, v in buf.state_dict()["arrays"].items():
        np.testing.assert_array_equal(v, arrays_before[k], err_msg=k)


def _filled_pair(strategy: str) -> tuple[rr.ReplayBuffer, rr.ReplayBuffer, Log]:
    out = []
    for _ in range(2):
        her = rr.HindsightRelabel(diff_reward, strategy=strategy, relabel_prob=0.6)
        buf = make_buffer(capacity=40, num_envs=2, n_step=2, transforms=[her], seed=11)
        log = Log(2)
        for length, end in ((4, "terminated"), (7, "truncated"), (3, None)):
            for e in range(2):
                write(buf, log, e, length + e, end=end)
        out.append(buf)
    return out[0], out[1], log


def assert_batches_equal(a: rr.Batch, b: rr.Batch) -> None:
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("strategy", ["future", "episode"])
def test_same_seed_same_stream(strategy: str) -> None:
    a, b, _ = _filled_pair(strategy)
    for _ in range(3):
        assert_batches_equal(a.sample(50), b.sample(50))


def test_checkpoint_round_trip_continues_stream(tmp_path: Any) -> None:
    twin, saved, log = _filled_pair("future")
    for _ in range(2):
        assert_batches_equal(twin.sample(32), saved.sample(32))
    path = tmp_path / "her.rlr"
    saved.save(path)
    her = rr.HindsightRelabel(diff_reward, strategy="future", relabel_prob=0.6)
    loaded = rr.load(path, transforms=[her])
    for _ in range(3):
        assert_batches_equal(twin.sample(32), loaded.sample(32))
    log2 = Log(2)  # the same further writes to both (a copy of the log for each)
    log2.episodes, log2.count = [list(x) for x in log.episodes], list(log.count)
    for e in range(2):
        write(twin, log, e, 30, end="terminated")  # wraps the 20-step rings
        write(loaded, log2, e, 30, end="terminated")
    for _ in range(3):
        x, y = twin.sample(32), loaded.sample(32)
        assert_batches_equal(x, y)
    assert (x.desired_goal[:, 0] != STORED_DG).any()


def test_per_call_and_buffer_level_agree() -> None:
    level = golden_buffer("episode", 0.5)
    plain = make_buffer()
    log = Log(1)
    write(plain, log, 0, 3, end="terminated")
    write(plain, log, 0, 4, end="truncated")
    write(plain, log, 0, 2, end=None)
    her = rr.HindsightRelabel(diff_reward, strategy="episode", relabel_prob=0.5)
    for _ in range(3):
        assert_batches_equal(level.sample(40), plain.sample(40, transform=her))
    b = plain.sample(400, transform=her)
    assert check_rows(plain, log, b, "episode", prob_one=False) > 0
    assert (plain.sample(100).desired_goal == STORED_DG).all()  # no transform: as stored


def test_prioritized_buffer_with_hindsight() -> None:
    fields = {"obs": rr.Field((3,), np.float32), "action": rr.Field((), np.int64),
              "achieved_goal": GOAL, "desired_goal": GOAL}  # fmt: skip
    her = rr.HindsightRelabel(diff_reward, strategy="final", relabel_prob=1.0)
    buf = rr.PrioritizedReplayBuffer(64, fields, transforms=[her], seed=0)
    log = Log(1)
    write(buf, log, 0, 3, end="terminated")
    write(buf, log, 0, 4, end="truncated")
    b = buf.sample(50)
    assert "weights" in b and "probabilities" in b
    assert check_rows(buf, log, b, "final") == 50


def test_gymnasium_dict_observation_space() -> None:
    spaces = pytest.importorskip("gymnasium.spaces")
    box = spaces.Box(-10, 10, (2,), np.float32)
    obs_space = spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})
    her = rr.HindsightRelabel(diff_reward, strategy="final", relabel_prob=1.0)
    buf = rr.ReplayBuffer.from_spaces(
        obs_space, spaces.Discrete(2), capacity=20, transforms=[her], seed=0
    )
    z = np.zeros(2, np.float32)
    for t in range(4):
        ag, nag = np.full(2, t, np.float32), np.full(2, t + 1, np.float32)
        buf.add(observation=z, achieved_goal=ag, desired_goal=z - 5, action=1, reward=0.0,
                terminated=t == 3, truncated=False, next_observation=z, next_achieved_goal=nag,
                next_desired_goal=z - 5)  # fmt: skip
    b = buf.sample(16)
    assert (b.desired_goal == 4).all() and (b.next_desired_goal == 4).all()
    np.testing.assert_array_equal(b.reward, b.next_achieved_goal[:, 0] - 4)


# ---------------------------------------------------------------------- validation and errors
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"strategy": "past"}, "strategy"),
        ({"relabel_prob": 1.5}, "relabel_prob"),
        ({"relabel_prob": -0.1}, "relabel_prob"),
        ({"relabel_prob": float("nan")}, "relabel_prob"),
        ({"relabel_prob": True}, "relabel_prob"),
        ({"relabel_prob": "0.5"}, "relabel_prob"),
        ({"achieved_goal": "g", "desired_goal": "g"}, "different"),
        ({"desired_goal": 3}, "desired_goal"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(rr.ConfigError, match=match):
        rr.HindsightRelabel(diff_reward, **kwargs)


def test_reward_fn_must_be_callable() -> None:
    with pytest.raises(rr.ConfigError, match="reward_fn"):
        rr.HindsightRelabel(None)  # type: ignore[arg-type]


def _fields(**extra: rr.Field) -> dict[str, rr.Field]:
    return {"obs": rr.Field((3,), np.float32), **extra}


@pytest.mark.parametrize(
    ("fields", "kwargs", "match"),
    [
        (_fields(desired_goal=GOAL), {}, "'achieved_goal' is not a field"),
        (_fields(achieved_goal=GOAL, desired_goal=rr.Field((2,), np.float32)), {},
         "not an observation field"),
        (_fields(achieved_goal=GOAL, desired_goal=rr.Field((3,), np.float32, observation=True)),
         {}, "shape"),
        (_fields(achieved_goal=GOAL, desired_goal=rr.Field((2,), np.int32, observation=True)),
         {}, "cast"),
        (_fields(desired_goal=rr.Field((3,), np.float32, observation=True)),
         {"frame_stack": 2, "achieved_goal": "obs"}, "frame_stack"),
    ],
)  # fmt: skip
def test_bind_validation(fields: dict[str, rr.Field], kwargs: dict[str, Any], match: str) -> None:
    buf_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k == "frame_stack"}
    her = rr.HindsightRelabel(diff_reward, **kwargs)
    with pytest.raises(rr.ConfigError, match=match):
        rr.ReplayBuffer(32, fields, transforms=[her], **buf_kwargs)
    plain = rr.ReplayBuffer(32, fields, **buf_kwargs)  # what a per-call transform= does first
    with pytest.raises(rr.ConfigError, match=match):
        her.bind(plain)


def test_goal_may_be_obs_without_frame_stack() -> None:
    fields = _fields(desired_goal=rr.Field((3,), np.float32, observation=True))
    her = rr.HindsightRelabel(diff_reward, achieved_goal="obs")
    rr.ReplayBuffer(32, fields, transforms=[her])  # no error


def test_one_instance_per_buffer() -> None:
    her = rr.HindsightRelabel(diff_reward)
    first = make_buffer(transforms=[her])
    with pytest.raises(rr.ConfigError, match="another buffer"):
        make_buffer(transforms=[her])
    del first  # the first buffer is gone: the instance may be bound again
    make_buffer(transforms=[her])


def test_unbound_call_raises() -> None:
    her = rr.HindsightRelabel(diff_reward)
    with pytest.raises(rr.ConfigError, match="not bound"):
        her(rr.Batch(ids=np.zeros(1, np.int64)))


def test_reward_fn_wrong_shape() -> None:
    her = rr.HindsightRelabel(lambda ag, g, info: ag, strategy="final", relabel_prob=1.0)
    buf = golden_buffer("final")
    with pytest.raises(rr.ShapeError, match="reward_fn"):
        buf.sample(8, transform=her)


def test_bad_batches() -> None:
    buf = golden_buffer("final")
    her = buf.transforms[0]
    b = buf.sample(4)
    with pytest.raises(rr.FieldError, match="lacks"):
        her(rr.Batch(ids=b.ids))
    with pytest.raises(rr.ShapeError, match="sequence"):
        her(b.replace(desired_goal=b.desired_goal[:, None]))
    log = Log(1)
    log.count[0] = 9
    write(buf, log, 0, 64, end="terminated")  # overwrites every step of b
    with pytest.raises(rr.InvalidIdError, match="overwritten"):
        her(b)


def test_repr() -> None:
    her = rr.HindsightRelabel(diff_reward, strategy="final", relabel_prob=0.5)
    assert "diff_reward" in repr(her) and "'final'" in repr(her)


# ---------------------------------------------------------------------- transforms in general
def test_user_transform_both_forms_in_order() -> None:
    calls: list[str] = []

    def add_flag(batch: rr.Batch) -> rr.Batch:
        calls.append("level")
        return batch.replace(flag=np.ones(batch.batch_size))

    def double_flag(batch: rr.Batch) -> rr.Batch:
        calls.append("call")
        return batch.replace(flag=batch["flag"] * 2)

    buf = golden_buffer("final")
    buf2 = make_buffer(transforms=[add_flag])
    log = Log(1)
    write(buf2, log, 0, 5, end="terminated")
    b = buf2.sample(6, transform=double_flag)
    assert calls == ["level", "call"] and (b["flag"] == 2).all()
    assert "flag" not in buf2.get_transitions(b.ids)
    b2 = buf.sample(6, transform=lambda x: x.replace(reward=x.reward * 0))
    assert (b2.reward == 0).all() and (b2.desired_goal != STORED_DG).any()


def test_transform_returning_non_batch_raises() -> None:
    buf = golden_buffer("final")
    with pytest.raises(TypeError, match=r"must return an rr\.Batch"):
        buf.sample(4, transform=lambda b: b.to_dict())  # type: ignore[arg-type,return-value]
    with pytest.raises(rr.ConfigError, match="callables"):
        make_buffer(transforms=[42])  # type: ignore[list-item]


def test_docs_snippet_runs() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "hindsight.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/hindsight.md", "exec"), namespace)
    batch, stored = namespace["batch"], namespace["stored"]
    assert batch.batch_size == 256
    assert (batch.reward == 0).mean() > 0.1 > (stored.reward == 0).mean()
