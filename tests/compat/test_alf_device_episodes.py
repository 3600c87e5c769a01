"""Episode information of ALF's device-backed buffer (``keep_episodic_info``,
``num_earliest_frames_ignored``, ``record_episodic_return``), run on torch's CPU device:
for the same streams and ``torch.manual_seed`` it answers as the host-backed buffer does
(``get_batch`` and ``gather_all`` with their ``BatchInfo``, the position queries), and its
``add_batch`` never waits for the device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.compat.alf import ReplayAssertionError, TensorSpec
from tests.compat.test_alf_device import (
    assert_same,
    comparing,
    device_rb,
    pair,
    script_ops,
    scripted_op,
)
from tests.torch_device.helpers import DEVICES, no_host_sync

SPEC = {
    "step_type": TensorSpec((), torch.int32),
    "reward": TensorSpec(()),
    "discount": TensorSpec(()),
    "obs": TensorSpec((2,)),
}
SPEC_NO_DISCOUNT = {"step_type": TensorSpec((), torch.int64), "x": TensorSpec((), torch.int64)}
QUERIES = ("get_episode_begin_position", "steps_to_episode_end", "get_disc_0_begin_position")


def steps_of(spec: Any, rng: np.random.Generator, B: int, tensors: bool) -> dict[str, Any]:
    """``B`` random steps: step types FIRST, MID, LAST (MID most often), discounts 0 or 1."""
    out: dict[str, Any] = {}
    for name, s in spec.items():
        if name == "step_type":
            arr: Any = rng.choice(3, size=B, p=[0.2, 0.55, 0.25]).astype(np.int64)
        elif name == "discount":
            arr = (rng.random(B) < 0.8).astype(np.float32)
        else:
            arr = rng.standard_normal((B, *s.shape)).round(2)
        t = torch.from_numpy(np.asarray(arr)).to(s.dtype)
        out[name] = t if tensors else t.numpy()
    return out


def same(ours: Any, theirs: Any) -> None:
    """Equal results; ``discounted_return`` to float32 rounding (see ``_device_episodes``)."""
    if hasattr(theirs, "replay_buffer"):
        for name in ("env_ids", "positions", "importance_weights"):
            assert_same(getattr(ours, name), getattr(theirs, name))
        g_ours, g_theirs = ours.discounted_return, theirs.discounted_return
        if isinstance(g_theirs, torch.Tensor):
            assert g_ours.dtype == g_theirs.dtype and g_ours.shape == g_theirs.shape
            np.testing.assert_allclose(g_ours.numpy(), g_theirs.numpy(), rtol=2e-6, atol=2e-6)
        else:
            assert g_ours == g_theirs
    elif isinstance(theirs, tuple) and len(theirs) == 2 and hasattr(theirs[1], "replay_buffer"):
        assert_same(ours[0], theirs[0])
        same(ours[1], theirs[1])
    else:
        assert_same(ours, theirs)


both = comparing(same)

OPTIONS: list[dict[str, Any]] = [
    dict(max_length=6, keep_episodic_info=True),
    dict(max_length=5, record_episodic_return=True, gamma=0.9),
    dict(max_length=8, num_earliest_frames_ignored=2, recent_data_ratio=0.5),
    dict(
        max_length=7,
        record_episodic_return=True,
        reward_clip=(-0.5, 1.0),
        gamma=1.0,
        default_return=-5.0,
        num_earliest_frames_ignored=1,
    ),
    dict(max_length=6, record_episodic_return=True, recent_data_ratio=0.3, recent_data_steps=2),
]

ops = script_ops(adds=12, dequeues=3, max_size=25)


def check_bounds(dev: Any) -> None:
    """The stored ranges the buffer keeps on the host are the device buffer's."""
    first, end = dev._bounds()
    truth = dev.device_buffer.stored_range()
    assert first.tolist() == truth.first.tolist() and end.tolist() == truth.end.tolist()


def run_script(host: Any, dev: Any, spec: Any, script: list[tuple[str, int, int]], E: int,
               seed: int) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    for op, a, b in script:
        check_bounds(dev)
        pick = np.random.default_rng(a)
        if scripted_op(host, dev, op, a, b, lambda B, i: steps_of(spec, rng, B, i % 2 == 1), both):
            continue
        both(host, dev, "gather_all")
        both(host, dev, "gather_all", ignore_earliest_frames=True)
        heads, counts = host._bounds()
        env = np.repeat(np.arange(E), counts - heads)
        pos = np.concatenate([np.arange(heads[e], counts[e]) for e in range(E)])
        for query in QUERIES:  # every stored step, and some not stored
            both(host, dev, query, torch.from_numpy(pos), torch.from_numpy(env))
            e = int(pick.integers(0, E))
            bad = heads[e] - 1 if heads[e] > 0 and pick.random() < 0.5 else counts[e]
            both(host, dev, query, [bad], [e])
        if pos.size:  # broadcast shapes
            both(host, dev, QUERIES[0], torch.from_numpy(pos)[:, None], torch.arange(1)[None])


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(options=st.sampled_from(range(len(OPTIONS))), script=ops, seed=st.integers(0, 2**16))
def test_random_use_matches_the_host_backed_buffer(
    options: int, script: list[tuple[str, int, int]], seed: int
) -> None:
    E = 3
    host, dev = pair(SPEC, E, seed, **OPTIONS[options])
    run_script(host, dev, SPEC, script, E, seed)
    run_script(host, dev, SPEC, [("add", 1, 30), ("read", 2, 0), ("get_batch", 7, 3)], E, seed)


def test_a_long_stream_without_discount() -> None:
    """Ten times the ring, envs stepping at random, no ``discount`` leaf."""
    E = 4
    host, dev = pair(SPEC_NO_DISCOUNT, E, 5, max_length=9, num_earliest_frames_ignored=3)
    script = [("add", i, 9) if i % 3 else ("read", i, 0) for i in range(30)]
    script += [("get_batch", 11, 3), ("dequeue", 3, 2), ("read", 4, 0)]
    run_script(host, dev, SPEC_NO_DISCOUNT, script, E, 5)
    with pytest.raises(rr.FieldError, match="discount"):
        dev.get_disc_0_begin_position(torch.tensor([50]), torch.tensor([0]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("record", [False, True])
def test_add_batch_never_waits(device: str, record: bool) -> None:
    dev = device_rb(SPEC, 3, device, max_length=8, record_episodic_return=record,
                    keep_episodic_info=True, prioritized_sampling=record)  # fmt: skip
    rng = np.random.default_rng(0)

    def on(values: dict[str, Any]) -> dict[str, Any]:
        return {k: v.to(device) for k, v in values.items()}

    steps = [on(steps_of(SPEC, rng, 2, tensors=True)) for _ in range(20)]
    envs = [torch.from_numpy(rng.permutation(3)[:2]).to(device) for _ in range(20)]
    every = on(steps_of(SPEC, rng, 3, tensors=True))
    with no_host_sync(device) as counter:
        for values, e in zip(steps, envs, strict=True):
            dev.add_batch(values, e)
        dev.add_batch(every)
    assert dict(counter.calls) == {}


@pytest.mark.parametrize("device", DEVICES)
def test_a_long_stream_on_the_device(device: str) -> None:
    """Tensors on ``device`` in (envs too), the host-backed buffer's answers out."""
    E = 4
    host, dev = pair(SPEC, E, 8, device, max_length=10, record_episodic_return=True,
                     num_earliest_frames_ignored=1, gamma=0.7)  # fmt: skip
    rng = np.random.default_rng(8)
    for i in range(80):
        envs = np.flatnonzero(rng.random(E) < 0.8)
        values = steps_of(SPEC, rng, envs.shape[0], tensors=True)
        host.add_batch(values, envs)
        dev.add_batch({k: v.to(device) for k, v in values.items()},
                      torch.from_numpy(envs).to(device))  # fmt: skip
        if i % 10 == 9:
            both(host, dev, "get_batch", 9, 3)
            heads, counts = host._bounds()
            env = np.repeat(np.arange(E), counts - heads)
            pos = np.concatenate([np.arange(heads[e], counts[e]) for e in range(E)])
            for query in QUERIES:
                both(host, dev, query, torch.from_numpy(pos), torch.from_numpy(env))
    assert dev.device_buffer.device == torch.device(device)


@pytest.mark.parametrize("record", [False, True])
def test_with_env_ids_on_the_host_get_batch_never_waits(record: bool) -> None:
    """While every ``add_batch`` names its envs on the host (or all of them), each env's
    stored range is known there: uniform ``get_batch`` (with returns, ignored frames and
    recent draws) and ``add_batch`` read nothing from the device."""
    dev = device_rb(SPEC, 3, max_length=8, record_episodic_return=record,
                    keep_episodic_info=True, num_earliest_frames_ignored=1,
                    recent_data_ratio=0.5)  # fmt: skip
    rng = np.random.default_rng(0)
    steps = [steps_of(SPEC, rng, 3, tensors=True) for _ in range(20)]
    with no_host_sync("cpu") as counter:
        for i, values in enumerate(steps):
            if i % 3:
                dev.add_batch(values)
            else:
                dev.add_batch({k: v[:2] for k, v in values.items()}, np.array([2, 0]))
            if i >= 12:
                dev.get_batch(5, 3)
    assert dict(counter.calls) == {}
    check_bounds(dev)
    dev.add_batch({k: v[:1] for k, v in steps[0].items()}, torch.tensor([1]))
    assert dev._known is None  # envs on the device: read once, at the next need
    with no_host_sync("cpu") as counter:
        dev.get_batch(5, 3)
    assert set(counter.calls) == {"cpu", "numpy"}  # the stored ranges
    with no_host_sync("cpu") as counter:
        dev.get_batch(5, 3)
    assert dict(counter.calls) == {}
    check_bounds(dev)


def test_returns_cost_get_batch_no_wait() -> None:
    """``discounted_return`` is gathered on the device: ``get_batch`` waits exactly as often
    as without it (here for the envs' stored ranges, after an add with envs on the device)."""
    counts = []
    for record in (False, True):
        torch.manual_seed(0)
        dev = device_rb(SPEC, 3, max_length=8, keep_episodic_info=True,
                        record_episodic_return=record)  # fmt: skip
        rng = np.random.default_rng(0)
        for _ in range(10):
            dev.add_batch(steps_of(SPEC, rng, 3, tensors=True))
        dev.add_batch({k: v[:1] for k, v in steps_of(SPEC, rng, 3, tensors=True).items()},
                      torch.tensor([1]))  # fmt: skip
        with no_host_sync("cpu") as counter:
            dev.get_batch(8, 3)
        counts.append(dict(counter.calls))
    assert counts[0] == counts[1] and set(counts[0]) == {"cpu", "numpy"}


def test_prioritized_batches_carry_the_returns_of_their_steps() -> None:
    """Prioritized draws are ALF's law, not the host-backed buffer's draws: each drawn row's
    ``discounted_return`` is the host-backed buffer's return of the same steps."""
    E, L = 3, 3
    host, dev = pair(SPEC, E, 2, max_length=7, prioritized_sampling=True, gamma=0.8,
                     record_episodic_return=True, num_earliest_frames_ignored=1)  # fmt: skip
    rng = np.random.default_rng(2)
    for i in range(40):
        values = steps_of(SPEC, rng, E, tensors=True)
        host.add_batch(values)
        dev.add_batch(values)
        if i >= 8 and i % 4 == 0:
            _, all_info = host.gather_all()
            heads = all_info.positions.numpy()
            _, info = dev.get_batch(16, L)
            env, pos = info.env_ids.numpy(), info.positions.numpy()
            assert (pos >= heads[env] + 1).all()  # the earliest frame is never a start
            steps = (pos - heads[env])[:, None] + np.arange(L)
            want = all_info.discounted_return.numpy()[env[:, None], steps]
            np.testing.assert_allclose(info.discounted_return.numpy(), want, rtol=2e-6,
                                       atol=2e-6)  # fmt: skip


def test_options_are_checked_as_the_host_backed_buffer_checks_them() -> None:
    for kw in (
        dict(record_episodic_return=True, gamma=1.5),
        dict(record_episodic_return=True, gamma="x"),
        dict(record_episodic_return=True, reward_clip=(1.0,)),
        dict(record_episodic_return=True, reward_clip=(float("nan"), 1.0)),
        dict(record_episodic_return=True, keep_episodic_info=False),
    ):
        with pytest.raises(rr.ConfigError) as theirs:
            pair(SPEC, 2, 0)[0].__class__(SPEC, 2, **kw)
        with pytest.raises(type(theirs.value)) as ours:
            device_rb(SPEC, 2, **kw)
        assert str(ours.value).split(":")[0] == str(theirs.value).split(":")[0]
    with pytest.raises(rr.ConfigError, match=r"^keep_episodic_info: needs a scalar integer"):
        device_rb({"x": TensorSpec(())}, 2, keep_episodic_info=True)
    dev = device_rb(SPEC, 2, max_length=4)
    for query in QUERIES:  # without keep_episodic_info
        with pytest.raises(ReplayAssertionError, match="keep_episodic_info"):
            getattr(dev, query)(torch.tensor([0]), torch.tensor([0]))
    host, dev = pair(SPEC, 2, 0, max_length=4, reward_clip=(2.0, 1.0), gamma=0.5,
                     record_episodic_return=True)  # fmt: skip
    script = [("add", 3, 8), ("read", 1, 0), ("get_batch", 4, 2)]
    run_script(host, dev, SPEC, script, 2, 0)  # lo > hi: every reward becomes hi, as ALF's


def test_a_rejected_add_changes_nothing() -> None:
    host, dev = pair(SPEC, 2, 0, max_length=4, record_episodic_return=True)
    rng = np.random.default_rng(1)
    for _ in range(3):
        values = steps_of(SPEC, rng, 2, tensors=True)
        host.add_batch(values)
        dev.add_batch(values)
    bad = steps_of(SPEC, rng, 2, tensors=True)
    bad["reward"] = bad["reward"].double()
    with pytest.raises(rr.DTypeError):
        dev.add_batch(bad)
    with pytest.raises(rr.InvalidIdError):
        dev.add_batch(steps_of(SPEC, rng, 2, tensors=True), [1, 1])
    run_script(host, dev, SPEC, [("read", 0, 0), ("add", 2, 3), ("read", 1, 0)], 2, 3)
