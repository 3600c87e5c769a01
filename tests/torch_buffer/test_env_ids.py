"""``add(..., env_ids=...)``: a step of some of the envs. Random streams of env subsets (host
lists, NumPy arrays, device tensors, every env) on the device buffer and on the NumPy core side
by side: the same ids, the same sampleable ids, bit-identical transitions and sequences for
every stored id, the same priorities and tree leaves; host env_ids checked in full, device
ones by shape and dtype; no host synchronisation with device env_ids."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
import rlreplay.torch as rrt
from tests.torch_buffer.helpers import (
    assert_bit_identical,
    assert_same_contents,
    host,
    make,
    numpy_twin,
    on,
    random_step,
)
from tests.torch_device.helpers import no_host_sync

Array = np.ndarray[Any, Any]


class SubsetTwins:
    """A device buffer and a NumPy core buffer fed the same steps of env subsets (the
    interface of :class:`tests.torch_buffer.helpers.Twins` that the shared checks read).

    Episodes the device buffer drops for a final record (``finals_per_env < C``) are dropped
    from the core's buffer too (``dequeue``), which is what that rule is defined to match."""

    def __init__(self, buf: rrt.DeviceReplayBuffer, seed: int = 0) -> None:
        self.buf = buf
        self.np_buf = numpy_twin(buf, seed)
        E = buf.num_envs
        self.counts = np.zeros(E, np.int64)
        self.np_head = np.zeros(E, np.int64)
        self.dropped = 0

    @property
    def count(self) -> int:  # (for checks written for envs in lockstep)
        return int(self.counts.max())

    def add(self, step: Mapping[str, Array], envs: Array | None, kind: str) -> None:
        """One step of ``envs`` (None: every env), given as ``kind``: "list", "numpy",
        "tensor" (on the device), "cpu tensor"."""
        E = self.buf.num_envs
        dev = str(self.buf.device)
        if envs is None:
            ids = self.buf.add(**on(step, dev))
            np_ids = np.asarray(self.np_buf.add(**step) if E > 1 else self.np_buf.add(
                **{k: v[0] for k, v in step.items()}))  # fmt: skip
            stepped = np.arange(E)
        else:
            sub = {k: v[envs] for k, v in step.items()}
            given_ids: Any = {
                "list": envs.tolist(),
                "numpy": envs,
                "tensor": torch.from_numpy(envs).to(dev),
                "cpu tensor": torch.from_numpy(envs.astype(np.int32)),
            }[kind]
            ids = self.buf.add(env_ids=given_ids, **on(sub, dev))
            np_ids = np.asarray(self.np_buf.add(env_ids=envs, **sub))
            stepped = envs
        np.testing.assert_array_equal(ids.cpu().numpy(), np_ids.reshape(-1))
        np.testing.assert_array_equal(np_ids.reshape(-1), self.counts[stepped] * E + stepped)
        self.counts[stepped] += 1
        np.testing.assert_array_equal(self.buf.env_steps_added.cpu().numpy(), self.counts)
        C = self.buf.env_capacity
        self.np_head = np.maximum(self.np_head, self.counts - C)
        head = self.buf._ring.head.cpu().numpy()
        for e in np.flatnonzero(head > self.np_head):
            n = int(head[e] - self.np_head[e])
            self.np_buf.dequeue(n, env_ids=[int(e)])
            self.np_head[e] = head[e]
            self.dropped += n

    def clear(self) -> None:
        self.buf.clear()
        self.np_buf.clear()
        self.np_head[:] = self.counts

    def stored_ids(self) -> Array:
        E = self.buf.num_envs
        return np.concatenate(
            [np.arange(self.np_head[e], self.counts[e]) * E + e for e in range(E)]
        ).astype(np.int64)


def assert_same_priorities(tw: SubsetTwins) -> None:
    """The same per-slot priorities of stored steps, sum-tree leaves, min-tree root and
    largest priority as the core's (proportional)."""
    tw.np_buf.sampleable_ids()  # (the core settles its last write before a read)
    core = tw.np_buf._sampler.raw  # type: ignore[attr-defined]
    pri = tw.buf._prio
    assert pri is not None
    C, E = tw.buf.env_capacity, tw.buf.num_envs
    head = tw.buf._ring.head.cpu().numpy()
    rows = np.concatenate([e * C + np.arange(head[e], tw.counts[e]) % C for e in range(E)])
    rows = rows.astype(np.int64)
    np.testing.assert_array_equal(pri.prio.cpu().numpy()[rows], core.prio[rows])
    assert (
        pri.sums.state_dict()["leaves"].tobytes() == core.sum_tree.state_dict()["leaves"].tobytes()
    )
    assert float(pri.mins.min) == float(core.min_tree.min)
    assert float(pri.max_priority) == tw.np_buf.max_priority  # type: ignore[attr-defined]


def assert_same_sequences(tw: SubsetTwins, length: int) -> None:
    ids = tw.stored_ids()
    for within in (True, False):
        ours = host(tw.buf.get_sequences(ids, length, within_episode=within))
        got = tw.np_buf.get_sequences(ids, length, within_episode=within)
        assert_bit_identical(ours, {k: np.asarray(v) for k, v in got.items()})


CONFIGS: list[dict[str, Any]] = [
    dict(capacity=18, num_envs=3, n_step=3, finals_per_env=6),
    dict(
        capacity=24, num_envs=3, n_step=2, frame_stack=3, finals_per_env=8, next_fields=("action",)
    ),
    dict(
        capacity=16,
        num_envs=2,
        frame_stack=2,
        stack_pad="first",
        finals_per_env=8,
        recent_ratio=0.5,
        replacement=False,
    ),
    dict(capacity=24, num_envs=3, n_step=2, frame_stack=2, finals_per_env=2),  # drops episodes
    dict(capacity=24, num_envs=3, n_step=2, frame_stack=2, prioritized=True),
    dict(capacity=24, num_envs=3, n_step=3, prioritized=True, finals_per_env=2),
    dict(capacity=16, num_envs=2, n_step=2, frame_stack=2, prioritized=True, variant="rank_based"),
]
KINDS = ["list", "numpy", "tensor", "cpu tensor", "all"]

add_op = st.tuples(
    st.sampled_from(["add", "adds"]),  # one step, or a run of 2 .. 25
    st.integers(0, 2**31 - 1),  # which envs, in which order
    st.sampled_from(KINDS),
    st.sampled_from([0.0, 0.2, 0.5]),
)
update_op = st.tuples(st.just("update"), st.integers(0, 2**31 - 1), st.just("numpy"), st.just(0))
check_op = st.tuples(st.just("check"), st.just(0), st.just(""), st.just(0))
clear_op = st.tuples(st.just("clear"), st.just(0), st.just(""), st.just(0))
ops = st.lists(
    st.one_of(add_op, add_op, add_op, add_op, update_op, check_op, clear_op),
    min_size=1,
    max_size=30,
)


@settings(deadline=None, max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(range(len(CONFIGS))), script=ops, seed=st.integers(0, 2**16))
def test_random_env_subsets_match_the_core(
    config: int, script: list[tuple[str, int, str, float]], seed: int
) -> None:
    buf = make("cpu", **CONFIGS[config], seed=seed)
    tw = SubsetTwins(buf)
    rng = np.random.default_rng(seed)
    E = buf.num_envs
    prioritized = buf.config.prioritized
    proportional = prioritized and not buf.config.rank_based
    for op, a, kind, p_end in script:
        if op in ("add", "adds"):
            pick = np.random.default_rng(a)
            for _ in range(1 if op == "add" else int(pick.integers(2, 26))):
                envs = None if kind == "all" else pick.permutation(E)[: pick.integers(0, E + 1)]
                tw.add(random_step(rng, E, p_end=p_end, p_trunc=0.1), envs, kind)
        elif op == "update":
            if not prioritized or not tw.counts.any():
                continue
            pick = np.random.default_rng(a)
            issued = np.concatenate([np.arange(tw.counts[e]) * E + e for e in range(E)])
            ids = pick.choice(issued, size=min(4, issued.shape[0]), replace=False)
            values = pick.choice([0.0, 0.5, 1.5, 7.0], size=ids.shape[0])
            stale = tw.np_buf.update_priorities(ids, values)  # type: ignore[attr-defined]
            assert int(tw.buf.update_priorities(ids, values)) == stale  # type: ignore[attr-defined]
        elif op == "clear":
            tw.clear()
        else:
            assert_same_sequences(tw, 3)
            batch = host(tw.buf.sample(8))
            if bool(tw.buf.can_sample()):
                assert tw.buf.sampleable(batch["ids"]).all()
        assert_same_contents(tw)  # type: ignore[arg-type]
        if proportional:
            assert_same_priorities(tw)


@pytest.mark.parametrize("config", [0, 1, 3, 4])
def test_long_subset_stream(device: str, config: int) -> None:
    """Past several wraparounds of every env's ring, envs at different paces, on ``device``."""
    buf = make(device, **CONFIGS[config])
    tw = SubsetTwins(buf)
    rng = np.random.default_rng(config)
    E = buf.num_envs
    for i in range(120):
        envs = np.flatnonzero(rng.random(E) < [0.9, 0.5, 0.2][:E])
        rng.shuffle(envs)
        tw.add(random_step(rng, E, p_end=0.25), envs, ["tensor", "list"][i % 2])
        if i % 10 == 9:
            assert_same_contents(tw)  # type: ignore[arg-type]
            assert_same_sequences(tw, 4)
            if buf.config.prioritized:
                # (a few ids: torch's vectorised pow may round a long batch's masses
                # differently from NumPy's)
                ids = rng.choice(tw.np_buf.sampleable_ids(), 4)
                values = rng.uniform(0.1, 3.0, ids.shape[0])
                tw.np_buf.update_priorities(ids, values)  # type: ignore[attr-defined]
                tw.buf.update_priorities(torch.from_numpy(ids).to(device),  # type: ignore[attr-defined]
                                         torch.from_numpy(values).to(device))  # fmt: skip
                assert_same_priorities(tw)
    assert len(set(tw.counts.tolist())) > 1
    if buf.finals_per_env < buf.env_capacity:
        assert tw.dropped > 0


def test_every_env_in_order_is_a_plain_add(device: str) -> None:
    buf = make(device, capacity=16, num_envs=2)
    step = random_step(np.random.default_rng(0), 2)
    buf.add(env_ids=[0, 1], **on(step, device))
    assert not buf._ring.per_env and buf.steps_added == 1
    buf.add(env_ids=np.array([1, 0]), **on({k: v[::-1].copy() for k, v in step.items()}, device))
    assert buf._ring.per_env and buf.steps_added == 2  # (known equal on the host)
    buf.add(
        env_ids=torch.tensor([1], device=device), **on({k: v[1:] for k, v in step.items()}, device)
    )
    with pytest.raises(rr.ShapeError, match="env_steps_added"):
        _ = buf.steps_added
    assert buf.env_steps_added.tolist() == [2, 3]
    ids = buf.add(**on(step, device))  # every env, counted per env
    assert ids.tolist() == [4, 7]


def test_stored_range_and_counts_are_copies(device: str) -> None:
    """What ``stored_range`` and ``env_steps_added`` return belongs to the caller: writing to
    it (on a CPU device ``.numpy()`` would be a view of the buffer's tensors) changes
    nothing."""
    buf = make(device, capacity=16, num_envs=2)
    step = random_step(np.random.default_rng(0), 2)
    buf.add(**on(step, device))
    buf.add(
        env_ids=torch.tensor([1], device=device), **on({k: v[1:] for k, v in step.items()}, device)
    )
    first, end = buf.stored_range()
    first += 5
    end += 5
    assert buf.stored_range()[0].tolist() == [0, 0]
    assert buf.stored_range()[1].tolist() == [1, 2]
    assert buf.env_steps_added.tolist() == [1, 2]


def test_no_env_is_no_step(device: str) -> None:
    buf = make(device, capacity=16, num_envs=2)
    step = random_step(np.random.default_rng(0), 2)
    ids = buf.add(env_ids=[], **on({k: v[:0] for k, v in step.items()}, device))
    assert ids.shape == (0,) and buf.env_steps_added.tolist() == [0, 0]


@pytest.mark.parametrize(
    ("env_ids", "match"),
    [
        ([0, 2], r"env_ids: expected values in \[0, 2\), got \[2\]"),
        ([-1], r"env_ids: expected values in \[0, 2\), got \[-1\]"),
        ([1, 1], r"env_ids: expected unique env ids, got \[1, 1\]"),
        ([0.0], "env_ids: expected a 1-D sequence of ints, got float64"),
        ([[0]], r"env_ids: expected a 1-D sequence of ints, got int64 with shape \(1, 1\)"),
        (np.int64(0), r"shape \(\)"),
        (torch.tensor([0.0]), "env_ids: expected a 1-D sequence of ints, got torch.float32"),
        (torch.tensor([True]), "got torch.bool"),
        (torch.tensor([[0]]), r"shape \(1, 1\)"),
        (torch.tensor([0, 1, 0]), "at most num_envs=2"),
    ],
)
def test_bad_env_ids_are_refused_and_change_nothing(device: str, env_ids: Any, match: str) -> None:
    buf = make(device, capacity=16, num_envs=2)
    rng = np.random.default_rng(0)
    buf.add(**on(random_step(rng, 2), device))
    n = (
        np.asarray(env_ids).reshape(-1).shape[0]
        if not isinstance(env_ids, torch.Tensor)
        else env_ids.reshape(-1).shape[0]
    )
    step = {k: v[:1].repeat(max(n, 1), 0) for k, v in random_step(rng, 2).items()}
    with pytest.raises(rr.InvalidIdError, match=match):
        buf.add(env_ids=env_ids, **on(step, device))
    assert not buf._ring.per_env and buf.steps_added == 1


def test_values_must_match_env_ids(device: str) -> None:
    buf = make(device, capacity=16, num_envs=3)
    step = random_step(np.random.default_rng(0), 3)
    with pytest.raises(rr.ShapeError, match=r"\(len\(env_ids\), \*field shape\)"):
        buf.add(env_ids=[0, 2], **on(step, device))
    assert not buf._ring.per_env and buf.steps_added == 0


def test_host_ids_never_issued_per_env(device: str) -> None:
    buf = make(device, capacity=16, num_envs=2, prioritized=True)
    step = random_step(np.random.default_rng(0), 2, p_end=0.0)
    for _ in range(3):
        buf.add(env_ids=[0], **on({k: v[:1] for k, v in step.items()}, device))
    # env 0 has added 3 steps (ids 0, 2, 4), env 1 none (id 1 never issued)
    buf.update_priorities([4], [1.0])  # type: ignore[attr-defined]
    with pytest.raises(rr.InvalidIdError, match="id 1 at position 0 was never issued"):
        buf.update_priorities([1], [1.0])  # type: ignore[attr-defined]
    # With device env_ids the counts are not known on the host: only negative ids raise.
    buf.add(
        env_ids=torch.tensor([1], device=device), **on({k: v[:1] for k, v in step.items()}, device)
    )
    assert int(buf.update_priorities([3], [1.0])) == 1  # type: ignore[attr-defined]
    with pytest.raises(rr.InvalidIdError, match="id -1"):
        buf.update_priorities([-1], [1.0])  # type: ignore[attr-defined]


def test_device_env_ids_never_wait_for_the_device(device: str) -> None:
    for kwargs in (
        dict(capacity=32, num_envs=4, n_step=3, frame_stack=3, next_fields=("action",),
             finals_per_env=1),
        dict(capacity=32, num_envs=2, n_step=2, frame_stack=2, prioritized=True, finals_per_env=2),
        dict(capacity=32, num_envs=2, n_step=2, frame_stack=2, prioritized=True),
    ):  # fmt: skip
        buf = make(device, **kwargs)
        E = buf.num_envs
        rng = np.random.default_rng(0)
        subsets = [torch.from_numpy(rng.permutation(E)[: rng.integers(1, E + 1)]).to(device)
                   for _ in range(30)]  # fmt: skip
        steps = [on({k: v[: s.shape[0]] for k, v in random_step(rng, E, p_end=0.3).items()}, device)
                 for s in subsets]  # fmt: skip
        full = [on(random_step(rng, E), device) for _ in subsets]
        with no_host_sync(device) as counter:
            for i, (envs, step, every) in enumerate(zip(subsets, steps, full, strict=True)):
                ids = buf.add(env_ids=envs, **step)
                batch = buf.sample(8)
                buf.get_transitions(batch["ids"])
                buf.sample_sequences(4, 3, pad=i % 2 == 0)
                _ = buf.num_sampleable, buf.env_steps_added
                if isinstance(buf, rrt.DevicePrioritizedReplayBuffer):
                    buf.update_priorities(batch["ids"], batch["reward"].abs().double())
                    buf.update_priorities(ids, torch.full_like(ids, 2.0, dtype=torch.float64))
                if i == 20:
                    buf.clear()
                buf.add(**every)  # every env, counted per env
        assert dict(counter.calls) == {}


@pytest.mark.parametrize("config", [0, 4])
def test_sampled_sequences_of_env_subsets(device: str, config: int) -> None:
    """Starts drawn among the stored (pad) or whole (no pad) runs of each env's own range,
    and rows that are the core's sequences of those starts."""
    buf = make(device, **CONFIGS[config])
    tw = SubsetTwins(buf)
    rng = np.random.default_rng(config)
    E = buf.num_envs
    for _ in range(40):
        envs = np.flatnonzero(rng.random(E) < [0.9, 0.5, 0.2][:E])
        tw.add(random_step(rng, E, p_end=0.2), envs, "tensor")
    stored = set(tw.stored_ids().tolist())
    for pad in (True, False):
        b = host(buf.sample_sequences(64, 3, pad=pad))
        assert set(b["ids"].tolist()) <= stored
        if not pad:
            assert b["mask"].all()
        theirs = tw.np_buf.get_sequences(b["ids"], 3)
        ours = {k: v for k, v in b.items() if k not in ("weights", "probabilities")}
        assert_bit_identical(ours, {k: np.asarray(v) for k, v in theirs.items()})
