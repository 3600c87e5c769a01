"""The JAX buffer's whole episodes: the same complete episodes as the NumPy core for the same
stream (through episode ends, truncations, wraparound, several envs and episodes dropped to
free final records), every drawn row equal to the core's row for that episode, uniform draws,
``max_length`` cuts, and nothing raised inside ``jit`` when no episode is complete."""

from __future__ import annotations

from typing import Any

import pytest

jax = pytest.importorskip("jax")

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from tests.jax.helpers import Twins, host_batch, jax_buffer, random_step  # noqa: E402

Array = np.ndarray[Any, Any]

CONFIGS = {
    "2 envs, finals for every slot": dict(capacity=24, num_envs=2, finals_per_env=12),
    "3 envs, few finals (drops)": dict(capacity=30, num_envs=3, n_step=2, finals_per_env=3),
    "1 env, stack 2": dict(capacity=16, num_envs=1, frame_stack=2, finals_per_env=16),
}


def core_episodes(tw: Twins, draws: int = 400) -> dict[int, dict[str, Array]]:
    """Every complete episode of the NumPy twin, by the id of its first step (drawn often
    enough to see them all: a handful of episodes over ``draws`` draws)."""
    batch = tw.np_buf.sample_episodes(draws)
    out: dict[int, dict[str, Array]] = {}
    for i, first in enumerate(np.asarray(batch["ids"]).tolist()):
        n = int(batch["lengths"][i])
        out[first] = {k: np.asarray(v[i]) for k, v in batch.items()} | {"n": np.asarray(n)}
    return out


def stream(name: str, steps: int, p_end: float = 0.25) -> Twins:
    buf = jax_buffer(**CONFIGS[name])
    rng = np.random.default_rng(len(name))
    tw = Twins(buf)
    for _ in range(steps):
        tw.add(random_step(rng, buf.num_envs, p_end=p_end, p_trunc=0.1))
    return tw


@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_episodes_as_the_core_row_by_row(name: str) -> None:
    tw = stream(name, 41)  # past a wraparound of every ring
    buf, state = tw.buf, tw.state
    want = core_episodes(tw)
    assert int(buf.num_episodes(state)) == len(want) > 0
    got = host_batch(buf.sample_episodes(state, jax.random.key(1), 256))
    assert set(got["ids"].tolist()) == set(want)
    for i, first in enumerate(got["ids"].tolist()):
        ref, n = want[first], int(want[first]["n"])
        assert int(got["lengths"][i]) == n
        assert got["mask"][i].tolist() == [True] * n + [False] * (buf.env_capacity - n)
        for key in ("obs", "action", "reward", "terminated", "truncated", "next_obs",
                    "next_known"):  # fmt: skip
            np.testing.assert_array_equal(got[key][i][:n], ref[key][:n], err_msg=key)
            assert not got[key][i][n:].any(), key  # padding is zero
        assert int(got["env_ids"][i]) == int(ref["env_ids"])


def test_draws_are_uniform_over_complete_episodes() -> None:
    tw = stream("2 envs, finals for every slot", 30, p_end=0.3)
    want = sorted(core_episodes(tw))
    buf, state = tw.buf, tw.state
    ids = np.concatenate(
        [host_batch(buf.sample_episodes(state, jax.random.key(k), 512))["ids"] for k in range(8)]
    )
    counts = np.array([(ids == first).sum() for first in want])
    assert counts.sum() == ids.shape[0]  # nothing outside the complete episodes
    assert stats.chisquare(counts).pvalue > 1e-4


def test_max_length_cuts_rows_not_lengths() -> None:
    tw = stream("1 env, stack 2", 40, p_end=0.2)
    buf, state = tw.buf, tw.state
    full = host_batch(buf.sample_episodes(state, jax.random.key(3), 64))
    cut = host_batch(buf.sample_episodes(state, jax.random.key(3), 64, max_length=3))
    assert int(buf.num_episodes(state)) > 0 and full["lengths"].max() > 3
    assert cut["obs"].shape[1] == 3
    np.testing.assert_array_equal(cut["lengths"], full["lengths"])
    np.testing.assert_array_equal(cut["mask"], full["mask"][:, :3])
    np.testing.assert_array_equal(cut["obs"], full["obs"][:, :3])


def test_nothing_complete_inside_jit() -> None:
    buf = jax_buffer(**CONFIGS["2 envs, finals for every slot"])
    state = buf.init()
    rng = np.random.default_rng(0)
    for _ in range(3):  # running episodes only
        step = random_step(rng, 2, p_end=0.0, p_trunc=0.0)
        state = buf.add(state, step)

    @jax.jit
    def both(state: Any, key: Any) -> tuple[Any, Any]:
        return buf.num_episodes(state), buf.sample_episodes(state, key, 4)

    n, batch = both(state, jax.random.key(0))
    assert int(n) == 0 and batch["obs"].shape == (4, buf.env_capacity, 2)
    tw = Twins(buf)
    for _ in range(3):
        tw.add(random_step(rng, 2, p_end=0.0, p_trunc=0.0))
    with pytest.raises(Exception, match="no complete episode"):
        tw.np_buf.sample_episodes(1)  # the core refuses where JAX returns arbitrary rows


def test_bad_arguments() -> None:
    import rlreplay as rr

    buf = jax_buffer(**CONFIGS["1 env, stack 2"])
    state = buf.init()
    with pytest.raises(rr.ConfigError, match="batch_size"):
        buf.sample_episodes(state, jax.random.key(0), 0)
    with pytest.raises(rr.ConfigError, match="max_length"):
        buf.sample_episodes(state, jax.random.key(0), 2, max_length=-1)
