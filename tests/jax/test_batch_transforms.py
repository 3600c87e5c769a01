"""Sample-time transforms (``make_buffer(..., transforms=[...])``, ``sample(...,
transform=f)``, ``sample_sequences(..., transform=f)``) apply as the core's do: the buffer's
in order to every ``sample`` then the call's, only the call's to sequences, none to
``get_transitions``; the transformed values are the functions applied to the core's
transitions for the drawn ids (the same ids as without transforms); a transform taking a
``key`` gets ``fold_in(key, j)``; all of it inside ``jit``, ``lax.scan`` and ``vmap``;
bindable transforms and other misuse are refused by name."""

from __future__ import annotations

from typing import Any

import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import rlreplay as rr  # noqa: E402
import rlreplay.jax as rrj  # noqa: E402
from tests.jax.helpers import (  # noqa: E402
    FIELDS,
    Twins,
    assert_bit_identical,
    host_batch,
    numpy_add,
    random_step,
)

Array = np.ndarray[Any, Any]
BATCH = 16


def plus_one(batch: Any) -> Any:
    return batch.replace(reward=batch.reward + 1)


def times_three(batch: Any) -> Any:
    return batch.replace(reward=batch.reward * 3, action=batch.action * 2)


def noisy(batch: Any, key: Any) -> Any:
    """Randomness from the key the buffer hands it."""
    return batch.replace(obs=batch.obs + jax.random.uniform(key, batch.obs.shape))


def make(prioritized: bool, transforms: tuple[Any, ...]) -> rrj.JaxBuffer:
    return rrj.make_buffer(
        24, FIELDS, num_envs=2, n_step=2, gamma=0.9, prioritized=prioritized,
        finals_per_env=12, transforms=transforms,
    )  # fmt: skip


def filled(buf: rrj.JaxBuffer, steps: int = 20) -> Twins:
    rng = np.random.default_rng(3)
    tw = Twins(buf)
    for _ in range(steps):
        tw.add(random_step(rng, 2, p_end=0.2))
    return tw


def assert_same(got: dict[str, Array], want: dict[str, Array]) -> None:
    """Same keys and values: integers exactly (in JAX's 32 bits), floats up to one rounding
    (XLA may fuse a transform's arithmetic with the batch's own, e.g. into a multiply-add)."""
    assert list(got) == list(want)
    for k, v in want.items():
        if v.dtype.kind == "f":
            assert got[k].dtype == v.dtype, k
            np.testing.assert_allclose(got[k], v, rtol=1e-6, err_msg=k)
        else:
            np.testing.assert_array_equal(got[k], v, err_msg=k)


def core_transformed(tw: Twins, ids: Array, fns: tuple[Any, ...]) -> dict[str, Array]:
    """The core's transitions of ``ids`` through ``fns`` (NumPy batches), as host arrays."""
    batch = tw.np_buf.get_transitions(ids)
    for fn in fns:
        batch = fn(batch)
    return {k: np.asarray(v) for k, v in batch.items()}


@pytest.mark.parametrize("prioritized", [False, True])
def test_buffer_transforms_then_the_call_transform(prioritized: bool) -> None:
    fns = (plus_one, times_three)
    buf = make(prioritized, fns)
    plain = make(prioritized, ())
    assert buf.transforms == fns and plain is not buf
    tw = filled(buf)
    key = jax.random.key(4)
    for call, applied in ((None, fns), (plus_one, (*fns, plus_one))):
        got = host_batch(buf.sample(tw.state, key, BATCH, transform=call))
        untransformed = host_batch(plain.sample(tw.state, key, BATCH))
        np.testing.assert_array_equal(got["ids"], untransformed["ids"])  # the same draw
        want = core_transformed(tw, got["ids"], applied)
        want["weights"] = got["weights"]  # the law's weights (uniform: ones)
        if prioritized:
            want["probabilities"] = got["probabilities"]
        assert_same(got, want)
    # get_transitions applies none of them.
    ids = np.sort(tw.np_buf.sampleable_ids())[:4]
    assert_bit_identical(host_batch(buf.get_transitions(tw.state, ids)),
                         core_transformed(tw, ids, ()))  # fmt: skip


def test_sequences_get_only_the_call_transform() -> None:
    buf = make(False, (plus_one,))
    tw = filled(buf)
    key = jax.random.key(5)
    plain = host_batch(buf.sample_sequences(tw.state, key, 4, 3))
    got = host_batch(buf.sample_sequences(tw.state, key, 4, 3, transform=times_three))
    np.testing.assert_array_equal(got["ids"], plain["ids"])
    ids = plain["ids"]
    want = {k: np.asarray(v) for k, v in times_three(tw.np_buf.get_sequences(ids, 3)).items()}
    want["weights"] = got["weights"]
    assert_same(got, want)


def test_a_transform_with_a_key_gets_its_own() -> None:
    buf = make(False, (plus_one, noisy))
    tw = filled(buf)
    key = jax.random.key(6)
    got = host_batch(buf.sample(tw.state, key, BATCH, transform=noisy))
    want = core_transformed(tw, got["ids"], (plus_one,))
    # noisy is the 2nd and 3rd transform applied: fold_in(key, 2), then fold_in(key, 3).
    obs = jnp.asarray(want["obs"])
    for j in (2, 3):
        obs = obs + jax.random.uniform(jax.random.fold_in(key, j), obs.shape)
    np.testing.assert_allclose(got["obs"], np.asarray(obs), rtol=1e-6)
    assert not np.array_equal(got["obs"], want["obs"])


def test_inside_jit_scan_and_vmap() -> None:
    buf = make(True, (plus_one, noisy))
    seeds = 2
    rng = np.random.default_rng(7)
    steps = [random_step(rng, 2, p_end=0.2) for _ in range(12)]
    stacked = {k: np.stack([s[k] for s in steps]) for k in steps[0]}

    def run(state: rrj.BufferState, key: Any) -> Any:
        def body(state: rrj.BufferState, x: Any) -> Any:
            step, k = x
            state = buf.add(state, step)
            batch = buf.sample(state, k, 4, transform=times_three)
            state = buf.update_priorities(state, batch.ids, jnp.abs(batch.reward) + 0.1)
            return state, batch

        return jax.lax.scan(body, state, (stacked, jax.random.split(key, 12)))

    init = jax.vmap(lambda _: buf.init())(jnp.arange(seeds))
    keys = jax.random.split(jax.random.key(8), seeds)
    _, batches = jax.jit(jax.vmap(run), donate_argnums=0)(init, keys)
    # Seed 0, last iteration, against the core's transitions of the same ids.
    np_buf = rr.PrioritizedReplayBuffer(
        24, FIELDS, num_envs=2, n_step=2, gamma=0.9, **buf.config.prioritized_kwargs()
    )
    for s in steps:
        numpy_add(np_buf, s)
    last = {k: np.asarray(v)[0, -1] for k, v in batches.items()}
    k_last = jax.random.split(keys[0], 12)[-1]
    ref = np_buf.get_transitions(last["ids"])
    ref = times_three(plus_one(ref))
    np.testing.assert_array_equal(last["reward"], np.asarray(ref["reward"]))
    np.testing.assert_array_equal(last["action"], np.asarray(ref["action"]))
    noise = np.asarray(jax.random.uniform(jax.random.fold_in(k_last, 2), last["obs"].shape))
    np.testing.assert_allclose(last["obs"], np.asarray(ref["obs"]) + noise, rtol=1e-6)


def test_misuse_is_refused_by_name() -> None:
    her = rr.HindsightRelabel(lambda ag, g, info: np.zeros(len(ag), np.float32))
    with pytest.raises(rr.ConfigError, match=r"transforms\[1\].*HindsightRelabel.*bindable"):
        make(False, (plus_one, her))
    buf = make(False, ())
    state = filled(buf, 6).state
    with pytest.raises(rr.ConfigError, match=r"transform.*HindsightRelabel.*bindable"):
        buf.sample(state, jax.random.key(0), 4, transform=her)
    with pytest.raises(rr.ConfigError, match=r"transform.*HindsightRelabel.*bindable"):
        buf.sample_sequences(state, jax.random.key(0), 4, 2, transform=her)
    with pytest.raises(rr.ConfigError, match=r"transforms\[0\]: expected a callable"):
        make(False, (3,))
    with pytest.raises(rr.ConfigError, match="transforms: expected a sequence"):
        rrj.make_buffer(24, FIELDS, num_envs=2, transforms=plus_one)  # type: ignore[arg-type]
    with pytest.raises(rr.ConfigError, match="transform: expected a callable"):
        buf.sample(state, jax.random.key(0), 4, transform="reward")  # type: ignore[arg-type]

    def not_a_batch(batch: Any) -> Any:
        return batch.reward

    with pytest.raises(rr.ConfigError, match=r"not_a_batch.*Tracer"):
        buf.sample(state, jax.random.key(0), 4, transform=not_a_batch)
    # A plain mapping is made a JaxBatch.
    out = buf.sample(state, jax.random.key(0), 4, transform=lambda b: dict(b))
    assert isinstance(out, rrj.JaxBatch)
