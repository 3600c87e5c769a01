"""ALF's replay buffer and segment trees front-end: seed behaviour, a reference, core agreement.

Every step names itself: the leaf ``observation.obs`` of step ``pos`` of env ``e`` is
``[e, pos]``, so a sampled row can be checked against the history of everything added
(:class:`Driver` keeps it, with ALF's episode rules: LAST ends an episode, the next step is
FIRST).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

import rlreplay as rr
import rlreplay.compat.alf as alf
from rlreplay.compat.alf import (
    BatchInfo,
    ReplayAssertionError,
    ReplayBuffer,
    StepType,
    TensorSpec,
)
from rlreplay.compat.alf.segment_tree import (
    MaxSegmentTree,
    MinSegmentTree,
    SegmentTree,
    SumSegmentTree,
)

P_CHI = 1e-3  # seeded chi-square tests fail only on a real mismatch of the law
JOIN = 20.0  # seconds: a thread still alive after this is deadlocked

Exp = collections.namedtuple("Exp", "step_type reward discount observation env_id")
SPEC = Exp(
    step_type=TensorSpec((), torch.int32),
    reward=TensorSpec(()),
    discount=TensorSpec(()),
    observation={"obs": TensorSpec((2,)), "image": TensorSpec((3,), torch.uint8)},
    env_id=TensorSpec((), torch.int64),
)
LEAVES = ("step_type", "reward", "discount", "observation.obs", "observation.image", "env_id")


def leaf(nest: Any, path: str) -> Any:
    for key in path.split("."):
        nest = nest[key] if isinstance(nest, dict) else getattr(nest, key)
    return nest


class Driver:
    """An ALF buffer and the history of every step added to it (the slow reference)."""

    def __init__(self, num_envs: int = 2, max_length: int = 8, **kw: Any) -> None:
        kw.setdefault("keep_episodic_info", True)
        self.rb = ReplayBuffer(SPEC, num_envs, max_length=max_length, **kw)
        self.E, self.C = num_envs, max_length
        self.hist: list[list[dict[str, Any]]] = [[] for _ in range(num_envs)]
        self.head = [0] * num_envs  # oldest stored position per env

    def step(self, e: int, last: bool, timelimit: bool) -> dict[str, Any]:
        h = self.hist[e]
        t = len(h)
        first = t == 0 or h[-1]["step_type"] == StepType.LAST
        kind = StepType.LAST if last else (StepType.FIRST if first else StepType.MID)
        return {
            "step_type": np.int32(kind),
            "reward": np.float32((t % 4) * 0.5 + e),
            "discount": np.float32(1.0 if (kind != StepType.LAST or timelimit) else 0.0),
            "observation.obs": np.array([e, t], np.float32),
            "observation.image": np.array([t % 200, e, 7], np.uint8),
            "env_id": np.int64(e),
        }

    def add(
        self,
        envs: Any = None,
        last: Any = (),
        timelimit: Any = (),
        tensors: bool = True,
        **kw: Any,
    ) -> None:
        envs_l = list(range(self.E)) if envs is None else list(envs)
        rows = [self.step(e, e in last, e in timelimit) for e in envs_l]

        def col(path: str) -> Any:
            arr = np.stack([r[path] for r in rows])
            return torch.from_numpy(arr) if tensors else arr

        batch = Exp(
            step_type=col("step_type"),
            reward=col("reward"),
            discount=col("discount"),
            observation={"obs": col("observation.obs"), "image": col("observation.image")},
            env_id=col("env_id"),
        )
        self.rb.add_batch(batch, None if envs is None else torch.tensor(envs_l), **kw)
        for e, r in zip(envs_l, rows, strict=True):
            self.hist[e].append(r)
            self.head[e] = max(self.head[e], len(self.hist[e]) - self.C)

    def run(self, steps: int, episode_len: int = 0) -> None:
        """``steps`` steps of every env; env ``e``'s episodes last ``episode_len + e``."""
        for _ in range(steps):
            last = [
                e
                for e in range(self.E)
                if episode_len and (len(self.hist[e]) + 1) % (episode_len + e) == 0
            ]
            self.add(last=last)

    # ------------------------------------------------------------ reference answers
    def value(self, e: int, t: int, path: str) -> Any:
        return self.hist[e][t][path]

    def is_last(self, e: int, t: int) -> bool:
        return bool(self.hist[e][t]["step_type"] == StepType.LAST)

    def steps_to_end(self, e: int, t: int) -> int:
        h = self.hist[e]
        for j in range(t, len(h)):
            if self.is_last(e, j):
                return j - t
        return len(h) - 1 - t

    def episode_begin(self, e: int, t: int) -> int:
        for j in range(t - 1, -1, -1):
            if self.is_last(e, j):
                return j + 1
        return 0

    def disc0_begin(self, e: int, t: int) -> int:
        for j in range(t - 1, -1, -1):
            if self.hist[e][j]["discount"] == 0:
                return j + 1
        return 0

    def ret(
        self, e: int, t: int, gamma: float, clip: Any = None, default: float = -1000.0
    ) -> float:
        """ALF's return of step t: the rewards after it, to its episode's LAST step."""
        if self.is_last(e, t):
            return 0.0
        end = t + self.steps_to_end(e, t)
        if not self.is_last(e, end):
            return default
        g = 0.0
        for k in range(end, t, -1):
            r = float(self.hist[e][k]["reward"])
            if clip is not None:
                r = min(max(r, clip[0]), clip[1])
            g = r + gamma * g
        return g

    def stored(self, e: int) -> range:
        return range(self.head[e], len(self.hist[e]))

    def check_rows(self, batch: Any, env_ids: Any, positions: Any, length: int) -> None:
        """Row ``i`` of ``batch`` is steps ``positions[i] ..`` of env ``env_ids[i]``."""
        for i, (e, p) in enumerate(zip(env_ids.tolist(), positions.tolist(), strict=True)):
            for j in range(length):
                for path in LEAVES:
                    got = leaf(batch, path)[i, j].numpy()
                    np.testing.assert_array_equal(got, self.value(e, p + j, path), err_msg=path)


def starts_of(info: BatchInfo) -> list[tuple[int, int]]:
    return list(zip(info.env_ids.tolist(), info.positions.tolist(), strict=True))


# =========================================================================== TensorSpec, nests
def test_package_exports_modules_and_tensor_spec() -> None:
    assert alf.replay_buffer.ReplayBuffer is ReplayBuffer
    assert alf.segment_tree.SumSegmentTree is SumSegmentTree
    assert alf.TensorSpec is alf.tensor_specs.TensorSpec


def test_tensor_spec_shape_dtype_and_helpers() -> None:
    spec = TensorSpec((2, 3), torch.uint8)
    assert spec.shape == torch.Size([2, 3]) and spec.dtype == torch.uint8
    assert spec.numpy_dtype == np.uint8 and spec.ndim == 2 and spec.numel() == 6
    assert spec.is_discrete() and not spec.is_continuous()
    assert spec.zeros((4,)).shape == (4, 2, 3) and spec.ones().dtype == torch.uint8
    assert TensorSpec(3).shape == (3,) and TensorSpec(()).dtype == torch.float32
    assert TensorSpec((2,), "int64") == TensorSpec((2,), np.int64) == TensorSpec((2,), torch.int64)
    assert TensorSpec.from_tensor(torch.zeros(5, 2), from_dim=1) == TensorSpec((2,))
    assert TensorSpec.from_array(np.zeros((5, 2), np.int32), 1) == TensorSpec((2,), torch.int32)
    with pytest.raises(rr.ConfigError, match="NumPy counterpart"):
        TensorSpec((), torch.bfloat16)
    with pytest.raises(rr.ConfigError):
        TensorSpec((-1,))


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"a": 3}, "expected a nest"),
        ({"a.b": TensorSpec(())}, "without dots"),
        ({}, "no TensorSpec"),
    ],
)
def test_bad_data_spec_is_refused(spec: Any, match: str) -> None:
    with pytest.raises(rr.ConfigError, match=match):
        ReplayBuffer(spec, 1)


def test_leaf_and_tuple_specs_round_trip() -> None:
    rb = ReplayBuffer(TensorSpec((2,)), 2, max_length=4)
    rb.add_batch(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    data, _ = rb.gather_all()
    assert torch.equal(data, torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]]))
    rb = ReplayBuffer((TensorSpec(()), [TensorSpec((), torch.int64)]), 1, max_length=4)
    rb.add_batch((torch.tensor([0.5]), [torch.tensor([7])]))
    out = rb.dequeue()
    assert isinstance(out, tuple) and isinstance(out[1], list)
    assert out[0].tolist() == [[0.5]] and out[1][0].tolist() == [[7]]
    assert rb.field_names == {"0": "f_0", "1.0": "f_1__0"}


def test_field_names_map_paths_to_valid_core_fields() -> None:
    rb = ReplayBuffer(SPEC, 1)
    assert rb.field_names == {
        "step_type": "step_type",
        "reward": "reward",
        "discount": "f_discount",  # 'discount' is a name the core computes
        "observation.obs": "observation__obs",
        "observation.image": "observation__image",
        "env_id": "f_env_id",
    }
    assert set(rb.core.schema.fields) >= set(rb.field_names.values())
    # 'obs' is always an observation field in the core: a leaf named so is renamed, and
    # episode ends need no next observation for it.
    spec = {"obs": TensorSpec((2,)), "next_obs": TensorSpec(()), "step_type": SPEC.step_type}
    rb = ReplayBuffer(spec, 1, max_length=4)
    assert rb.field_names == {"obs": "f_obs", "next_obs": "f_next_obs", "step_type": "step_type"}
    last = torch.tensor([StepType.LAST], dtype=torch.int32)
    rb.add_batch({"obs": torch.ones(1, 2), "next_obs": torch.zeros(1), "step_type": last})
    assert rb.get_field("obs", torch.tensor([0]), torch.tensor([0])).tolist() == [[1.0, 1.0]]


# =========================================================================== construction
def test_constructor_defaults_and_constants() -> None:
    rb = ReplayBuffer(SPEC, 3)
    assert rb.num_environments == 3 and rb.max_length == 1024 and rb.name == "ReplayBuffer"
    assert rb.device == torch.device("cpu") and rb.data_spec is SPEC
    assert rb.core.env_capacity == 1024 and rb.core.num_envs == 3
    assert np.float32(0.9999999) == ReplayBuffer.ONE_MINUS < 1
    assert rb.total_size.item() == 0 and rb.training
    assert isinstance(rb, torch.nn.Module)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"device": "cuda"}, "CUDA is not available"),
        ({"device": "tpu"}, "expected 'cpu' or 'cuda'"),
        ({"allow_multiprocess": True}, "one process"),
        ({"record_episodic_return": True, "keep_episodic_info": False}, "episode information"),
        ({"max_length": 1}, "max_length"),
        ({"recent_data_ratio": 1.5}, "recent_data_ratio"),
        ({"recent_data_steps": 0}, "recent_data_steps"),
        ({"gamma": 2.0}, "gamma"),
    ],
)
def test_constructor_errors(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(rr.ConfigError, match=match):
        ReplayBuffer(SPEC, 2, **kw)


def test_cuda_is_refused_clearly_when_unavailable() -> None:
    if torch.cuda.is_available():  # pragma: no cover - no GPU in CI
        pytest.skip("CUDA is available")
    with pytest.raises(ValueError, match="device='cuda'"):
        ReplayBuffer(SPEC, 1, device="cuda")
    with pytest.raises(ValueError, match="CUDA"):
        SumSegmentTree(4, device="cuda")


def test_keep_episodic_info_needs_step_type_and_defaults_on_with_ignored_frames() -> None:
    with pytest.raises(rr.ConfigError, match="step_type"):
        ReplayBuffer({"x": TensorSpec(())}, 1, keep_episodic_info=True)
    ignoring = ReplayBuffer(SPEC, 1, num_earliest_frames_ignored=2)  # keep_episodic_info=None
    ignoring.add_batch(_one_step())
    assert ignoring.steps_to_episode_end(torch.tensor([0]), torch.tensor([0])).tolist() == [0]
    plain = ReplayBuffer(SPEC, 1)
    plain.add_batch(_one_step())
    with pytest.raises(AssertionError, match="keep_episodic_info"):
        plain.steps_to_episode_end(torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(AssertionError, match="keep_episodic_info"):
        plain.get_episode_begin_position(torch.tensor([0]), torch.tensor([0]))


def _one_step() -> Exp:
    return Exp(
        step_type=torch.tensor([StepType.FIRST], dtype=torch.int32),
        reward=torch.zeros(1),
        discount=torch.ones(1),
        observation={"obs": torch.zeros(1, 2), "image": torch.zeros(1, 3, dtype=torch.uint8)},
        env_id=torch.zeros(1, dtype=torch.int64),
    )


# =========================================================================== add_batch, gather_all
def test_add_batch_and_gather_all_shapes_values_positions() -> None:
    d = Driver(num_envs=3, max_length=5)
    d.run(4)
    data, info = d.rb.gather_all()
    assert leaf(data, "observation.obs").shape == (3, 4, 2)
    assert leaf(data, "observation.image").dtype == torch.uint8
    assert info.env_ids.tolist() == [0, 1, 2] and info.positions.tolist() == [0, 0, 0]
    assert info.importance_weights == () and info.replay_buffer is d.rb
    assert d.rb.total_size.item() == 12
    d.check_rows(data, info.env_ids, info.positions, 4)
    d.run(3)  # 7 steps into 5 slots: the oldest two of every env are overwritten
    data, info = d.rb.gather_all()
    assert leaf(data, "observation.obs").shape == (3, 5, 2)
    assert info.positions.tolist() == [2, 2, 2]
    d.check_rows(data, info.env_ids, info.positions, 5)
    assert d.rb.total_size.item() == 15


def test_add_batch_accepts_numpy_and_env_subsets() -> None:
    d = Driver(num_envs=3, max_length=6)
    d.add(tensors=False)
    d.add(envs=[2, 0])
    with pytest.raises(AssertionError, match="same number of steps"):
        d.rb.gather_all()
    d.add(envs=[1])
    data, info = d.rb.gather_all()
    d.check_rows(data, info.env_ids, info.positions, 2)


def test_gather_all_unequal_sizes_is_an_assertion_error() -> None:
    d = Driver(num_envs=2)
    d.add(envs=[0])
    with pytest.raises(ReplayAssertionError) as exc:
        d.rb.gather_all()
    assert isinstance(exc.value, AssertionError) and isinstance(exc.value, rr.ReplayError)


def test_gather_all_ignore_earliest_frames_and_devices() -> None:
    d = Driver(num_envs=2, max_length=6, num_earliest_frames_ignored=2)
    d.run(5)
    data, info = d.rb.gather_all(ignore_earliest_frames=True)
    assert leaf(data, "reward").shape == (2, 3) and info.positions.tolist() == [2, 2]
    d.check_rows(data, info.env_ids, info.positions, 3)
    data, info = d.rb.gather_all(convert_to_default_device=False)
    assert leaf(data, "reward").device == d.rb.device and info.positions.tolist() == [0, 0]
    assert leaf(data, "reward").device == torch.get_default_device()


def test_gather_all_of_an_empty_buffer() -> None:
    data, info = Driver(num_envs=2).rb.gather_all()
    assert leaf(data, "observation.obs").shape == (2, 0, 2)
    assert info.positions.tolist() == [0, 0]


def test_add_batch_errors() -> None:
    d = Driver(num_envs=2)
    with pytest.raises(rr.FieldError, match="observation"):
        d.rb.add_batch(_one_step()._replace(observation={"obs": torch.zeros(2, 2)}))
    with pytest.raises(rr.ShapeError):  # batch_size must be num_environments without env_ids
        d.rb.add_batch(_one_step())
    with pytest.raises(rr.InvalidIdError):
        d.rb.add_batch(_one_step(), env_ids=torch.tensor([5]))
    assert d.rb.total_size.item() == 0


def test_last_steps_end_episodes_terminated_or_truncated_by_discount() -> None:
    d = Driver(num_envs=2)
    d.add()
    d.add(last=[0, 1], timelimit=[1])  # env 0: discount 0 (terminal); env 1: time limit
    g = d.rb.core.gather_all()
    assert g["terminated"].tolist() == [[False, True], [False, False]]
    assert g["truncated"].tolist() == [[False, False], [False, True]]


# =========================================================================== dequeue, blocking
def test_dequeue_returns_the_earliest_steps_and_removes_them() -> None:
    d = Driver(num_envs=3, max_length=6)
    d.run(4)
    out = d.rb.dequeue(n=2)
    assert leaf(out, "observation.obs").shape == (3, 2, 2)
    d.check_rows(out, torch.arange(3), torch.zeros(3, dtype=torch.int64), 2)
    assert d.rb.total_size.item() == 6
    out = d.rb.dequeue(env_ids=torch.tensor([2, 0]), n=1)
    d.check_rows(out, torch.tensor([2, 0]), torch.tensor([2, 2]), 1)
    with pytest.raises(AssertionError, match="not enough data"):
        d.rb.dequeue(env_ids=torch.tensor([0]), n=2)
    assert leaf(d.rb.dequeue(env_ids=torch.tensor([0])), "observation.obs").tolist() == [
        [[0.0, 3.0]]
    ]


def test_blocking_dequeue_waits_for_data() -> None:
    d = Driver(num_envs=2)
    got: list[Any] = []
    th = threading.Thread(target=lambda: got.append(d.rb.dequeue(n=2, blocking=True)))
    th.start()
    time.sleep(0.05)
    assert th.is_alive()
    d.run(2)
    th.join(JOIN)
    assert not th.is_alive()
    d.check_rows(got[0], torch.arange(2), torch.zeros(2, dtype=torch.int64), 2)


def test_blocking_dequeue_timeout_and_stop() -> None:
    d = Driver(num_envs=1)
    with pytest.raises(TimeoutError):
        d.rb.dequeue(blocking=True, timeout=0.05)
    got: list[Any] = []
    th = threading.Thread(target=lambda: got.append(d.rb.dequeue(blocking=True)))
    th.start()
    time.sleep(0.05)
    d.rb.stop()
    th.join(JOIN)
    assert not th.is_alive() and got == [None]
    # ALF's stop only ends blocking calls (see test_alf_dropin.py for stop/revive).
    assert d.rb.dequeue(blocking=True) is None
    with pytest.raises(AssertionError):
        d.rb.dequeue()  # non-blocking: ALF's "not enough data" assertion


def test_blocking_add_waits_for_room_then_stop_returns_without_adding() -> None:
    d = Driver(num_envs=2, max_length=2)
    d.run(2)
    with pytest.raises(TimeoutError):
        d.add(blocking=True, timeout=0.05)
    assert d.rb.total_size.item() == 4  # nothing was added
    done = threading.Event()

    def producer() -> None:
        d.add(blocking=True)
        done.set()

    th = threading.Thread(target=producer)
    th.start()
    time.sleep(0.05)
    assert not done.is_set()
    first = d.rb.dequeue(n=1)  # frees a slot in every env: the producer goes on
    th.join(JOIN)
    assert done.is_set()
    d.check_rows(first, torch.arange(2), torch.zeros(2, dtype=torch.int64), 1)
    data, info = d.rb.gather_all()
    assert info.positions.tolist() == [1, 1]
    d.check_rows(data, info.env_ids, info.positions, 2)
    # Full again: a blocked add returns (adding nothing) when the buffer is stopped.
    th = threading.Thread(target=lambda: d.rb.add_batch(_two_steps(), blocking=True))
    th.start()
    time.sleep(0.05)
    d.rb.stop()
    th.join(JOIN)
    assert not th.is_alive()


def _two_steps() -> Exp:
    """One MID step of each of two envs."""
    return Exp(
        step_type=torch.tensor([StepType.MID] * 2, dtype=torch.int32),
        reward=torch.zeros(2),
        discount=torch.ones(2),
        observation={"obs": torch.zeros(2, 2), "image": torch.zeros(2, 3, dtype=torch.uint8)},
        env_id=torch.tensor([0, 1]),
    )


# =========================================================================== get_batch (uniform)
def test_get_batch_shapes_order_and_rows() -> None:
    torch.manual_seed(0)
    d = Driver(num_envs=3, max_length=7)
    d.run(10, episode_len=3)
    batch, info = d.rb.get_batch(batch_size=8, batch_length=3)
    assert leaf(batch, "observation.obs").shape == (8, 3, 2)
    assert (
        leaf(batch, "step_type").shape == (8, 3) and leaf(batch, "step_type").dtype == torch.int32
    )
    assert info.env_ids.shape == info.positions.shape == (8,)
    assert info.env_ids.dtype == info.positions.dtype == torch.int64
    assert info.importance_weights == () and info.discounted_return == ()
    assert info.replay_buffer is d.rb
    assert (torch.diff(info.env_ids) >= 0).all(), "envs come ordered"
    for e, p in starts_of(info):
        assert d.head[e] <= p <= len(d.hist[e]) - 3
    d.check_rows(batch, info.env_ids, info.positions, 3)
    assert leaf(batch, "reward").device == torch.get_default_device()


def test_get_batch_rows_equal_core_get_sequences() -> None:
    torch.manual_seed(1)
    d = Driver(num_envs=2, max_length=9)
    d.run(15, episode_len=4)
    batch, info = d.rb.get_batch(6, 4)
    ids = (info.positions * 2 + info.env_ids).numpy()
    seq = d.rb.core.get_sequences(ids, 4, within_episode=False)
    assert seq.mask.all()
    for path, name in d.rb.field_names.items():
        np.testing.assert_array_equal(leaf(batch, path).numpy(), seq[name], err_msg=path)


def test_get_batch_balances_envs_exactly() -> None:
    torch.manual_seed(2)
    d = Driver(num_envs=4, max_length=12)
    d.run(12)
    extra_envs = collections.Counter()
    for _ in range(50):
        _, info = d.rb.get_batch(10, 2)  # 10 = 2 * 4 + 2
        counts = np.bincount(info.env_ids.numpy(), minlength=4)
        assert sorted(counts.tolist()) == [2, 2, 3, 3]
        extra_envs.update(np.flatnonzero(counts == 3).tolist())
    assert set(extra_envs) == {0, 1, 2, 3}  # the extra draws go to random envs


def test_get_batch_without_replacement_has_no_duplicates() -> None:
    torch.manual_seed(3)
    d = Driver(num_envs=2, max_length=6)
    d.run(6)
    for _ in range(20):  # 5 starts per env, 10 draws: every start exactly once
        _, info = d.rb.get_batch(10, 2)
        assert sorted(starts_of(info)) == [(e, p) for e in range(2) for p in range(5)]


def test_get_batch_with_replacement_repeats() -> None:
    torch.manual_seed(4)
    d = Driver(num_envs=1, max_length=6, with_replacement=True)
    d.run(3)
    _, info = d.rb.get_batch(20, 2)  # 2 starts, 20 draws
    assert set(starts_of(info)) == {(0, 0), (0, 1)}


def test_get_batch_uniform_law() -> None:
    torch.manual_seed(5)
    d = Driver(num_envs=2, max_length=8, with_replacement=True)
    d.run(11)  # positions 3..10 stored; starts 3..9 for L = 2
    seen = collections.Counter()
    for _ in range(300):
        _, info = d.rb.get_batch(4, 2)
        seen.update(starts_of(info))
    starts = [(e, p) for e in range(2) for p in range(3, 10)]
    assert set(seen) == set(starts)
    assert chisquare([seen[s] for s in starts]).pvalue > P_CHI


def test_get_batch_needs_data_in_every_env() -> None:
    d = Driver(num_envs=2)
    d.add(envs=[0])
    d.add(envs=[0])
    d.add(envs=[1])
    with pytest.raises(AssertionError, match="Not all environments has enough data"):
        d.rb.get_batch(2, 2)
    d.add(envs=[1])
    d.rb.get_batch(2, 2)


def test_num_earliest_frames_ignored_skips_starts() -> None:
    torch.manual_seed(6)
    d = Driver(num_envs=2, max_length=6, num_earliest_frames_ignored=2, with_replacement=True)
    d.run(4)
    with pytest.raises(AssertionError, match="batch_length \\+ num_earliest_frames_ignored = 5"):
        d.rb.get_batch(2, 3)
    d.run(4)  # 8 steps: positions 2..7 stored, starts from 4 (2 ignored) to 6 (L = 2)
    seen = set()
    for _ in range(40):
        _, info = d.rb.get_batch(4, 2)
        seen.update(starts_of(info))
    assert seen == {(e, p) for e in range(2) for p in (4, 5, 6)}


def test_recent_data_ratio_draws_recent_starts() -> None:
    torch.manual_seed(7)
    d = Driver(num_envs=2, max_length=20, recent_data_ratio=0.5, recent_data_steps=1,
               with_replacement=True)  # fmt: skip
    d.run(20)
    for _ in range(20):
        _, info = d.rb.get_batch(8, 3)
        newest = sum(p == 17 for _, p in starts_of(info))  # the newest start of each env
        assert newest >= 4  # ceil(0.5 * 8) recent draws, balanced over the envs


def test_recent_data_steps_law() -> None:
    torch.manual_seed(8)
    d = Driver(num_envs=2, max_length=30, recent_data_ratio=1.0, recent_data_steps=3,
               with_replacement=True)  # fmt: skip
    d.run(30)
    seen = collections.Counter()
    for _ in range(100):
        _, info = d.rb.get_batch(6, 2)
        seen.update(starts_of(info))
    recent = [(e, p) for e in range(2) for p in (26, 27, 28)]
    assert set(seen) == set(recent)
    assert chisquare([seen[s] for s in recent]).pvalue > P_CHI


def test_torch_manual_seed_makes_batches_repeatable() -> None:
    def run() -> list[tuple[int, int]]:
        torch.manual_seed(42)
        d = Driver(num_envs=2, max_length=10)
        d.run(10)
        return starts_of(d.rb.get_batch(5, 2)[1]) + starts_of(d.rb.get_batch(5, 2)[1])

    assert run() == run()


# =========================================================================== prioritized
def prioritized(num_envs: int = 2, max_length: int = 10, **kw: Any) -> Driver:
    return Driver(num_envs, max_length, prioritized_sampling=True, **kw)


@pytest.mark.parametrize("ignored", [0, 2])
def test_prioritized_frequencies_follow_priorities_and_weights_are_n_p(ignored: int) -> None:
    torch.manual_seed(9)
    d = prioritized(num_earliest_frames_ignored=ignored)
    d.run(9)  # positions 0..8; starts for L = 3: ignored..6
    every = [(e, p) for e in range(2) for p in range(9)]
    prio = {s: float(1 + (3 * s[0] + s[1]) % 4) for s in every}
    prio[(1, 4)] = 0.0  # never drawn
    for s in every:
        if not ignored <= s[1] <= 6:
            prio[s] = 50.0  # no possible start: a large priority must not matter
    env = torch.tensor([s[0] for s in every])
    pos = torch.tensor([s[1] for s in every])
    d.rb.update_priority(env, pos, torch.tensor([prio[s] for s in every]))
    starts = [s for s in every if ignored <= s[1] <= 6]
    nonzero = [prio[s] for s in starts if prio[s] > 0]
    mean = sum(nonzero) / len(nonzero)
    seen = collections.Counter()
    for _ in range(200):
        batch, info = d.rb.get_batch(8, 3)
        d.check_rows(batch, info.env_ids, info.positions, 3)
        assert (torch.diff(info.env_ids) >= 0).all()
        expected = [prio[s] / mean for s in starts_of(info)]
        np.testing.assert_allclose(info.importance_weights.numpy(), expected, rtol=1e-6)
        seen.update(starts_of(info))
    assert set(seen) <= set(starts) and seen[(1, 4)] == 0
    drawn = [s for s in starts if prio[s] > 0]
    total = sum(seen.values())
    f_exp = [total * prio[s] / sum(nonzero) for s in drawn]
    assert chisquare([seen[s] for s in drawn], f_exp).pvalue > P_CHI


def test_importance_weights_agree_with_core_probabilities() -> None:
    """N * P(i) with P(i) the core's probability of the start and N the non-zero count."""
    torch.manual_seed(10)
    d = prioritized(num_envs=3)
    d.run(8)
    env = torch.arange(3).repeat_interleave(7)
    pos = torch.arange(7).repeat(3)
    d.rb.update_priority(env, pos, (pos % 3).float() * 1.5)
    core_batch = d.rb.core.sample_sequences(16, 2, within_episode=False, pad=False)
    _, info = d.rb.get_batch(16, 2)
    n = int((pos % 3 != 0).sum())  # starts with a non-zero priority
    p_of = dict(zip(core_batch.ids.tolist(), core_batch.probabilities.tolist(), strict=True))
    ids = (info.positions * 3 + info.env_ids).tolist()
    for i, w in zip(ids, info.importance_weights.tolist(), strict=True):
        if i in p_of:
            assert w == pytest.approx(n * p_of[i], rel=1e-6)
    assert set(ids) & set(p_of), "the two draws share some starts"
    mean_nonzero = float(((pos % 3) * 1.5)[pos % 3 != 0].float().mean())
    prio = d.rb.core.get_priorities(np.array(ids))
    np.testing.assert_allclose(info.importance_weights.numpy(), prio / mean_nonzero, rtol=1e-6)


def test_new_steps_get_max_of_initial_and_current_largest_priority() -> None:
    d = prioritized(num_envs=1, initial_priority=2.0)
    d.add()
    assert d.rb.initial_priority.item() == 2.0
    assert d.rb.core.get_priorities(np.array([0])).tolist() == [2.0]
    d.rb.update_priority(torch.tensor([0]), torch.tensor([0]), torch.tensor([5.0]))
    assert d.rb.initial_priority.item() == 5.0
    d.add()
    assert d.rb.core.get_priorities(np.array([1])).tolist() == [5.0]
    # Lowering every priority lowers the current maximum (the core alone would keep 5).
    d.rb.update_priority(torch.tensor([0, 0]), torch.tensor([0, 1]), torch.tensor([1.0, 3.0]))
    assert d.rb.initial_priority.item() == 3.0
    d.add()
    assert d.rb.core.get_priorities(np.array([2])).tolist() == [3.0]
    assert d.rb.initial_priority.dtype == torch.float32


def test_prioritized_errors() -> None:
    d = prioritized()
    with pytest.raises(AssertionError, match="no data in the buffer"):
        d.rb.get_batch(2, 1)
    d.run(3)
    d.rb.update_priority(torch.tensor([0, 1]), torch.tensor([0, 0]), torch.tensor([0.0, 0.0]))
    d.rb.update_priority(torch.tensor([0, 1]), torch.tensor([1, 1]), torch.tensor([0.0, 0.0]))
    with pytest.raises(AssertionError, match="valid priority"):
        d.rb.get_batch(2, 2)
    with pytest.raises(ValueError):
        d.rb.update_priority(torch.tensor([0]), torch.tensor([0]), torch.tensor([-1.0]))
    with pytest.raises(rr.ShapeError):
        d.rb.update_priority(torch.tensor([0]), torch.tensor([0]), torch.tensor([1.0, 2.0]))
    plain = Driver()
    with pytest.raises(AssertionError, match="prioritized_sampling"):
        plain.rb.update_priority(torch.tensor([0]), torch.tensor([0]), torch.tensor([1.0]))


def test_update_priority_of_overwritten_steps_is_ignored() -> None:
    d = prioritized(num_envs=1, max_length=3)
    d.run(5)  # positions 2..4 stored
    d.rb.update_priority(torch.tensor([0, 0]), torch.tensor([0, 3]), torch.tensor([9.0, 4.0]))
    assert d.rb.initial_priority.item() == 4.0
    assert d.rb.core.get_priorities(np.array([3])).tolist() == [4.0]


def test_prioritized_with_ignored_frames_and_recent_data() -> None:
    torch.manual_seed(11)
    d = prioritized(num_envs=2, max_length=12, num_earliest_frames_ignored=3,
                    recent_data_ratio=0.25, recent_data_steps=1)  # fmt: skip
    d.run(12)
    # Give the ignored frames nearly all the mass: they must still never be starts.
    env = torch.arange(2).repeat_interleave(3)
    pos = torch.arange(3).repeat(2)
    d.rb.update_priority(env, pos, torch.full((6,), 1e6))
    for _ in range(10):
        batch, info = d.rb.get_batch(8, 2)
        d.check_rows(batch, info.env_ids, info.positions, 2)
        assert all(p >= 3 for _, p in starts_of(info))
        w = info.importance_weights.numpy()
        recent = info.positions.numpy() == 10
        assert recent.sum() >= 2 and (w[recent] == 1.0).any()
    # Eligible starts: 3..10 of each env, priority 1 each, so N * P(i) = 1 for all.
    np.testing.assert_allclose(w, 1.0)


# =========================================================================== get_field
def test_get_field_paths_nests_and_broadcasting() -> None:
    d = Driver(num_envs=2, max_length=6)
    d.run(5)
    env = torch.tensor([0, 1])
    pos = torch.tensor([[1], [3]])  # broadcast to (2, 2)
    obs = d.rb.get_field("observation.obs", env, pos)
    assert obs.shape == (2, 2, 2)
    assert obs[1, 0].tolist() == [0.0, 3.0] and obs[0, 1].tolist() == [1.0, 1.0]
    sub = d.rb.get_field("observation", env, torch.tensor([2, 4]))
    assert set(sub) == {"obs", "image"} and sub["image"].dtype == torch.uint8
    assert sub["image"][:, 0].tolist() == [2, 4]
    named = d.rb.get_field({"r": "reward", "s": ["step_type", "env_id"]}, env, torch.tensor(2))
    assert named["r"].tolist() == [d.value(0, 2, "reward"), d.value(1, 2, "reward")]
    assert named["s"][1].tolist() == [0, 1]


def test_get_field_errors() -> None:
    d = Driver(num_envs=1, max_length=3)
    d.run(5)
    with pytest.raises(KeyError, match="nope"):
        d.rb.get_field("observation.nope", torch.tensor([0]), torch.tensor([3]))
    with pytest.raises(rr.InvalidIdError, match="overwritten"):
        d.rb.get_field("reward", torch.tensor([0]), torch.tensor([1]))
    with pytest.raises(rr.InvalidIdError):
        d.rb.get_field("reward", torch.tensor([0]), torch.tensor([5]))
    with pytest.raises(rr.InvalidIdError):
        d.rb.get_field("reward", torch.tensor([3]), torch.tensor([4]))


# =========================================================================== episodic queries
def test_steps_to_episode_end_and_episode_begin() -> None:
    d = Driver(num_envs=2, max_length=9)
    d.run(14, episode_len=4)  # env 0: episodes of 4 steps, env 1: of 5 steps
    for e in range(2):
        pos = torch.tensor(list(d.stored(e)))
        env = torch.full_like(pos, e)
        got = d.rb.steps_to_episode_end(pos, env).tolist()
        assert got == [d.steps_to_end(e, p) for p in d.stored(e)]
        begin = d.rb.get_episode_begin_position(pos, env).tolist()
        assert begin == [d.episode_begin(e, p) for p in d.stored(e)]
    # A begin may be overwritten already: env 0 stores 5..13, its episode from 4 is cut.
    assert d.rb.get_episode_begin_position(torch.tensor([5]), torch.tensor([0])).tolist() == [4]
    # The running episode (from 12) ends, for now, at the newest step.
    assert d.rb.steps_to_episode_end(torch.tensor([12, 13]), torch.tensor(0)).tolist() == [1, 0]


def test_get_disc_0_begin_position() -> None:
    d = Driver(num_envs=1, max_length=12)
    d.run(2)
    d.add(last=[0])  # terminal: discount 0 at 2
    d.run(2)
    d.add(last=[0], timelimit=[0])  # time limit at 5: discount 1, the segment goes on
    d.run(3)
    pos = torch.tensor(list(d.stored(0)))
    got = d.rb.get_disc_0_begin_position(pos, torch.tensor(0)).tolist()
    assert got == [d.disc0_begin(0, p) for p in d.stored(0)]
    assert got == [0, 0, 0, 3, 3, 3, 3, 3, 3]
    no_discount = ReplayBuffer({"step_type": TensorSpec((), torch.int32)}, 1,
                               keep_episodic_info=True)  # fmt: skip
    with pytest.raises(KeyError, match="discount"):
        no_discount.get_disc_0_begin_position(torch.tensor([0]), torch.tensor([0]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.booleans()), max_size=40))
def test_episodic_queries_against_reference(ops: list[tuple[int, bool, bool]]) -> None:
    """Random steps of random envs (some LAST, some time limits) vs the reference."""
    d = Driver(num_envs=3, max_length=5, record_episodic_return=True, gamma=0.5)
    for env, last, timeout in ops:
        d.add(envs=[env], last=[env] if last else [], timelimit=[env] if timeout else [])
    for e in range(3):
        if not d.stored(e):
            continue
        pos = torch.tensor(list(d.stored(e)))
        env = torch.full_like(pos, e)
        assert d.rb.steps_to_episode_end(pos, env).tolist() == [
            d.steps_to_end(e, p) for p in d.stored(e)
        ]
        assert d.rb.get_episode_begin_position(pos, env).tolist() == [
            d.episode_begin(e, p) for p in d.stored(e)
        ]
        assert d.rb.get_disc_0_begin_position(pos, env).tolist() == [
            d.disc0_begin(e, p) for p in d.stored(e)
        ]
        for path in LEAVES:
            got = d.rb.get_field(path, env, pos).numpy()
            np.testing.assert_array_equal(got, [d.value(e, p, path) for p in d.stored(e)])
    sizes = {len(d.stored(e)) for e in range(3)}
    if len(sizes) == 1:
        data, info = d.rb.gather_all()
        d.check_rows(data, info.env_ids, info.positions, sizes.pop())
        want = [[d.ret(e, p, 0.5) for p in d.stored(e)] for e in range(3)]
        np.testing.assert_array_equal(info.discounted_return.numpy(), np.array(want, np.float32))


# =========================================================================== episodic returns
def test_record_episodic_return_in_get_batch_and_gather_all() -> None:
    torch.manual_seed(12)
    d = Driver(num_envs=2, max_length=12, record_episodic_return=True, gamma=0.5,
               reward_clip=(0.0, 1.0), default_return=-7.0, with_replacement=True)  # fmt: skip
    d.run(11, episode_len=4)
    _, info = d.rb.gather_all()
    want = [[d.ret(e, p, 0.5, (0.0, 1.0), -7.0) for p in d.stored(e)] for e in range(2)]
    np.testing.assert_array_equal(info.discounted_return.numpy(), np.array(want, np.float32))
    assert info.discounted_return.dtype == torch.float32
    assert -7.0 in want[0] and 0.0 in want[0]  # running episodes and LAST steps both appear
    for _ in range(5):
        _, info = d.rb.get_batch(6, 3)
        assert info.discounted_return.shape == (6, 3)
        for i, (e, p) in enumerate(starts_of(info)):
            row = [d.ret(e, p + j, 0.5, (0.0, 1.0), -7.0) for j in range(3)]
            np.testing.assert_array_equal(info.discounted_return[i].numpy(), row)


def test_record_episodic_return_example_values() -> None:
    """Rewards 0, 0.5, 1, 1.5 at positions 0..3 with LAST at 3, gamma 0.5."""
    d = Driver(num_envs=1, max_length=8, record_episodic_return=True, gamma=0.5)
    d.run(3)
    d.add(last=[0])
    d.add()
    _, info = d.rb.gather_all()
    # G_0 = 0.5 + 0.5 * 1 + 0.25 * 1.5; G_1 = 1 + 0.5 * 1.5; G_2 = 1.5; LAST: 0; running: default
    assert info.discounted_return.tolist() == [[1.375, 1.75, 1.5, 0.0, -1000.0]]


def test_record_episodic_return_needs_a_scalar_reward() -> None:
    spec = {"step_type": TensorSpec((), torch.int32), "reward": TensorSpec((2,))}
    with pytest.raises(rr.ConfigError, match="scalar reward"):
        ReplayBuffer(spec, 1, record_episodic_return=True)


# =========================================================================== clear, state
def test_clear_all_or_some_envs() -> None:
    d = Driver(num_envs=2, max_length=6)
    d.run(3)
    d.rb.clear(env_ids=torch.tensor([1]))
    assert d.rb.total_size.item() == 3
    d.rb.clear()
    assert d.rb.total_size.item() == 0
    d.run(1)  # positions keep counting
    _, info = d.rb.gather_all()
    assert info.positions.tolist() == [3, 3]


def test_state_dict_round_trip_with_enable_checkpoint() -> None:
    torch.manual_seed(13)
    d = prioritized(num_envs=2, max_length=6, enable_checkpoint=True,
                    record_episodic_return=True)  # fmt: skip
    d.run(9, episode_len=3)
    d.rb.update_priority(torch.tensor([0, 1]), torch.tensor([4, 5]), torch.tensor([3.0, 0.5]))
    state = d.rb.state_dict()
    twin = ReplayBuffer(SPEC, 2, max_length=6, prioritized_sampling=True,
                        enable_checkpoint=True, record_episodic_return=True)  # fmt: skip
    twin.load_state_dict(state)
    for _ in range(3):
        a, ia = d.rb.get_batch(5, 2)
        b, ib = twin.get_batch(5, 2)
        assert starts_of(ia) == starts_of(ib)
        assert torch.equal(ia.importance_weights, ib.importance_weights)
        assert torch.equal(leaf(a, "observation.obs"), leaf(b, "observation.obs"))
    assert twin.initial_priority.item() == 3.0
    pos = torch.tensor([5, 6, 7, 8])
    assert torch.equal(twin.get_disc_0_begin_position(pos, torch.tensor(0)),
                       d.rb.get_disc_0_begin_position(pos, torch.tensor(0)))  # fmt: skip
    off = ReplayBuffer(SPEC, 2, max_length=6)
    assert off.state_dict()["_extra_state"] == {}


# =========================================================================== segment trees
def test_sum_segment_tree_basics() -> None:
    tree = SumSegmentTree(5)
    assert tree.summary().item() == 0.0 and tree.nnz.item() == 0
    tree[torch.tensor([0, 2, 4])] = torch.tensor([1.0, 2.0, 3.0])
    assert tree.summary().item() == 6.0 and tree.summary().dtype == torch.float32
    assert tree[torch.tensor([0, 1, 2, 3, 4])].tolist() == [1.0, 0.0, 2.0, 0.0, 3.0]
    assert tree[torch.tensor([[4], [2]])].shape == (2, 1)
    assert tree.nnz.item() == 3 and tree.nnz.dtype == torch.int64
    tree[torch.tensor([2, 1, 1])] = torch.tensor([0.0, 5.0, 0.0])  # duplicates: the last wins
    assert tree.nnz.item() == 2 and tree.summary().item() == 4.0


def test_find_sum_bound_semantics_and_edges() -> None:
    tree = SumSegmentTree(6)
    tree[torch.tensor([1, 2, 4])] = torch.tensor([1.0, 2.0, 3.0])  # prefix sums 0 1 3 3 6 6
    th = torch.tensor([0.0, 0.5, 1.0, 2.9, 3.0, 5.9])
    assert tree.find_sum_bound(th).tolist() == [1, 1, 2, 2, 4, 4]  # strict <, zeros skipped
    # threshold == summary: the non-zero value with the largest index
    assert tree.find_sum_bound(torch.tensor([6.0])).tolist() == [4]
    assert tree.find_sum_bound(tree.summary().reshape(1)).dtype == torch.int64
    with pytest.raises(ValueError, match="summary"):
        tree.find_sum_bound(torch.tensor([1.0, 6.5]))
    with pytest.raises(ValueError):
        tree.find_sum_bound(torch.tensor([-1.0]))
    with pytest.raises(ValueError):
        SumSegmentTree(3).find_sum_bound(torch.tensor([0.0]))


def test_find_sum_bound_with_float32_summary() -> None:
    """A threshold equal to the float32 summary counts as == root, whatever the rounding."""
    tree = SumSegmentTree(3)
    tree[torch.tensor([0, 1, 2])] = torch.tensor([0.1, 0.2, 0.3])
    s = tree.summary()
    assert tree.find_sum_bound(s.reshape(1)).tolist() == [2]
    tree[torch.tensor([2])] = torch.tensor([0.0])
    assert tree.find_sum_bound(tree.summary().reshape(1)).tolist() == [1]


def test_min_and_max_segment_trees_start_at_zero() -> None:
    mn, mx = MinSegmentTree(4), MaxSegmentTree(4)
    assert mn.summary().item() == 0.0 and mx.summary().item() == 0.0
    mn[torch.arange(3)] = torch.tensor([3.0, 1.0, 2.0])
    assert mn.summary().item() == 0.0  # leaf 3 is still 0, as in ALF
    mn[torch.tensor([3])] = torch.tensor([5.0])
    assert mn.summary().item() == 1.0
    mx[torch.tensor([0, 1])] = torch.tensor([-3.0, -1.0])
    assert mx.summary().item() == 0.0
    mx[torch.tensor([2])] = torch.tensor([4.0])
    assert mx.summary().item() == 4.0 and mx.nnz.item() == 3


def test_segment_tree_generic_op_dtype_and_errors() -> None:
    tree = SegmentTree(3, torch.max, dtype=torch.float64, name="t")
    tree[torch.tensor([1])] = torch.tensor([0.1], dtype=torch.float64)
    assert tree.summary().dtype == torch.float64 and tree.summary().item() == 0.1
    assert tree.name == "t" and tree.capacity == 3
    rounded = SumSegmentTree(2)
    rounded[torch.tensor([0])] = torch.tensor([0.1], dtype=torch.float64)
    assert rounded[torch.tensor([0])].item() == np.float32(0.1)  # stored as ALF stores it
    with pytest.raises(rr.ConfigError, match="op"):
        SegmentTree(3, "mul")  # not a function (any function works: see test_alf_dropin.py)
    with pytest.raises(ValueError):
        tree[torch.tensor([3])] = torch.tensor([1.0])
    with pytest.raises(TypeError):
        tree[torch.tensor([0.5])]
    with pytest.raises(ValueError):
        SumSegmentTree(3)[torch.tensor([0])] = torch.tensor([-1.0])


def test_segment_tree_state_dict_round_trip() -> None:
    tree = SumSegmentTree(4)
    tree[torch.tensor([0, 3])] = torch.tensor([2.0, 5.0])
    other = SumSegmentTree(4)
    other.load_state_dict(tree.state_dict())
    assert other.summary().item() == 7.0 and other.nnz.item() == 2


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 17),
    st.lists(st.tuples(st.integers(0, 16), st.integers(0, 8)), max_size=30),
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8),
)
def test_segment_trees_agree_with_core_trees_and_brute_force(
    capacity: int, sets: list[tuple[int, int]], fractions: list[float]
) -> None:
    trees = (SumSegmentTree(capacity), MinSegmentTree(capacity), MaxSegmentTree(capacity))
    core = (rr.SumTree(capacity), rr.MinTree(capacity), rr.MaxTree(capacity))
    for c in core[1:]:
        c.set(np.arange(capacity), 0.0)
    values = np.zeros(capacity)
    for i, v in sets:
        i %= capacity
        values[i] = v / 2
        for t in trees:
            t[torch.tensor([i])] = torch.tensor([v / 2])
        for c in core:
            c.set([i], v / 2)
    assert trees[0].summary().item() == core[0].total == values.sum()
    assert trees[1].summary().item() == core[1].min == values.min()
    assert trees[2].summary().item() == core[2].max == values.max()
    assert trees[0].nnz.item() == np.count_nonzero(values)
    if values.sum() > 0:
        th = np.array(fractions) * values.sum()
        got = trees[0].find_sum_bound(torch.from_numpy(th)).tolist()
        assert got == core[0].find_prefix_sum(th).tolist()
        cum = np.cumsum(values)
        for x, k in zip(th.tolist(), got, strict=True):
            above = np.flatnonzero(cum > x)
            want = int(above[0]) if x < cum[-1] else int(np.flatnonzero(values)[-1])
            assert k == want and values[k] > 0
