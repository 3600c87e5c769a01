"""Arguments are checked as the NumPy core checks them; steps by key, shape and dtype when
traced; conversions refuse buffers the JAX buffer cannot represent; ``rlreplay.jax`` imports
JAX only when a buffer is made; checkpoints go through the NumPy core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

jax = pytest.importorskip("jax")

import numpy as np  # noqa: E402

import rlreplay as rr  # noqa: E402
import rlreplay.jax as rrj  # noqa: E402
from tests.jax.helpers import (  # noqa: E402
    FIELDS,
    Twins,
    assert_same_contents,
    jax_buffer,
    random_step,
)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(capacity=7, num_envs=2, n_step=3), "capacity"),
        (dict(capacity=64, stack_pad="edge"), "stack_pad"),
        (dict(capacity=64, gamma=1.5), "gamma"),
        (dict(capacity=64, n_step=0), "n_step"),
        (dict(capacity=64, finals_per_env=0), "finals_per_env"),
        (dict(capacity=64, next_fields=("obs",)), "next_fields"),
        (dict(capacity=64, prioritized=True, alpha=-1.0), "alpha"),
        (dict(capacity=64, prioritized=True, priority_clip=(2.0, 1.0)), "priority_clip"),
        (dict(capacity=64, prioritized=True, variant="ranked"), "variant"),
        (dict(capacity=64, recent_ratio=1.5), "recent_ratio"),
        (dict(capacity=64, recent_ratio=0.5, recent_steps=0), "recent_steps"),
        (dict(capacity=64, prioritized=True, recent_ratio=0.5), "uniform-only"),
        (dict(capacity=64, prioritized=True, replacement=False), "uniform-only"),
        (dict(capacity=64, replacement=1), "replacement"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], match: str) -> None:
    capacity = kwargs.pop("capacity")
    with pytest.raises(rr.ConfigError, match=match):
        rrj.make_buffer(capacity, FIELDS, **kwargs)


def test_reward_must_be_a_float() -> None:
    with pytest.raises(rr.ConfigError, match="reward"):
        rrj.make_buffer(64, {**FIELDS, "reward": rr.Field((), np.int32)})


def test_equal_configurations_share_one_buffer() -> None:
    a = rrj.make_buffer(64, FIELDS, num_envs=2, n_step=3)
    assert rrj.make_buffer(64, dict(FIELDS), num_envs=2, n_step=3) is a
    assert rrj.make_buffer(64, FIELDS, num_envs=2, n_step=2) is not a


def test_steps_are_checked_when_traced() -> None:
    buf = jax_buffer(capacity=16, num_envs=2, n_step=3, finals_per_env=8)
    state = buf.init()
    step = random_step(np.random.default_rng(0), 2)
    with pytest.raises(rr.FieldError, match="next_obs"):
        buf.add(state, {k: v for k, v in step.items() if k != "next_obs"})
    with pytest.raises(rr.FieldError, match="unknown"):
        buf.add(state, {**step, "extra": np.zeros(2)})
    with pytest.raises(rr.ShapeError, match=r"\(2, 2\)"):
        buf.add(state, {**step, "obs": np.zeros((3, 2), np.float32)})
    with pytest.raises(rr.DTypeError, match="action"):
        buf.add(state, {**step, "action": np.zeros(2, np.float32)})
    # float64 and int64 inputs cast like the core's same_kind rule.
    ok = {**step, "obs": step["obs"].astype(np.float64), "action": np.zeros(2, np.int64)}
    assert int(buf.add(state, ok).count) == 1


def test_import_does_not_load_jax() -> None:
    code = (
        "import sys, rlreplay, rlreplay.jax, rlreplay.jax.buffer, rlreplay.jax.convert; "
        "print('jax' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    assert out.stdout.strip() == "False"


def test_conversions_refuse_what_has_no_jax_counterpart() -> None:
    fields = dict(FIELDS)
    uneven = rr.ReplayBuffer(16, fields, num_envs=2)
    uneven.add(**random_step(np.random.default_rng(0), 1), env_ids=[0])
    with pytest.raises(rr.ConfigError, match="step together"):
        rrj.from_replay_buffer(uneven)
    abandoned = rr.ReplayBuffer(16, fields)  # converted with its cut (tests/jax/test_abandon)
    abandoned.add(**{k: v[0] for k, v in random_step(np.random.default_rng(0), 1, 0, 0).items()})
    abandoned.abandon_episode(0)
    _, state = rrj.from_replay_buffer(abandoned)
    assert np.asarray(state.hole)[0] == 0 and int(state.last_cut[0]) == 0
    big = rr.ReplayBuffer(16, {"obs": rr.Field((), np.int64)})
    for t in range(3):
        big.add(obs=np.int64(2**40 + t), reward=0.0, terminated=t == 2, truncated=False,
                next_obs=np.int64(0))  # fmt: skip
    if not jax.config.jax_enable_x64:
        with pytest.raises(rr.ConfigError, match="x64"):
            rrj.from_replay_buffer(big)


def test_a_numpy_buffer_becomes_a_jax_one() -> None:
    """A core buffer fed a stream, converted, then both fed more: still the same."""
    buf = jax_buffer(capacity=16, num_envs=2, n_step=3, finals_per_env=8)
    tw = Twins(buf)
    rng = np.random.default_rng(2)
    for _ in range(12):
        step = random_step(rng, 2, p_end=0.3)
        tw.np_buf.add(**step)
        tw.count += 1
    got, tw.state = rrj.from_replay_buffer(tw.np_buf, finals_per_env=8)
    assert got is buf
    tw.np_head = np.asarray(tw.state.head).astype(np.int64)
    for _ in range(20):
        tw.add(random_step(rng, 2, p_end=0.3))
        assert_same_contents(tw)


def test_checkpoints_through_the_core(tmp_path: Path) -> None:
    buf = jax_buffer(capacity=20, num_envs=2, n_step=3, frame_stack=2, prioritized=True,
                     finals_per_env=10)  # fmt: skip
    tw = Twins(buf)
    rng = np.random.default_rng(8)
    for _ in range(25):
        tw.add(random_step(rng, 2, p_end=0.2))
    tw.state = buf.update_priorities(tw.state, np.arange(30, 40), np.linspace(0.1, 5, 10))
    rrj.to_replay_buffer(buf, tw.state).save(tmp_path / "ckpt.rr")
    loaded = rr.load(tmp_path / "ckpt.rr")
    again, state = rrj.from_replay_buffer(loaded, finals_per_env=10)
    assert again is buf
    for name in state.columns:
        np.testing.assert_array_equal(state.columns[name], tw.state.columns[name], name)
    assert state.priorities is not None and tw.state.priorities is not None
    np.testing.assert_array_equal(state.priorities.prio, tw.state.priorities.prio)
    np.testing.assert_array_equal(state.priorities.sums[0], tw.state.priorities.sums[0])
    assert int(state.priorities.beta_step) == 1
    for name in ("count", "head", "lo", "hi", "last_end", "f_count", "f_head", "ep_start",
                 "final_fid"):  # fmt: skip
        np.testing.assert_array_equal(getattr(state, name), getattr(tw.state, name), name)
