"""Sequences, whole episodes and episodic queries: golden tables, laws and a slow reference.

Every sampled row is checked against :class:`tests.reference.RefBuffer` (which keeps every step
ever added): the row's ``ids``/``env_ids`` name its first step, and the expected ``(L, ...)``
fields are rebuilt step by step from the history.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

import rlreplay as rr
from tests.reference import RefBuffer

RAW = ("obs", "action", "reward", "terminated", "truncated")  # raw per-step fields


# ---------------------------------------------------------------------- slow reference
def stored_range(ref: RefBuffer, env: int) -> range:
    return range(ref.oldest_stored(env), len(ref.history[env]))


def ref_run_length(ref: RefBuffer, env: int, t0: int, length: int, within: bool) -> int:
    """Real steps of a run from stored step ``t0``: up to the newest step (and episode end)."""
    h = ref.history[env]
    n = 0
    for t in range(t0, min(t0 + length, len(h))):
        n += 1
        if within and (h[t].done or h[t].cut):
            break
    return n


def ref_valid_starts(ref: RefBuffer, length: int, within: bool) -> list[tuple[int, int]]:
    return [
        (e, t)
        for e in range(ref.num_envs)
        for t in stored_range(ref, e)
        if ref_run_length(ref, e, t, length, within) == length
    ]


def ref_step(ref: RefBuffer, env: int, t: int) -> dict[str, Any]:
    """Raw fields of stored step ``t`` plus its ``next_obs`` / ``next_known``."""
    h = ref.history[env]
    out = {k: np.asarray(h[t].values[k]) for k in RAW if k in h[t].values}
    if h[t].done:
        out["next_obs"], out["next_known"] = np.asarray(h[t].values["next_obs"]), True
    elif t + 1 < len(h) and not h[t].cut:  # an abandoned episode's last step: unknown
        out["next_obs"], out["next_known"] = np.asarray(h[t + 1].values["obs"]), True
    else:  # the newest step of a running episode: its next observation is not known yet
        out["next_obs"], out["next_known"] = np.zeros_like(out["obs"]), False
    return out


def ref_run(ref: RefBuffer, env: int, t0: int, n_real: int, length: int) -> dict[str, Any]:
    """Expected ``(length, ...)`` fields of a run with ``n_real`` real steps from ``t0``."""
    steps = [ref_step(ref, env, t) for t in range(t0, t0 + n_real)]
    pad = {k: np.zeros_like(v) for k, v in steps[0].items()}
    pad["next_known"] = False
    steps += [pad] * (length - n_real)
    out = {k: np.stack([np.asarray(s[k]) for s in steps]) for k in steps[0]}
    out["mask"] = np.arange(length) < n_real
    return out


def assert_rows_match(batch: rr.Batch, ref: RefBuffer, length: int, within: bool) -> None:
    """Every row of a ``sample_sequences`` batch equals the reference run of its first step."""
    E = ref.num_envs
    assert batch.mask.shape == (batch.ids.shape[0], length)
    for row, (tid, env) in enumerate(zip(batch.ids.tolist(), batch.env_ids.tolist(), strict=True)):
        assert tid % E == env
        t0 = tid // E
        assert t0 in stored_range(ref, env), f"start {t0} of env {env} is not stored"
        n_real = ref_run_length(ref, env, t0, length, within)
        expected = ref_run(ref, env, t0, n_real, length)
        for name, value in expected.items():
            np.testing.assert_array_equal(batch[name][row], value, err_msg=f"{name} row {row}")


def every(batch: rr.Batch, step: int) -> rr.Batch:
    """Every ``step``-th row (row checks against the slow reference on big batches)."""
    return rr.Batch({k: v[::step] for k, v in batch.items()})


def prefix_masks(mask: np.ndarray) -> bool:
    """Whether every row of a ``(B, L)`` mask is True then False (a prefix)."""
    return bool((np.diff(mask.astype(np.int8), axis=1) <= 0).all())


# ---------------------------------------------------------------------- builders
def make(capacity: int, num_envs: int = 1, **kw: Any) -> rr.ReplayBuffer:
    """obs is ``(env, t)`` and action ``1000 env + t``: every row is traceable."""
    return rr.ReplayBuffer(
        capacity,
        {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)},
        num_envs=num_envs,
        seed=kw.pop("seed", 0),
        **kw,
    )


def step_values(env: int, t: int, term: bool, trunc: bool) -> dict[str, Any]:
    return {
        "obs": np.array([env, t], np.float32),
        "action": 1000 * env + t,
        "reward": float(t % 5) - 1.5 + env,
        "terminated": term,
        "truncated": trunc,
        "next_obs": np.array([-env - 1, -t - 1], np.float32),
    }


class Driver:
    """A buffer and its reference, fed the same steps."""

    def __init__(self, env_capacity: int, num_envs: int = 1, **kw: Any) -> None:
        self.buf = make(env_capacity * num_envs, num_envs, **kw)
        self.ref = RefBuffer(
            num_envs,
            env_capacity,
            kw.get("n_step", 1),
            kw.get("gamma", 0.99),
            kw.get("frame_stack", 1),
            True,
            ("obs",),
        )
        self.t = [0] * num_envs

    def _next(self, env: int, term: bool, trunc: bool) -> dict[str, Any]:
        v = step_values(env, self.t[env], term, trunc)
        self.t[env] += 1
        return v

    def add(self, flags: dict[int, tuple[bool, bool]]) -> None:
        """One step for each env in ``flags`` (``env -> (terminated, truncated)``)."""
        envs = sorted(flags)
        steps = [self._next(e, *flags[e]) for e in envs]
        if self.buf.num_envs == 1:
            ids = self.buf.add(**steps[0])
        else:
            batched = {k: np.stack([np.asarray(s[k]) for s in steps]) for k in steps[0]}
            ids = self.buf.add(env_ids=np.array(envs), **batched)
        assert ids.tolist() == [self.ref.add(e, s) for e, s in zip(envs, steps, strict=True)]

    def extend(self, env: int, flags: list[tuple[bool, bool]]) -> None:
        steps = [self._next(env, *f) for f in flags]
        batched = {k: np.stack([np.asarray(s[k]) for s in steps]) for k in steps[0]}
        ids = self.buf.extend(env_id=env, **batched)
        assert ids.tolist() == [self.ref.add(env, s) for s in steps]

    def episode(self, env: int, length: int, end: str = "terminated") -> None:
        flags = [(False, False)] * (length - 1)
        flags.append((end == "terminated", end == "truncated"))
        for f in flags:
            self.add({env: f})

    def clear(self) -> None:
        self.buf.clear()
        self.ref.clear()


# ---------------------------------------------------------------------- golden tables
def golden_buffer() -> rr.ReplayBuffer:
    """C = 8, steps 0..9 (2..9 stored): episode 0..2 terminated (cut), 3..6 truncated, 7.. runs.

    obs = 10 + t, reward = t, final next_obs = 100 + t.
    """
    buf = rr.ReplayBuffer(8, {"obs": rr.Field((), np.float32)}, seed=0)
    for t in range(10):
        buf.add(
            obs=10.0 + t,
            reward=float(t),
            terminated=t == 2,
            truncated=t == 6,
            next_obs=100.0 + t,
        )
    return buf


T, F = True, False
# (within_episode, start) -> obs, reward, terminated, truncated, next_obs, next_known, mask
GOLDEN_L4: dict[tuple[bool, int], tuple[list[Any], ...]] = {
    # the cut episode's last (and only stored) step: one real step, its final observation
    (T, 2): ([12, 0, 0, 0], [2, 0, 0, 0], [T, F, F, F], [F, F, F, F],
             [102, 0, 0, 0], [T, F, F, F], [T, F, F, F]),
    # a whole 4-step episode, truncated at its last step
    (T, 3): ([13, 14, 15, 16], [3, 4, 5, 6], [F, F, F, F], [F, F, F, T],
             [14, 15, 16, 106], [T, T, T, T], [T, T, T, T]),
    (T, 5): ([15, 16, 0, 0], [5, 6, 0, 0], [F, F, F, F], [F, T, F, F],
             [16, 106, 0, 0], [T, T, F, F], [T, T, F, F]),
    # running episode at the write cursor: the newest step's next_obs is unknown
    (T, 8): ([18, 19, 0, 0], [8, 9, 0, 0], [F, F, F, F], [F, F, F, F],
             [19, 0, 0, 0], [T, F, F, F], [T, T, F, F]),
    (T, 9): ([19, 0, 0, 0], [9, 0, 0, 0], [F, F, F, F], [F, F, F, F],
             [0, 0, 0, 0], [F, F, F, F], [T, F, F, F]),
    # across boundaries: the per-step flags show where episodes end
    (F, 2): ([12, 13, 14, 15], [2, 3, 4, 5], [T, F, F, F], [F, F, F, F],
             [102, 14, 15, 16], [T, T, T, T], [T, T, T, T]),
    (F, 5): ([15, 16, 17, 18], [5, 6, 7, 8], [F, F, F, F], [F, T, F, F],
             [16, 106, 18, 19], [T, T, T, T], [T, T, T, T]),
    (F, 7): ([17, 18, 19, 0], [7, 8, 9, 0], [F, F, F, F], [F, F, F, F],
             [18, 19, 0, 0], [T, T, F, F], [T, T, T, F]),
    (F, 9): ([19, 0, 0, 0], [9, 0, 0, 0], [F, F, F, F], [F, F, F, F],
             [0, 0, 0, 0], [F, F, F, F], [T, F, F, F]),
}  # fmt: skip
GOLDEN_KEYS = ("obs", "reward", "terminated", "truncated", "next_obs", "next_known", "mask")


@pytest.mark.parametrize("within", [True, False])
def test_golden_sequences(within: bool) -> None:
    buf = golden_buffer()
    b = buf.sample_sequences(400, 4, within_episode=within)
    assert set(b) == {*GOLDEN_KEYS, "ids", "env_ids", "weights"}
    assert b.obs.shape == (400, 4) and b.obs.dtype == np.float32
    assert b.ids.shape == b.env_ids.shape == b.weights.shape == (400,)
    assert (b.weights == 1).all() and (b.env_ids == 0).all()
    assert set(b.ids.tolist()) == set(range(2, 10))  # every stored step is a start, no other
    wanted = {t: v for (w, t), v in GOLDEN_L4.items() if w == within}
    for t0, expected in wanted.items():
        rows = np.flatnonzero(b.ids == t0)
        for name, value in zip(GOLDEN_KEYS, expected, strict=True):
            got = b[name][rows]
            np.testing.assert_array_equal(got, np.broadcast_to(value, got.shape), err_msg=name)


@pytest.mark.parametrize("within", [True, False])
def test_pad_false_draws_only_full_runs(within: bool) -> None:
    buf = golden_buffer()
    b = buf.sample_sequences(400, 4, within_episode=within, pad=False)
    assert b.mask.all()
    # within: only 3 (the 4-step episode) fits; across: every start up to count - L = 6
    assert set(b.ids.tolist()) == ({3} if within else {2, 3, 4, 5, 6})
    for t0 in set(b.ids.tolist()):
        expected = GOLDEN_L4.get((within, t0))
        if expected is not None:
            row = int(np.flatnonzero(b.ids == t0)[0])
            for name, value in zip(GOLDEN_KEYS, expected, strict=True):
                np.testing.assert_array_equal(b[name][row], value, err_msg=name)


def test_sequences_of_two_envs_after_wrap_around_never_mix_envs() -> None:
    d = Driver(6, num_envs=2)
    for t in range(23):  # env 0 ends an episode every 4 steps, env 1 every 7; both wrap
        d.add({0: ((t + 1) % 4 == 0, False), 1: (False, (t + 1) % 7 == 0)})
    for within in (True, False):
        b = d.buf.sample_sequences(300, 5, within_episode=within)
        assert_rows_match(b, d.ref, 5, within)
        real = b.mask
        assert (b.obs[..., 0][real] == np.repeat(b.env_ids[:, None], 5, axis=1)[real]).all()
        assert (b.obs[..., 1][real] >= 23 - 6).all()  # overwritten slots are never read
        assert set(b.ids.tolist()) == set(d.ref.stored_ids())


def test_frame_stack_buffer_returns_single_raw_frames() -> None:
    d = Driver(10, frame_stack=4, n_step=2)
    d.episode(0, 3)
    d.episode(0, 9)  # cut by overwriting: 12 steps in 10 slots
    b = d.buf.sample_sequences(200, 3, within_episode=False)
    assert b.obs.shape == (200, 3, 2) and b.next_obs.shape == (200, 3, 2)
    assert_rows_match(b, d.ref, 3, False)
    assert set(b.ids.tolist()) == set(d.ref.stored_ids())  # includes steps without full stacks


def test_length_rules() -> None:
    """``L`` up to ``env_capacity`` can be all real; a longer ``L`` only pads more."""
    buf = golden_buffer()
    assert buf.sample_sequences(2, 8, within_episode=False).obs.shape == (2, 8)
    b = buf.sample_sequences(100, 11, within_episode=False)
    assert b.obs.shape == (100, 11) and prefix_masks(b.mask)
    assert (b.mask.sum(axis=1) == 10 - b.ids).all()  # real up to the newest step, 9
    assert not b.mask[:, 8:].any()  # never more real steps than the ring holds
    with pytest.raises(rr.EmptyBufferError):
        buf.sample_sequences(2, 9, pad=False, within_episode=False)  # 9 real steps never exist
    b = buf.sample_sequences(50, 8, within_episode=False, pad=False)
    assert b.ids.tolist() == [2] * 50 and b.mask.all()  # the one run of all 8 stored steps
    assert b.obs[0].tolist() == [12, 13, 14, 15, 16, 17, 18, 19]
    for bad in (0, -1, 2.0):
        with pytest.raises(rr.ConfigError):
            buf.sample_sequences(2, bad)  # type: ignore[arg-type]
        with pytest.raises(rr.ConfigError):
            buf.sample_sequences(bad, 2)  # type: ignore[arg-type]


def test_empty_and_impossible_requests_raise() -> None:
    buf = make(10)
    with pytest.raises(rr.EmptyBufferError):
        buf.sample_sequences(2, 3)
    with pytest.raises(rr.EmptyBufferError):
        buf.sample_episodes(1)
    d = Driver(10)
    for _ in range(3):
        d.episode(0, 2)  # every episode is 2 steps long
    with pytest.raises(rr.EmptyBufferError):
        d.buf.sample_sequences(4, 3, pad=False)  # no episode has 3 steps
    with pytest.raises(rr.EmptyBufferError):
        d.buf.sample_sequences(4, 7, within_episode=False, pad=False)  # only 6 stored
    assert d.buf.sample_sequences(4, 6, within_episode=False, pad=False).mask.all()
    d.clear()
    with pytest.raises(rr.EmptyBufferError):
        d.buf.sample_sequences(1, 1)


def test_pad_false_exact_fallback_when_valid_starts_are_rare() -> None:
    """One valid start among 200: rejection rarely finds it, the exact fallback always does."""
    d = Driver(200, seed=5)
    for _ in range(95):
        d.episode(0, 1)
    d.episode(0, 6)  # steps 95..100: the only episode with 6 steps
    for _ in range(99):
        d.episode(0, 1)
    b = d.buf.sample_sequences(64, 6, pad=False)
    assert b.ids.tolist() == [95] * 64
    assert_rows_match(b, d.ref, 6, True)
    # two rare starts (95 and 96 for L = 5) are drawn uniformly
    counts = np.zeros(2, np.int64)
    for _ in range(40):
        ids = d.buf.sample_sequences(50, 5, pad=False).ids
        assert set(ids.tolist()) <= {95, 96}
        counts += np.bincount(ids - 95, minlength=2)
    assert chisquare(counts).pvalue > 1e-3


@pytest.mark.parametrize(("within", "pad"), [(True, True), (False, False), (True, False)])
def test_starts_are_uniform_over_their_support(within: bool, pad: bool) -> None:
    d = Driver(40, num_envs=3, seed=7)
    rng = np.random.default_rng(0)
    for t in range(70):  # env 0 wraps; env 1 holds 35 steps; env 2 holds 20
        flags = {0: (bool(rng.random() < 0.2), False)}
        if t < 35:
            flags[1] = (bool(rng.random() < 0.15), False)
        if t < 20:
            flags[2] = (False, bool(rng.random() < 0.1))
        d.add(flags)
    L = 4
    if pad:
        support = [(e, t) for e in range(3) for t in stored_range(d.ref, e)]
    else:
        support = ref_valid_starts(d.ref, L, within)
    index = {e * 10_000 + t: i for i, (e, t) in enumerate(support)}
    counts = np.zeros(len(support), np.int64)
    for _ in range(30):
        b = d.buf.sample_sequences(1000, L, within_episode=within, pad=pad)
        keys = b.env_ids * 10_000 + b.ids // 3
        counts += np.bincount([index[k] for k in keys.tolist()], minlength=len(support))
    assert counts.sum() / len(support) > 50
    assert chisquare(counts).pvalue > 1e-3


def balanced_setup() -> Driver:
    """Three envs with 40, 12 and 0 stored steps; env 1's episodes are 1 step long except one."""
    d = Driver(40, num_envs=3, seed=11)
    for t in range(50):  # env 0 wraps: steps 10..49 stored, episodes of 7
        d.add({0: (t % 7 == 6, False)})
    d.extend(1, [(True, False)] * 4 + [(False, False)] * 3 + [(False, True)] + [(True, False)] * 4)
    return d


def test_balance_envs_draws_env_uniformly_then_start_uniformly() -> None:
    d = balanced_setup()
    counts = {0: np.zeros(40, np.int64), 1: np.zeros(12, np.int64)}
    for _ in range(20):
        b = d.buf.sample_sequences(600, 3, balance_envs=True)
        assert (np.diff(b.env_ids) >= 0).all()  # rows ordered by env
        assert set(b.env_ids.tolist()) <= {0, 1}  # env 2 holds nothing
        assert_rows_match(every(b, 10), d.ref, 3, True)
        for e, lo in ((0, 10), (1, 0)):
            counts[e] += np.bincount(b.ids[b.env_ids == e] // 3 - lo, minlength=counts[e].size)
    per_env = [int(counts[0].sum()), int(counts[1].sum())]
    assert chisquare(per_env).pvalue > 1e-3  # each env half the rows, whatever its size
    for e in (0, 1):
        assert chisquare(counts[e]).pvalue > 1e-3


def test_balance_envs_with_pad_false_across_episodes() -> None:
    d = balanced_setup()
    b = d.buf.sample_sequences(4000, 5, within_episode=False, pad=False, balance_envs=True)
    assert b.mask.all()
    assert chisquare(np.bincount(b.env_ids, minlength=2)).pvalue > 1e-3
    assert_rows_match(every(b, 20), d.ref, 5, False)


def test_balance_envs_with_pad_false_gives_each_env_with_a_valid_start_equal_mass() -> None:
    """Env 1 has 2 valid starts (its 4-step episode, L = 3) among 12 steps; env 0 has 25.

    "Pick each sequence's env uniformly among the envs that have a start": with ``pad=False``
    a start is a valid start, as the exact fallback implements it. Rejection from the
    balanced proposal must not tilt the envs by their share of valid starts.
    """
    d = balanced_setup()
    assert sorted(t for e, t in ref_valid_starts(d.ref, 3, True) if e == 1) == [4, 5]
    b = d.buf.sample_sequences(4000, 3, pad=False, balance_envs=True)
    assert b.mask.all()
    assert set((b.ids[b.env_ids == 1] // 3).tolist()) <= {4, 5}
    per_env = np.bincount(b.env_ids, minlength=2)
    assert chisquare(per_env).pvalue > 1e-3, f"rows per env {per_env.tolist()}, expected 50/50"


def test_balance_envs_in_the_exact_fallback() -> None:
    """Rare valid starts in both envs: the fallback draws env 50/50, then uniformly."""
    d = Driver(150, num_envs=2, seed=12)
    for e, first in ((0, 70), (1, 20)):
        d.extend(e, [(True, False)] * first + [(False, False)] * 4 + [(True, False)])
        d.extend(e, [(True, False)] * (145 - first))
    counts = np.zeros((2, 2), np.int64)  # env x which of its two valid starts
    for _ in range(20):
        b = d.buf.sample_sequences(100, 4, pad=False, balance_envs=True)
        first = np.where(b.env_ids == 0, 70, 20)
        off = b.ids // 2 - first
        assert set(off.tolist()) <= {0, 1}
        np.add.at(counts, (b.env_ids, off), 1)
    assert chisquare(counts.ravel()).pvalue > 1e-3


def test_prioritized_buffer_rejects_balance_envs() -> None:
    buf = rr.PrioritizedReplayBuffer(16, {"obs": rr.Field((), np.float32)}, seed=0)
    buf.add(obs=0.0, reward=0.0, terminated=False, truncated=False)
    with pytest.raises(rr.ConfigError):
        buf.sample_sequences(2, 1, balance_envs=True)


# ---------------------------------------------------------------------- whole episodes
def complete_episodes(ref: RefBuffer) -> list[tuple[int, int, int]]:
    """``(env, first, last)`` of every episode whose steps are all stored and that ended."""
    out = []
    for e in range(ref.num_envs):
        for t in stored_range(ref, e):
            if ref.history[e][t].done:
                start = ref.episode_start(e, t)
                if start >= ref.oldest_stored(e):
                    out.append((e, start, t))
    return out


def test_sample_episodes_golden() -> None:
    buf = golden_buffer()  # only 3..6 is complete and fully stored; 0..2 is cut, 7.. runs
    b = buf.sample_episodes(5)
    assert b.ids.tolist() == [3] * 5 and b.lengths.tolist() == [4] * 5
    assert b.obs.shape == (5, 4) and b.mask.all()
    assert b.obs[0].tolist() == [13, 14, 15, 16]
    assert b.next_obs[0].tolist() == [14, 15, 16, 106]
    assert b.truncated[0].tolist() == [F, F, F, T]


def test_sample_episodes_uniform_with_lengths_and_masks() -> None:
    d = Driver(30, num_envs=2, seed=3)
    lengths = {0: [3, 5, 2, 7, 4, 6, 1, 8], 1: [9, 2, 4, 3]}
    for e, ls in lengths.items():
        for i, L in enumerate(ls):
            d.episode(e, L, "terminated" if i % 2 else "truncated")
    d.extend(1, [(False, False)] * 4)  # a running episode is never drawn
    support = complete_episodes(d.ref)
    assert len(support) >= 8
    assert (0, 0, 2) not in support  # env 0 wrapped: its first episodes are cut or gone
    index = {(e * 10_000 + s): i for i, (e, s, _) in enumerate(support)}
    counts = np.zeros(len(support), np.int64)
    for _ in range(20):
        b = d.buf.sample_episodes(500)
        T_max = int(b.lengths.max())
        assert b.obs.shape == (500, T_max, 2) and b.mask.shape == (500, T_max)
        assert (b.mask.sum(axis=1) == b.lengths).all() and prefix_masks(b.mask)
        keys = b.env_ids * 10_000 + b.ids // 2
        counts += np.bincount([index[k] for k in keys.tolist()], minlength=len(support))
        for row in range(0, 500, 50):
            e, s = int(b.env_ids[row]), int(b.ids[row]) // 2
            last = next(x for ee, ss, x in support if (ee, ss) == (e, s))
            assert b.lengths[row] == last - s + 1
            expected = ref_run(d.ref, e, s, last - s + 1, T_max)
            for name, value in expected.items():
                np.testing.assert_array_equal(b[name][row], value, err_msg=name)
    assert chisquare(counts).pvalue > 1e-3


def get_episode_expected(ref: RefBuffer, env: int, t: int) -> tuple[int, int]:
    start = max(ref.episode_start(env, t), ref.oldest_stored(env))
    to_end = ref.steps_to_end(env, t)
    last = t + to_end if to_end >= 0 else len(ref.history[env]) - 1
    return start, last


def assert_get_episode(buf: rr.ReplayBuffer, ref: RefBuffer, tid: int) -> None:
    E = ref.num_envs
    env, t = tid % E, tid // E
    start, last = get_episode_expected(ref, env, t)
    ep = buf.get_episode(tid)
    n = last - start + 1
    assert ep.ids.tolist() == [s * E + env for s in range(start, last + 1)]
    assert ep.env_ids.tolist() == [env] * n
    expected = ref_run(ref, env, start, n, n)
    expected.pop("mask")
    for name, value in expected.items():
        np.testing.assert_array_equal(ep[name], value, err_msg=name)


def test_get_episode_running_finished_and_cut() -> None:
    buf = golden_buffer()
    ep = buf.get_episode(4)  # finished 3..6
    assert ep.obs.tolist() == [13, 14, 15, 16] and ep.ids.tolist() == [3, 4, 5, 6]
    assert ep.next_obs.tolist() == [14, 15, 16, 106] and ep.next_known.all()
    ep = buf.get_episode(2)  # cut by overwriting: only its last step is stored
    assert ep.obs.tolist() == [12] and ep.terminated.tolist() == [True]
    ep = buf.get_episode(7)  # running: its steps so far
    assert ep.obs.tolist() == [17, 18, 19] and ep.next_known.tolist() == [T, T, F]
    assert ep.next_obs.tolist() == [18, 19, 0]
    for bad in (1, 10, -1):
        with pytest.raises(rr.InvalidIdError):
            buf.get_episode(bad)
    d = Driver(5, num_envs=3)
    for t in range(12):
        d.add({0: (t % 4 == 3, False), 2: (False, t == 6)})
    for tid in d.ref.stored_ids():
        assert_get_episode(d.buf, d.ref, tid)


# ---------------------------------------------------------------------- episodic queries
def test_episodic_queries_golden() -> None:
    buf = golden_buffer()  # ids 2..9 stored
    ids = np.array([2, 3, 4, 6, 7, 9])
    assert buf.episode_begin(ids).tolist() == [0, 3, 3, 3, 7, 7]  # 0 is stale: an id, not a slot
    assert buf.steps_to_episode_end(ids).tolist() == [0, 3, 2, 0, -1, -1]
    assert buf.get_field("obs", ids).tolist() == [12, 13, 14, 16, 17, 19]
    assert buf.get_field("reward", ids).tolist() == [2, 3, 4, 6, 7, 9]
    assert buf.get_field("terminated", ids).tolist() == [T, F, F, F, F, F]
    assert buf.get_field("truncated", ids).tolist() == [F, F, F, T, F, F]
    grid = np.array([[3, 9], [2, 6]])  # vectorised over any shape
    assert buf.episode_begin(grid).tolist() == [[3, 7], [0, 3]]
    assert buf.steps_to_episode_end(grid).tolist() == [[3, -1], [0, 0]]
    assert buf.get_field("obs", grid).tolist() == [[13, 19], [12, 16]]
    for query in (buf.episode_begin, buf.steps_to_episode_end):
        for bad in ([1], [0, 3], [10], [-1], [9, 11]):  # stale, stale, never issued, negative
            with pytest.raises(rr.InvalidIdError):
                query(np.array(bad))
        with pytest.raises(rr.InvalidIdError):
            query(np.array([3.0]))
    with pytest.raises(rr.InvalidIdError):
        buf.get_field("obs", np.array([1]))
    with pytest.raises(rr.InvalidIdError):
        buf.get_field("obs", np.array([10]))
    with pytest.raises(rr.FieldError):
        buf.get_field("next_obs", np.array([3]))


def test_episodic_queries_multi_env_and_frame_stack() -> None:
    d = Driver(6, num_envs=2, frame_stack=3)
    for t in range(11):
        d.add({0: (t in (1, 5), False), 1: (False, t == 8)})
    ids = np.array(d.ref.stored_ids())
    E = 2
    assert d.buf.episode_begin(ids).tolist() == [
        d.ref.episode_start(i % E, i // E) * E + i % E for i in ids.tolist()
    ]
    assert d.buf.steps_to_episode_end(ids).tolist() == [
        d.ref.steps_to_end(i % E, i // E) for i in ids.tolist()
    ]
    assert d.buf.get_field("obs", ids).shape == (ids.size, 2)  # a raw frame, not a stack
    assert d.buf.get_field("action", ids).tolist() == [
        1000 * (i % E) + i // E for i in ids.tolist()
    ]


def test_episodic_queries_after_clear() -> None:
    d = Driver(8)
    d.extend(0, [(False, False)] * 3)
    d.clear()
    d.extend(0, [(False, False), (True, False), (False, False)])
    ids = np.array([3, 4, 5])
    assert d.buf.episode_begin(ids).tolist() == [0, 0, 5]  # started before the clear
    assert d.buf.steps_to_episode_end(ids).tolist() == [1, 0, -1]
    with pytest.raises(rr.InvalidIdError):
        d.buf.episode_begin(np.array([2]))  # cleared
    assert_get_episode(d.buf, d.ref, 3)
    with pytest.raises(rr.EmptyBufferError):
        d.buf.sample_episodes(1)  # the only ended episode lost its start to the clear


def test_queries_of_a_closed_buffer_raise_replay_closed() -> None:
    """``close()``: "later calls that read or write the buffer raise ReplayClosed"."""
    buf = golden_buffer()
    buf.close()
    ids = np.array([3])
    calls = {
        "sample_sequences": lambda: buf.sample_sequences(1, 2),
        "sample_episodes": lambda: buf.sample_episodes(1),
        "get_episode": lambda: buf.get_episode(3),
        "episode_begin": lambda: buf.episode_begin(ids),
        "steps_to_episode_end": lambda: buf.steps_to_episode_end(ids),
        "get_field": lambda: buf.get_field("obs", ids),
    }
    still_open = []
    for name, call in calls.items():
        try:
            call()
        except rr.ReplayClosed:
            continue
        still_open.append(name)
    assert not still_open, f"read a closed buffer without ReplayClosed: {still_open}"


# ---------------------------------------------------------------------- Hypothesis
@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    E = draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    k = draw(st.integers(1, 2))
    C = draw(st.integers(n + k, 9))
    cfg = {"num_envs": E, "env_capacity": C, "n_step": n, "frame_stack": k}
    done = st.sampled_from([(False, False)] * 4 + [(True, False), (False, True), (True, True)])
    envs = st.lists(st.booleans(), min_size=E, max_size=E)
    add = st.tuples(st.just("add"), envs, st.lists(done, min_size=E, max_size=E))
    extend = st.tuples(
        st.just("extend"), st.integers(0, E - 1), st.lists(done, min_size=1, max_size=2 * C + 1)
    )
    ops = st.lists(st.one_of(add, add, add, extend, st.just(("clear",))), min_size=1, max_size=25)
    return cfg, draw(ops)


def check_all_sequences(d: Driver) -> None:
    ref, buf = d.ref, d.buf
    C = ref.env_capacity
    stored = ref.stored_ids()
    for L in sorted({L for L in (1, 2, 3, C) if L <= C}):
        for within in (True, False):
            for pad in (True, False):
                has = bool(stored) if pad else bool(ref_valid_starts(ref, L, within))
                if not has:
                    with pytest.raises(rr.EmptyBufferError):
                        buf.sample_sequences(8, L, within_episode=within, pad=pad)
                    continue
                b = buf.sample_sequences(8, L, within_episode=within, pad=pad)
                assert prefix_masks(b.mask)
                assert (b.mask[:, 0]).all()
                if not pad:
                    assert b.mask.all()
                assert_rows_match(b, ref, L, within)
    if stored:
        ids = np.array(stored)
        E = ref.num_envs
        assert buf.episode_begin(ids).tolist() == [
            ref.episode_start(i % E, i // E) * E + i % E for i in stored
        ]
        assert buf.steps_to_episode_end(ids).tolist() == [
            ref.steps_to_end(i % E, i // E) for i in stored
        ]
        assert_get_episode(buf, ref, stored[len(stored) // 2])
    episodes = complete_episodes(ref)
    if not episodes:
        with pytest.raises(rr.EmptyBufferError):
            buf.sample_episodes(3)
    else:
        b = buf.sample_episodes(6)
        E = ref.num_envs
        for row in range(6):
            e, s = int(b.env_ids[row]), int(b.ids[row]) // E
            assert int(b.ids[row]) % E == e
            match = [x for ee, ss, x in episodes if (ee, ss) == (e, s)]
            assert match, f"episode starting at {s} of env {e} is not complete and stored"
            expected = ref_run(ref, e, s, match[0] - s + 1, b.mask.shape[1])
            for name, value in expected.items():
                np.testing.assert_array_equal(b[name][row], value, err_msg=name)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_random_operations_match_the_reference(
    scenario: tuple[dict[str, Any], list[tuple[Any, ...]]],
) -> None:
    cfg, ops = scenario
    d = Driver(
        cfg["env_capacity"], cfg["num_envs"], n_step=cfg["n_step"], frame_stack=cfg["frame_stack"]
    )
    for op in ops:
        if op[0] == "add":
            flags = {e: op[2][e] for e, on in enumerate(op[1]) if on}
            if flags:
                d.add(flags)
        elif op[0] == "extend":
            d.extend(op[1], op[2])
        else:
            d.clear()
    check_all_sequences(d)


# ---------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip_gives_identical_sequence_streams(tmp_path: Path) -> None:
    def fill(d: Driver, steps: range) -> None:
        for t in steps:
            d.add({0: (t % 5 == 4, False), 1: (False, t % 7 == 6)})

    live, twin = Driver(9, num_envs=2, seed=21), Driver(9, num_envs=2, seed=21)
    for d in (live, twin):
        fill(d, range(17))
        d.buf.sample_sequences(3, 2)  # advance the generators identically
    live.buf.save(tmp_path / "ckpt")
    loaded = rr.load(tmp_path / "ckpt")
    for t in range(17, 30):
        for buf in (loaded, twin.buf):
            v = [step_values(e, t, t % 5 == 4 and e == 0, t % 7 == 6 and e == 1) for e in (0, 1)]
            buf.add(**{k: np.stack([np.asarray(x[k]) for x in v]) for k in v[0]})
        for kw in (
            {},
            {"within_episode": False},
            {"pad": False},
            {"within_episode": False, "pad": False},
        ):
            a = loaded.sample_sequences(7, 4, **kw)  # type: ignore[arg-type]
            b = twin.buf.sample_sequences(7, 4, **kw)  # type: ignore[arg-type]
            assert list(a) == list(b)
            for name in a:
                np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        ea, eb = loaded.sample_episodes(3), twin.buf.sample_episodes(3)
        for name in ea:
            np.testing.assert_array_equal(ea[name], eb[name], err_msg=name)
