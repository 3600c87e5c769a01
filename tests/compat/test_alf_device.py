"""ALF's replay buffer with its data on a torch device (``ReplayBuffer(..., device="cuda")``,
:class:`rlreplay.compat.alf._device.DeviceReplayBuffer`), run here on torch's CPU device: for
the same stream of ``add_batch`` calls (all envs or subsets, tensors or arrays) and the same
``torch.manual_seed``, it returns what the host-backed buffer returns, value for value:
``get_batch`` (the same draws), ``gather_all``, ``dequeue``, ``clear``, ``get_field``,
``total_size``; and it refuses, naming them, the options it does not offer."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.compat.alf import ReplayAssertionError, ReplayBuffer, StepType, TensorSpec
from rlreplay.compat.alf.replay_buffer import HostReplayBuffer, _on_accelerator
from rlreplay.compat.alf.tensor_specs import flatten_spec
from tests.torch_device.helpers import DEVICES, no_host_sync

Exp = collections.namedtuple("Exp", "step_type reward discount observation")
SPEC = Exp(
    step_type=TensorSpec((), torch.int32),
    reward=TensorSpec(()),
    discount=TensorSpec(()),
    observation={
        "obs": TensorSpec((2,)),
        "image": TensorSpec((3,), torch.uint8),
        "half": TensorSpec((), torch.bfloat16),
    },
)
SPEC_NO_REWARD = {"x": TensorSpec((2,), torch.float64), "n": (TensorSpec((), torch.int64),)}


def device_rb(spec: Any, E: int, device: str = "cpu", **kw: Any) -> Any:
    from rlreplay.compat.alf.replay_buffer import DeviceReplayBuffer

    return DeviceReplayBuffer(spec, E, device=device, **kw)


def pair(spec: Any, E: int, seed: int, device: str = "cpu", **kw: Any) -> tuple[Any, Any]:
    """A host-backed and a device-backed buffer whose draws are seeded alike."""
    torch.manual_seed(seed)
    host = ReplayBuffer(spec, E, **kw)
    torch.manual_seed(seed)
    dev = device_rb(spec, E, device, **kw)
    return host, dev


def batch_of(spec: Any, rng: np.random.Generator, B: int, device: str, tensors: bool) -> Any:
    """A nest of random values of ``B`` steps (tensors on ``device`` or NumPy arrays)."""

    def value(s: TensorSpec) -> Any:
        shape = (B, *s.shape)
        if s.dtype == torch.int32:  # step_type
            arr = rng.integers(0, 3, shape).astype(np.int32)
        elif s.dtype == torch.uint8:
            arr = rng.integers(0, 255, shape).astype(np.uint8)
        elif s.dtype == torch.int64:
            arr = rng.integers(-9, 9, shape)
        else:
            arr = rng.standard_normal(shape)
        t = torch.from_numpy(arr).to(s.dtype)
        if tensors:
            return t.to(device)
        return t.float().numpy() if s.dtype == torch.bfloat16 else t.numpy()

    def build(node: Any) -> Any:
        if isinstance(node, TensorSpec):
            return value(node)
        if isinstance(node, dict):
            return {k: build(v) for k, v in node.items()}
        if hasattr(node, "_fields"):
            return type(node)(*(build(v) for v in node))
        return type(node)(build(v) for v in node)

    return build(spec)


def assert_same(ours: Any, theirs: Any) -> None:
    """Two nests (or BatchInfos) with equal leaves: same shapes, dtypes and values."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, torch.Tensor), (type(ours), theirs)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours, theirs)
        assert torch.equal(ours.cpu(), theirs.cpu()), (ours, theirs)
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for k in theirs:
            assert_same(ours[k], theirs[k])
    elif isinstance(theirs, tuple | list) and not hasattr(theirs, "replay_buffer"):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert_same(a, b)
    elif hasattr(theirs, "replay_buffer"):  # BatchInfo: every field but the buffer
        for name in ("env_ids", "positions", "importance_weights", "discounted_return"):
            assert_same(getattr(ours, name), getattr(theirs, name))
    else:
        assert ours == theirs


def comparing(same: Callable[[Any, Any], None]) -> Callable[..., None]:
    """``both(host, dev, call, *args, **kwargs)``: the same call on both buffers, and ``same``
    of the results, or the same error type."""

    def both(host: Any, dev: Any, call: str, *args: Any, **kwargs: Any) -> None:
        try:
            theirs = getattr(host, call)(*args, **kwargs)
        except (rr.ReplayError, AssertionError, IndexError) as exc:
            with pytest.raises(type(exc)):
                getattr(dev, call)(*args, **kwargs)
            return
        same(getattr(dev, call)(*args, **kwargs), theirs)

    return both


both = comparing(assert_same)


def scripted_op(
    host: Any,
    dev: Any,
    op: str,
    a: int,
    b: int,
    values_of: Callable[[int, int], Any],
    same: Callable[..., None] = both,
) -> bool:
    """One op of a random script on both buffers, compared with ``same``: ``b`` calls of
    ``add_batch`` (all envs, or a subset on the host or as a tensor; ``values_of(B, i)``: the
    values of the ``i``-th, ``B`` steps), ``get_batch(a, b)``, ``dequeue`` or ``clear``; False
    (nothing done) for any other op."""
    E = dev.num_environments
    pick = np.random.default_rng(a)
    if op == "add":
        for i in range(b):
            kind = pick.integers(0, 4)
            envs = None if kind == 0 else pick.permutation(E)[: pick.integers(1, E + 1)]
            values = values_of(E if envs is None else envs.shape[0], i)
            given_envs: Any = envs
            if envs is not None and kind == 1:
                given_envs = torch.from_numpy(envs)
            host.add_batch(values, envs)
            dev.add_batch(values, given_envs)
    elif op == "get_batch":
        same(host, dev, "get_batch", a, b)
    elif op == "dequeue":
        envs = None if pick.random() < 0.4 else pick.permutation(E)[: pick.integers(1, E + 1)]
        same(host, dev, "dequeue", envs, b)
    elif op == "clear":
        envs = None if pick.random() < 0.3 else list(pick.integers(-E, E, 2))
        same(host, dev, "clear", envs)
    else:
        return False
    return True


OPTIONS: list[dict[str, Any]] = [
    dict(max_length=6),
    dict(max_length=5, with_replacement=True),
    dict(max_length=16, recent_data_ratio=0.5, recent_data_steps=2),
    dict(max_length=2),
]


def script_ops(adds: int, dequeues: int, max_size: int) -> st.SearchStrategy[Any]:
    """Random scripts for :func:`scripted_op` and a file's "read" step: ``(op, a, b)`` tuples,
    up to ``adds`` steps an "add" and ``dequeues`` a "dequeue"."""
    return st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(0, 2**31 - 1), st.integers(1, adds)),
            st.tuples(st.just("get_batch"), st.integers(1, 9), st.integers(1, 4)),
            st.tuples(st.just("dequeue"), st.integers(0, 2**31 - 1), st.integers(1, dequeues)),
            st.tuples(st.just("clear"), st.integers(0, 2**31 - 1), st.just(0)),
            st.tuples(st.just("read"), st.integers(0, 2**31 - 1), st.just(0)),
        ),
        min_size=1,
        max_size=max_size,
    )


ops = script_ops(adds=20, dequeues=4, max_size=20)


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(options=st.sampled_from(range(len(OPTIONS))), script=ops, seed=st.integers(0, 2**16))
def test_random_use_matches_the_host_backed_buffer(
    options: int, script: list[tuple[str, int, int]], seed: int
) -> None:
    E = 3
    host, dev = pair(SPEC, E, seed, **OPTIONS[options])
    rng = np.random.default_rng(seed)
    for op, a, b in script:
        pick = np.random.default_rng(a)
        if scripted_op(host, dev, op, a, b, lambda B, i: batch_of(SPEC, rng, B, "cpu", i % 2 == 1)):
            continue
        both(host, dev, "gather_all")
        both(host, dev, "gather_all", convert_to_default_device=False)
        assert int(dev.total_size) == int(host.total_size)
        heads, counts = host._bounds()
        env = pick.integers(0, E, 4)
        stored = counts[env] > heads[env]
        if stored.any():  # stored positions
            env = env[stored]
            pos = pick.integers(heads[env], counts[env])
            both(host, dev, "get_field", "observation", torch.from_numpy(env), pos)
            both(host, dev, "get_field", ["reward", "observation.half"], env[:1], pos[:1])
        e = int(pick.integers(0, E))  # one just before or after the stored ones
        bad = heads[e] - 1 if heads[e] > 0 and pick.random() < 0.5 else counts[e]
        both(host, dev, "get_field", "observation.obs", [e], [bad])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", range(len(OPTIONS)))
def test_a_long_stream_on_the_device(device: str, options: int) -> None:
    """Tensors on ``device`` in, the same batches as the host-backed buffer's out."""
    E = 4
    spec = SPEC if options % 2 else SPEC_NO_REWARD
    host, dev = pair(spec, E, 7 + options, device, **OPTIONS[options])
    rng = np.random.default_rng(options)
    for i in range(60):
        envs = np.flatnonzero(rng.random(E) < 0.8)
        values = batch_of(spec, rng, envs.shape[0], device, tensors=True)
        host.add_batch(values, envs)
        dev.add_batch(values, torch.from_numpy(envs).to(device))
        if i % 6 == 5:
            both(host, dev, "get_batch", 13, 2)
            both(host, dev, "get_batch", 4, 1)
            assert int(dev.total_size) == int(host.total_size)
        if i == 40:
            both(host, dev, "dequeue", [2, 0], 1)
    assert dev.device == torch.device(device)
    assert dev.device_buffer.storage.steps[dev.field_names[next(iter(dev.field_names))]].device == (
        torch.device(device)
    )
    both(host, dev, "clear", [1])
    both(host, dev, "dequeue", [0, 3], 2)


@pytest.mark.parametrize("prioritized", [False, True])
def test_add_batch_with_device_env_ids_never_waits(prioritized: bool) -> None:
    dev = device_rb(SPEC, 3, max_length=8, prioritized_sampling=prioritized)
    rng = np.random.default_rng(0)
    steps = [batch_of(SPEC, rng, 2, "cpu", tensors=True) for _ in range(12)]
    envs = [torch.from_numpy(rng.permutation(3)[:2]) for _ in range(12)]
    with no_host_sync("cpu") as counter:
        for values, e in zip(steps, envs, strict=True):
            dev.add_batch(values, e)
        _ = dev.total_size, dev.initial_priority
    assert dict(counter.calls) == {}


def test_broadcast_and_dtype_rules_are_the_host_backed_ones() -> None:
    host, dev = pair(SPEC, 2, 0)
    values = batch_of(SPEC, np.random.default_rng(0), 2, "cpu", tensors=True)
    values = values._replace(reward=torch.tensor(1.5), discount=torch.tensor(1.0))  # broadcast
    host.add_batch(values)
    dev.add_batch(values)
    both(host, dev, "gather_all")
    wrong = values._replace(reward=torch.ones(2, dtype=torch.float64))
    with pytest.raises(rr.DTypeError, match="Index put requires"):
        dev.add_batch(wrong)
    with pytest.raises(rr.ShapeError, match="batch_size 3 given for 2"):
        dev.add_batch(values._replace(discount=torch.ones(3)))
    with pytest.raises(rr.FieldError, match="observation"):
        dev.add_batch(values._replace(observation={}))
    with pytest.raises(rr.InvalidIdError, match="unique"):
        dev.add_batch(values, [1, 1])
    both(host, dev, "gather_all")  # nothing was added by the refused calls


@pytest.mark.parametrize(
    ("kw", "option"),
    [
        (dict(max_length=1), "max_length"),
        (dict(device="nowhere"), "device"),
    ],
)
def test_options_it_does_not_offer_are_refused(kw: dict[str, Any], option: str) -> None:
    with pytest.raises(rr.ConfigError, match=f"^{option}:.*"):
        device_rb(SPEC, 2, **kw)


def test_refused_calls_name_what_to_use() -> None:
    dev = device_rb(SPEC, 2, max_length=4)
    values = batch_of(SPEC, np.random.default_rng(0), 2, "cpu", tensors=True)
    with pytest.raises(rr.ConfigError, match="blocking"):
        dev.add_batch(values, blocking=True)
    dev.add_batch(values)
    with pytest.raises(rr.ConfigError, match="blocking"):
        dev.dequeue(n=1, blocking=True)
    with pytest.raises(rr.ConfigError, match="device_buffer"):
        _ = dev.core
    with pytest.raises(ReplayAssertionError, match="prioritized_sampling"):
        dev.update_priority([0], [0], [1.0])  # (a uniform buffer)
    for query in ("steps_to_episode_end", "get_episode_begin_position",
                  "get_disc_0_begin_position"):  # fmt: skip
        with pytest.raises(ReplayAssertionError, match="keep_episodic_info"):
            getattr(dev, query)(torch.tensor([0]), torch.tensor([0]))
    assert dev.initial_priority.item() == 1.0
    assert dev.state_dict() == ReplayBuffer(SPEC, 2).state_dict()  # (no contents)
    assert int(dev.total_size) == 2 and dev.max_length == 4 and dev.num_environments == 2
    assert dev.field_names["observation.obs"] == "observation__obs"
    assert "device='cpu'" in repr(dev)
    assert StepType.LAST == 2


def test_which_class_a_device_makes() -> None:
    """An accelerator keeps the data there; the CPU (and CUDA where it is missing: the
    host-backed buffer's error) keeps the host-backed buffer."""
    assert type(ReplayBuffer(SPEC, 2)) is ReplayBuffer
    assert type(ReplayBuffer(SPEC, 2, device="cpu")) is ReplayBuffer
    assert type(HostReplayBuffer(SPEC, 2, device="cpu")) is HostReplayBuffer
    assert not _on_accelerator("cpu") and not _on_accelerator("tpu")
    assert _on_accelerator("cuda") == torch.cuda.is_available()
    assert _on_accelerator("meta")
    leaves = [".".join(p) for p, _ in flatten_spec(SPEC)]
    assert leaves[-1] == "observation.half"


def test_prioritized_draws_follow_alfs_law() -> None:
    """P(i) = p_i / sum p over the possible starts (chi-square), weights p_i * nnz / sum p,
    rows the host-backed buffer's values at the drawn positions, and ALF's new-step rule
    (max(initial_priority, current largest), through overwrites, dequeues and clears)."""
    from scipy import stats

    from rlreplay.compat.alf._draws import StartRanges, start_masses

    E, L = 2, 2
    host, dev = pair(SPEC, E, 3, max_length=8, prioritized_sampling=True, initial_priority=0.5)
    rng = np.random.default_rng(3)

    def add(n: int) -> None:
        for _ in range(n):
            envs = np.flatnonzero(rng.random(E) < 0.8)
            values = batch_of(SPEC, rng, envs.shape[0], "cpu", tensors=True)
            host.add_batch(values, envs)
            dev.add_batch(values, torch.from_numpy(envs))
            assert dev.initial_priority.item() == host.initial_priority.item()

    def update() -> None:
        heads, counts = host._bounds()
        env = np.repeat(np.arange(E), counts - heads)
        pos = np.concatenate([np.arange(heads[e], counts[e]) for e in range(E)])
        p = rng.choice([0.0, 0.3, 1.0, 2.5], size=pos.shape[0])
        host.update_priority(env, pos, p)
        dev.update_priority(torch.from_numpy(env), torch.from_numpy(pos), torch.from_numpy(p))
        assert dev.initial_priority.item() == host.initial_priority.item()

    add(13)
    update()
    add(3)  # new steps at the largest priority
    heads, counts = host._bounds()
    masses = start_masses(host._pcore, StartRanges(heads, counts - L + 1, counts - heads, L, 0))
    env_all = np.repeat(np.arange(E), np.maximum(counts - L + 1 - heads, 0))
    pos_all = np.concatenate([np.arange(heads[e], counts[e] - L + 1) for e in range(E)])
    p_all = host._pcore.get_priorities(pos_all * E + env_all)
    drawn = []
    for _ in range(40):
        batch, info = dev.get_batch(64, L)
        env, pos = info.env_ids.numpy(), info.positions.numpy()
        assert (np.diff(env) >= 0).all()
        p = host._pcore.get_priorities(pos * E + env)
        want = (p * (masses.nonzero / np.float64(masses.total))).astype(np.float32)
        np.testing.assert_allclose(info.importance_weights.numpy(), want, rtol=1e-6)
        steps = torch.from_numpy(pos)[:, None] + torch.arange(L)
        assert_same(batch, host.get_field("", torch.from_numpy(env)[:, None], steps))
        drawn.append(pos * E + env)
    ids = np.concatenate(drawn)
    keep = p_all > 0
    counts_drawn = np.array([(ids == i).sum() for i in (pos_all * E + env_all)[keep]])
    assert counts_drawn.sum() == ids.size  # nothing of priority 0, nothing out of range
    expected = p_all[keep] / p_all[keep].sum() * ids.size
    assert stats.chisquare(counts_drawn, expected).pvalue > 1e-3
    both(host, dev, "dequeue", [1], 2)
    assert dev.initial_priority.item() == host.initial_priority.item()
    add(2)
    both(host, dev, "clear", [0])
    add(1)
    both(host, dev, "clear")
    assert dev.initial_priority.item() == host.initial_priority.item() == 0.5


def test_prioritized_get_batch_waits_once_and_a_refusal_changes_nothing() -> None:
    """A prioritized ``get_batch`` reads the device once (whether any start has mass, with
    the drawn starts). When no start has mass it raises, and the buffer draws afterwards
    exactly as a twin that was never asked (before its first draw and after)."""
    bufs = []
    for _ in range(2):
        torch.manual_seed(0)  # (ALF's buffers seed their draws from torch's generator)
        bufs.append(device_rb(SPEC, 2, max_length=6, prioritized_sampling=True,
                              recent_data_ratio=0.5, recent_data_steps=1))  # fmt: skip
    rng = np.random.default_rng(0)
    steps = [batch_of(SPEC, rng, 2, "cpu", tensors=True) for _ in range(5)]
    for rb in bufs:
        for values in steps:
            rb.add_batch(values)
    env, pos = torch.tensor([0] * 5 + [1] * 5), torch.arange(5).repeat(2)

    def refused_on_the_first() -> None:
        for rb in bufs:
            rb.update_priority(env, pos, torch.zeros(10, dtype=torch.float64))
        with pytest.raises(ReplayAssertionError, match="valid priority"):
            bufs[0].get_batch(4, 2)
        for rb in bufs:
            rb.update_priority(env, pos, torch.arange(10, dtype=torch.float64) % 3)

    refused_on_the_first()  # before any draw: the device generator is not made yet
    with no_host_sync("cpu") as counter:
        bufs[0].get_batch(4, 2)
    assert dict(counter.calls) == {"cpu": 1, "numpy": 1}
    bufs[1].get_batch(4, 2)
    refused_on_the_first()
    for _ in range(3):
        (a, info_a), (b, info_b) = (rb.get_batch(6, 2) for rb in bufs)
        assert_same(a, b)
        assert_same(info_a, info_b)


def test_prioritized_refusals() -> None:
    host, dev = pair(SPEC, 2, 0, max_length=4, prioritized_sampling=True)
    values = batch_of(SPEC, np.random.default_rng(0), 2, "cpu", tensors=True)
    for rb in (host, dev):
        rb.add_batch(values)
        rb.add_batch(values)
    both(host, dev, "update_priority", [0, 1], [0, 0], [0.0, 0.0])
    both(host, dev, "update_priority", [0, 1], [1, 1], [0.0, 0.0])
    both(host, dev, "get_batch", 2, 1)  # nothing of priority > 0
    both(host, dev, "update_priority", [0], [5], [1.0])  # never added
    both(host, dev, "update_priority", [0], [0], [1.0, 2.0])  # shapes
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(rr.ConfigError, match=r"priorities: .*finite priorities >= 0"):
            dev.update_priority([0], [0], [bad])
    with pytest.raises(rr.ConfigError, match="initial_priority"):
        device_rb(SPEC, 2, prioritized_sampling=True, initial_priority=float("inf"))
