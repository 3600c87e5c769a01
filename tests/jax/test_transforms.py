"""The buffer's functions under JAX's transformations: inside ``lax.scan``, under ``vmap`` (a
buffer per seed), with donated state, and inside one ``jit`` with an empty buffer."""

from __future__ import annotations

from typing import Any

import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import rlreplay as rr  # noqa: E402
import rlreplay.jax as rrj  # noqa: E402
from tests.jax.helpers import jax_buffer, random_step  # noqa: E402

SEEDS = 3
T = 30


def stream(seed: int, num_envs: int) -> dict[str, np.ndarray[Any, Any]]:
    """``T`` steps of every env, stacked on a leading time axis."""
    rng = np.random.default_rng(seed)
    steps = [random_step(rng, num_envs, p_end=0.3) for _ in range(T)]
    return {k: np.stack([s[k] for s in steps]) for k in steps[0]}


def assert_same_state(a: rrj.BufferState, b: rrj.BufferState) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def per_buffer() -> rrj.JaxBuffer:
    # Few final records: the prioritized write takes its rebuild branch now and then, which
    # vmap turns into a select.
    return jax_buffer(capacity=24, num_envs=2, n_step=2, frame_stack=3, prioritized=True,
                      finals_per_env=2)  # fmt: skip


def python_loop(buf: rrj.JaxBuffer, steps: dict[str, Any]) -> rrj.BufferState:
    state = buf.init()
    for i in range(T):
        state = buf.add(state, {k: v[i] for k, v in steps.items()})
    return state


def test_scan_equals_the_python_loop(per_buffer: rrj.JaxBuffer) -> None:
    buf = per_buffer
    steps = stream(0, 2)

    @jax.jit
    def run(state: rrj.BufferState, xs: dict[str, Any]) -> rrj.BufferState:
        return jax.lax.scan(lambda s, x: (buf.add(s, x), None), state, xs)[0]

    assert_same_state(run(buf.init(), steps), python_loop(buf, steps))


def test_a_training_loop_in_one_scan(per_buffer: rrj.JaxBuffer) -> None:
    """add, can_sample, sample and update_priorities in one compiled loop body."""
    buf = per_buffer
    steps = stream(1, 2)

    def body(carry: Any, x: dict[str, Any]) -> tuple[Any, Any]:
        state, key = carry
        key, k = jax.random.split(key)
        state = buf.add(state, x)
        batch = buf.sample(state, k, 8)
        ok = buf.can_sample(state, 8)
        # Learn only from meaningful batches: priorities where a batch was drawn.
        prio = jnp.where(ok, jnp.abs(batch["reward"]) + 0.1, -1.0)
        state = buf.update_priorities(state, batch["ids"], prio)
        return (state, key), (ok, batch["ids"])

    run = jax.jit(lambda s, k, xs: jax.lax.scan(body, (s, k), xs))
    (state, _), (ok, ids) = run(buf.init(), jax.random.key(0), steps)
    ok, ids = np.asarray(ok), np.asarray(ids)
    assert ok[-1]
    assert int(state.priorities.beta_step) == T
    # can_sample said what it says outside the loop, and every batch drawn while it held was
    # made of then-sampleable ids only.
    replay = buf.init()
    for i in range(T):
        replay = buf.add(replay, {k: v[i] for k, v in steps.items()})
        assert ok[i] == bool(buf.can_sample(replay, 8))
        if ok[i]:
            assert np.asarray(buf.sampleable(replay, ids[i])).all()


def test_vmap_gives_a_buffer_per_seed(per_buffer: rrj.JaxBuffer) -> None:
    buf = per_buffer
    streams = [stream(10 + s, 2) for s in range(SEEDS)]
    stacked = {k: np.stack([s[k] for s in streams]) for k in streams[0]}

    @jax.jit
    def run(xs: dict[str, Any]) -> rrj.BufferState:
        states = jax.vmap(lambda _: buf.init())(jnp.arange(SEEDS))
        add = jax.vmap(buf.add)
        return jax.lax.scan(lambda s, x: (add(s, x), None), states,
                            jax.tree.map(lambda a: a.swapaxes(0, 1), xs))[0]  # fmt: skip

    states = run(stacked)
    for s in range(SEEDS):
        one = jax.tree.map(lambda a, s=s: a[s], states)
        assert_same_state(one, python_loop(buf, streams[s]))
    keys = jax.random.split(jax.random.key(3), SEEDS)
    batches = jax.vmap(buf.sample, in_axes=(0, 0, None))(states, keys, 8)
    assert batches["obs"].shape == (SEEDS, 8, 3, 2)
    for s in range(SEEDS):
        one = jax.tree.map(lambda a, s=s: a[s], states)
        assert np.asarray(buf.sampleable(one, batches["ids"][s])).all()
    with pytest.raises(rr.ShapeError, match="stack"):
        rrj.to_replay_buffer(buf, states)


def test_donated_state_is_updated_in_place() -> None:
    buf = jax_buffer(capacity=16, num_envs=2, n_step=3, finals_per_env=8)
    steps = stream(2, 2)
    add = jax.jit(buf.add, donate_argnums=0)
    state = buf.init()
    for i in range(T):
        old = state
        state = add(state, {k: v[i] for k, v in steps.items()})
        assert old.columns["obs"].is_deleted()  # consumed: its memory was reused
    assert_same_state(state, python_loop(buf, steps))


def test_empty_buffers_sample_inside_jit() -> None:
    buf = jax_buffer(capacity=16, num_envs=2, n_step=3, finals_per_env=8)

    @jax.jit
    def draw(state: rrj.BufferState, key: Any) -> Any:
        return buf.can_sample(state, 4), buf.sample(state, key, 4)

    ok, batch = draw(buf.init(), jax.random.key(0))
    assert not bool(ok)
    assert batch["obs"].shape == (4, 2) and np.isfinite(np.asarray(batch["reward"])).all()
    assert int(buf.num_sampleable(buf.init())) == 0
