"""Recency mixing and draws without replacement (ALF ``recent_data_ratio`` / ``with_replacement``).

``draw_mixed`` is tested alone (the pure kernel), then through ``ReplayBuffer.sample``: the
recent part is ``ceil(recent_ratio * B)`` draws, uniform over the ``recent_steps`` newest
sampleable steps of each env; the rest are uniform over all sampleable steps; without
replacement a batch has no duplicates whenever ``B`` does not exceed the sampleable steps.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

import rlreplay as rr
from rlreplay.sampling.uniform import draw_mixed

# Three envs with unequal ranges and one empty env: sizes 1000, 500, 0, 2000.
LO = np.array([0, 10, 7, 5], np.int64)
HI = np.array([1000, 510, 7, 2005], np.int64)
RECENT = 20  # newest steps per env that count as recent: 60 in all
SIZES = HI - LO
TOTAL = int(SIZES.sum())
OFFSET = np.cumsum(SIZES) - SIZES


def draw(
    batch: int,
    ratio: float,
    replacement: bool,
    seed: int = 0,
    *,
    lo: Any = LO,
    hi: Any = HI,
    recent: int = RECENT,
    calls: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """``calls`` batches from one generator, as ``(calls, B)`` env ids and steps."""
    rng = np.random.default_rng(seed)
    out = [
        draw_mixed(
            np.asarray(lo),
            np.asarray(hi),
            batch,
            rng,
            recent_ratio=ratio,
            recent_steps=recent,
            replacement=replacement,
        )
        for _ in range(calls)
    ]
    return np.stack([e for e, _ in out]), np.stack([t for _, t in out])


def position(env: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Global position of ``(env, t)`` among all sampleable steps (env after env)."""
    assert ((t >= LO[env]) & (t < HI[env])).all(), "a draw outside the sampleable range"
    return OFFSET[env] + t - LO[env]


def is_recent(env: np.ndarray, t: np.ndarray, recent: int = RECENT) -> np.ndarray:
    return t >= HI[env] - recent


# every sampleable step, by global position: which of them are recent
_env_all = np.repeat(np.arange(4), SIZES)
_t_all = np.arange(TOTAL) - np.repeat(OFFSET - LO, SIZES)
RECENT_MASK = is_recent(_env_all, _t_all)
N_RECENT = int(RECENT_MASK.sum())


# ---------------------------------------------------------------------- the kernel
@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("ratio", [0.0, 0.3, 1.0])
def test_draws_stay_in_the_sampleable_ranges(ratio: float, replacement: bool) -> None:
    env, t = draw(64, ratio, replacement, calls=20)
    assert env.dtype == np.int64 and t.dtype == np.int64
    position(env, t)  # asserts every draw is sampleable
    assert not (env == 2).any()  # the empty env is never drawn


@pytest.mark.parametrize(
    ("ratio", "batch", "k"),
    [
        (0.25, 64, 16),
        (0.5, 7, 4),
        (1 / 3, 9, 3),
        (0.01, 10, 1),
        (0.0, 10, 0),
        (1.0, 10, 10),
        # ratio * B is an integer, but the float product rounds above it
        (0.55, 100, 55),  # 0.55 * 100 == 55.00000000000001
        (0.07, 100, 7),
        (0.28, 50, 14),
    ],
)
@pytest.mark.parametrize("replacement", [True, False])
def test_recent_part_is_ceil_of_ratio_times_batch(
    ratio: float, batch: int, k: int, replacement: bool
) -> None:
    """With a huge range, almost no non-recent draw hits the recent steps: the count is k."""
    lo, hi = np.array([0]), np.array([10**9])
    assert k == math.ceil(round(ratio * batch, 9))
    for seed in range(3):
        _, t = draw(batch, ratio, replacement, seed, lo=lo, hi=hi, recent=batch)
        assert int((t >= hi[0] - batch).sum()) == k, f"seed {seed}"


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize(("ratio", "batch"), [(0.25, 64), (0.5, 30), (0.9, 40)])
def test_recent_fraction_within_tolerance(ratio: float, batch: int, replacement: bool) -> None:
    calls = 400
    env, t = draw(batch, ratio, replacement, seed=1, calls=calls)
    counts = is_recent(env, t).sum(axis=1)
    k = math.ceil(ratio * batch)
    assert (counts >= k).all()  # the recent part always lands in the recent steps
    # the rest hit recent steps only by chance
    p = N_RECENT / TOTAL if replacement else (N_RECENT - k) / (TOTAL - k)
    mean = k + (batch - k) * p
    sd = math.sqrt((batch - k) * p * (1 - p) / calls)
    assert abs(counts.mean() - mean) < 5 * sd + 1e-9


def test_recent_part_is_uniform_over_the_newest_steps_of_each_env() -> None:
    env, t = draw(600, 1.0, True, seed=2, calls=100)
    assert is_recent(env, t).all()
    pos = position(env.ravel(), t.ravel())
    counts = np.bincount(pos, minlength=TOTAL)[RECENT_MASK]
    assert counts.size == N_RECENT == 60
    assert chisquare(counts).pvalue > 1e-3


def test_recent_part_without_replacement() -> None:
    env, t = draw(60, 1.0, False, seed=3, calls=5)  # B == recent steps: each of them once
    for e, s in zip(env, t, strict=True):
        assert sorted(position(e, s).tolist()) == np.flatnonzero(RECENT_MASK).tolist()
    env, t = draw(25, 1.0, False, seed=4, calls=400)
    counts = np.zeros(TOTAL, np.int64)
    for e, s in zip(env, t, strict=True):
        pos = position(e, s)
        assert np.unique(pos).size == 25
        counts[pos] += 1
    assert chisquare(counts[RECENT_MASK]).pvalue > 1e-3


def binned(counts: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Recent cells summed in blocks of 4, the others in blocks of 20 (enough per cell)."""
    parts = []
    for arr in (counts, expected):
        recent, other = arr[RECENT_MASK], arr[~RECENT_MASK]
        parts.append(
            np.concatenate(
                [
                    np.add.reduceat(recent, np.arange(0, recent.size, 4)),
                    np.add.reduceat(other, np.arange(0, other.size, 20)),
                ]
            )
        )
    return parts[0], parts[1]


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("ratio", [0.0, 0.3])
def test_each_part_is_uniform(ratio: float, replacement: bool) -> None:
    """The marginal law of a draw: recent part uniform on the recent steps, rest uniform."""
    batch, calls = 100, 400
    env, t = draw(batch, ratio, replacement, seed=5, calls=calls)
    counts = np.bincount(position(env.ravel(), t.ravel()), minlength=TOTAL)
    k = math.ceil(ratio * batch)
    if replacement:
        p_rest = np.full(TOTAL, (batch - k) / TOTAL)
        p = p_rest + RECENT_MASK * (k / N_RECENT)
    else:  # k distinct recent steps, then batch - k distinct among the other TOTAL - k
        q = (batch - k) / (TOTAL - k)
        p = np.where(RECENT_MASK, k / N_RECENT + (1 - k / N_RECENT) * q, q)
    assert math.isclose(p.sum(), batch)
    got, want = binned(counts, calls * p)
    assert want.min() > 20
    assert chisquare(got, want * got.sum() / want.sum()).pvalue > 1e-3


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 12), min_size=1, max_size=4).filter(lambda s: sum(s) > 0),
    ratio=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]),
    recent=st.integers(1, 5),
    data=st.data(),
)
def test_no_duplicates_without_replacement(
    sizes: list[int], ratio: float, recent: int, data: st.DataObject
) -> None:
    lo = np.arange(len(sizes), dtype=np.int64) * 3  # arbitrary first steps
    hi = lo + np.array(sizes)
    total = sum(sizes)
    batch = data.draw(st.integers(1, total + 3))
    seed = data.draw(st.integers(0, 2**16))
    env, t = draw(batch, ratio, False, seed, lo=lo, hi=hi, recent=recent)
    env, t = env[0], t[0]
    assert env.shape == t.shape == (batch,)
    assert ((t >= lo[env]) & (t < hi[env])).all()
    pairs = set(zip(env.tolist(), t.tolist(), strict=True))
    if batch <= total:
        assert len(pairs) == batch  # no duplicates
        n_recent = int(np.minimum(np.array(sizes), recent).sum())
        k = min(math.ceil(ratio * batch), n_recent)
        assert int((t >= hi[env] - recent).sum()) >= k
    if batch == total:
        assert len(pairs) == total  # every step once


def test_same_generator_state_gives_the_same_draws() -> None:
    for replacement in (True, False):
        a = draw(50, 0.4, replacement, seed=8, calls=3)
        b = draw(50, 0.4, replacement, seed=8, calls=3)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


# ---------------------------------------------------------------------- through the buffer
RECENCY_ARGS = ("recent_ratio", "recent_steps", "replacement")


def require_recency_api() -> None:
    """Both the constructor and ``sample`` take the three arguments (a clear failure if not)."""
    for fn in (rr.ReplayBuffer.__init__, rr.ReplayBuffer.sample):
        params = inspect.signature(fn).parameters
        missing = [a for a in RECENCY_ARGS if a not in params]
        assert not missing, f"{fn.__qualname__} does not accept {missing} yet"


def make(num_envs: int = 2, env_capacity: int = 200, **kw: Any) -> rr.ReplayBuffer:
    return rr.ReplayBuffer(
        num_envs * env_capacity,
        {"obs": rr.Field((), np.float32)},
        num_envs=num_envs,
        seed=kw.pop("seed", 0),
        **kw,
    )


def fill(buf: rr.ReplayBuffer, steps: dict[int, int]) -> None:
    """``steps[e]`` steps for env ``e``; an episode ends every 13 steps."""
    for e, n in steps.items():
        t = np.arange(n)
        buf.extend(
            env_id=e, obs=t.astype(np.float32), reward=np.ones(n), terminated=t % 13 == 12,
            truncated=np.zeros(n, bool), next_obs=-t.astype(np.float32),
        )  # fmt: skip


def recent_ids(buf: rr.ReplayBuffer, recent: int) -> set[int]:
    """Ids of the ``recent`` newest sampleable steps of each env."""
    ids = buf.sampleable_ids()
    out: set[int] = set()
    for e in range(buf.num_envs):
        mine = ids[ids % buf.num_envs == e]
        out |= set(mine[-recent:].tolist())
    return out


def test_signatures_accept_recency_and_replacement() -> None:
    require_recency_api()


def test_buffer_recent_part_and_per_call_override() -> None:
    require_recency_api()
    buf = make(recent_ratio=0.5, recent_steps=10, n_step=3, seed=1)
    fill(buf, {0: 150, 1: 80})
    recent = recent_ids(buf, 10)
    sampleable = set(buf.sampleable_ids().tolist())
    for _ in range(50):
        ids = buf.sample(32).ids.tolist()
        assert set(ids) <= sampleable  # windows near the cursor are still excluded
        assert sum(i in recent for i in ids) >= 16
    for _ in range(20):  # per call beats the constructor
        ids = buf.sample(32, recent_ratio=1.0).ids.tolist()
        assert set(ids) <= recent
        ids = buf.sample(32, recent_ratio=1.0, recent_steps=2).ids.tolist()
        assert set(ids) <= recent_ids(buf, 2)
    hits = sum(
        sum(i in recent for i in buf.sample(50, recent_ratio=0.0).ids.tolist()) for _ in range(40)
    )
    assert hits < 2000 * 0.5  # uniform: ~ 20 / 222 of the draws, far below the mixed half


def test_buffer_without_replacement_has_no_duplicates() -> None:
    require_recency_api()
    buf = make(replacement=False, seed=2)
    fill(buf, {0: 30, 1: 12})
    n = buf.num_sampleable
    for batch in (1, 10, n - 1, n):
        for _ in range(10):
            ids = buf.sample(batch).ids
            assert np.unique(ids).size == batch
    assert sorted(buf.sample(n).ids.tolist()) == sorted(buf.sampleable_ids().tolist())
    ids = buf.sample(n + 5).ids  # more than there is: duplicates are unavoidable
    assert ids.shape == (n + 5,) and set(ids.tolist()) <= set(buf.sampleable_ids().tolist())
    plain = make(seed=2)
    fill(plain, {0: 30, 1: 12})
    ids = plain.sample(n, replacement=False).ids
    assert np.unique(ids).size == n
    mixed = plain.sample(20, replacement=False, recent_ratio=0.5, recent_steps=3)
    assert np.unique(mixed.ids).size == 20


def test_buffer_recent_part_is_uniform() -> None:
    require_recency_api()
    buf = make(recent_ratio=1.0, recent_steps=15, seed=3)
    fill(buf, {0: 150, 1: 40})
    recent = sorted(recent_ids(buf, 15))
    drawn = np.concatenate([buf.sample(300).ids for _ in range(30)])
    assert set(drawn.tolist()) <= set(recent)
    counts = np.array([(drawn == i).sum() for i in recent])
    assert chisquare(counts).pvalue > 1e-3


@pytest.mark.parametrize(
    "kw",
    [
        {"recent_ratio": 1.5},
        {"recent_ratio": -0.1},
        {"recent_ratio": float("nan")},
        {"recent_ratio": 0.5, "recent_steps": 0},
        {"recent_steps": -3},
        {"recent_steps": 2.5},
    ],
)
def test_bad_recency_arguments_are_rejected(kw: dict[str, Any]) -> None:
    require_recency_api()
    with pytest.raises(rr.ConfigError):
        make(**kw)
    buf = make()
    fill(buf, {0: 5})
    with pytest.raises(rr.ConfigError):
        buf.sample(2, **kw)


def test_checkpoint_round_trip_keeps_recency(tmp_path: Path) -> None:
    require_recency_api()
    kw: dict[str, Any] = {"recent_ratio": 0.25, "recent_steps": 7, "replacement": False}
    live, twin = make(seed=5, **kw), make(seed=5, **kw)
    for buf in (live, twin):
        fill(buf, {0: 120, 1: 60})
        buf.sample(8)
    live.save(tmp_path / "ckpt")
    loaded = rr.load(tmp_path / "ckpt")
    for _ in range(5):
        a, b = loaded.sample(16), twin.sample(16)
        for name in b:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        assert np.unique(a.ids).size == 16


def test_prioritized_buffer_rejects_recency_and_no_replacement() -> None:
    fields = {"obs": rr.Field((), np.float32)}
    for kw in ({"recent_ratio": 0.5, "recent_steps": 3}, {"replacement": False}):
        with pytest.raises(rr.ConfigError):
            rr.PrioritizedReplayBuffer(16, fields, **kw)
    buf = rr.PrioritizedReplayBuffer(16, fields, seed=0)
    buf.add(obs=0.0, reward=0.0, terminated=True, truncated=False, next_obs=1.0)
    for kw in ({"recent_ratio": 0.5, "recent_steps": 3}, {"replacement": False}):
        with pytest.raises(rr.ConfigError):
            buf.sample(2, **kw)
    assert buf.sample(2, recent_ratio=0.0, replacement=True).ids.tolist() == [0, 0]
