"""ALF's replay buffer and segment trees front-end: seed behaviour, a reference, core agreement.

Every step names itself: the leaf ``observation.obs`` of step ``pos`` of env ``e`` is
``[e, pos]``, so a sampled row can be checked against the history of everything added
(:class:`Driver` keeps it, with ALF's episode rules: LAST ends an episode, the next step is
FIRST).
This file holds that reference and the tests of specs, construction, ``add_batch``,
``gather_all`` and ``dequeue``; ``test_alf_sampling``, ``test_alf_episodic`` and
``test_alf_trees`` import it for ``get_batch``, the episodic queries and the segment trees.
"""

from __future__ import annotations

import collections
import multiprocessing
import pickle
import threading
import time
from typing import Any

import numpy as np
import pytest
import torch

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

    def step(self, e: int, last: bool, timelimit: bool, first: bool = False) -> dict[str, Any]:
        h = self.hist[e]
        t = len(h)
        first = first or t == 0 or h[-1]["step_type"] == StepType.LAST
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
        first: Any = (),
        **kw: Any,
    ) -> None:
        """One step of ``envs``: LAST for ``last``, FIRST for ``first`` (even after a MID)."""
        envs_l = list(range(self.E)) if envs is None else list(envs)
        rows = [self.step(e, e in last, e in timelimit, e in first) for e in envs_l]

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

    def is_first(self, e: int, t: int) -> bool:
        return bool(self.hist[e][t]["step_type"] == StepType.FIRST)

    # ALF indexes episodes by their FIRST steps (seed: "We build an index of episode beginning
    # indices for each element in the buffer. The beginning point stores where episode end
    # is."): a FIRST begins an episode even after a MID, which then ends the one before.
    def steps_to_end(self, e: int, t: int) -> int:
        # ALF's end of an episode is its newest step (seed: "The beginning point stores where
        # episode end is"): the step before the next FIRST, else the env's newest step. A
        # LAST that a step other than FIRST follows does not end the episode.
        h = self.hist[e]
        for j in range(t + 1, len(h)):
            if self.is_first(e, j):
                return j - 1 - t
        return len(h) - 1 - t

    def episode_begin(self, e: int, t: int) -> int:
        # seed: "an index of episode beginning indices for each element": the newest FIRST
        for j in range(t, -1, -1):
            if self.is_first(e, j):
                return j
        return 0

    def disc0_begin(self, e: int, t: int) -> int:
        for j in range(t - 1, -1, -1):
            if self.hist[e][j]["discount"] == 0:
                return j + 1
        return 0

    def ret(
        self, e: int, t: int, gamma: float, clip: Any = None, default: float = -1000.0
    ) -> float:
        """ALF's return of step t: the rewards after it, to its episode's LAST step.

        Seed: "computes and stores episodic return for every step in the episode upon episode
        completion ... When episodes are incomplete, all steps get the default_return": an
        episode that a FIRST cut before any LAST never completes.
        """
        # Returns are computed at each LAST for the whole episode (from its FIRST), so a
        # step's return runs to the newest LAST of its episode at or after it.
        end = t + self.steps_to_end(e, t)
        lasts = [j for j in range(t, end + 1) if self.is_last(e, j)]
        if not lasts:
            return default
        end = lasts[-1]
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
    bf16 = TensorSpec((), torch.bfloat16)  # no NumPy counterpart: stored as float32
    assert bf16.dtype == torch.bfloat16 and bf16.numpy_dtype == np.float32
    with pytest.raises(rr.ConfigError, match="numeric"):
        TensorSpec((), torch.quint8)
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
        ({"record_episodic_return": True, "keep_episodic_info": False}, "episode information"),
        ({"max_length": 0}, "max_length"),
        ({"recent_data_ratio": 1.5}, "recent_data_ratio"),
        ({"recent_data_steps": 0}, "recent_data_steps"),
        ({"gamma": 2.0, "record_episodic_return": True}, "gamma"),  # the core computes returns
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


def test_dequeue_of_more_steps_than_max_length_asserts_and_changes_nothing() -> None:
    """More than ``max_length`` steps per env are never there: ALF's assert, not a ValueError."""
    d = Driver(num_envs=2, max_length=1)
    d.run(1)
    with pytest.raises(AssertionError, match="max_length=1"):
        d.rb.dequeue(n=2)
    assert d.rb.total_size.item() == 2


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


# =========================================================================== prioritized
def prioritized(num_envs: int = 2, max_length: int = 10, **kw: Any) -> Driver:
    return Driver(num_envs, max_length, prioritized_sampling=True, **kw)


# =========================================================================== max_length=1
def test_max_length_1_keeps_the_newest_step_of_each_env_as_alf() -> None:
    """ALF accepts ``max_length=1`` (seed: "max_length (int) - maximum number of time steps
    stored in buffer"): each env's ring has one slot, every add overwrites it."""
    for kw in ({}, {"prioritized_sampling": True}, {"record_episodic_return": True}):
        d = Driver(num_envs=2, max_length=1, **kw)
        d.run(5, episode_len=3)
        assert d.rb.total_size.item() == 2
        data, info = d.rb.gather_all()
        assert info.positions.tolist() == [4, 4]
        d.check_rows(data, info.env_ids, info.positions, 1)
        batch, info = d.rb.get_batch(4, 1)
        assert info.positions.tolist() == [4] * 4
        d.check_rows(batch, info.env_ids, info.positions, 1)
        with pytest.raises(AssertionError):  # no sequence of two steps is stored
            d.rb.get_batch(2, 2)
        with pytest.raises(AssertionError, match="enough data"):
            d.rb.dequeue(n=2)
        with pytest.raises(rr.InvalidIdError):
            d.rb.get_field("reward", torch.tensor([0]), torch.tensor([3]))
    d = Driver(num_envs=2, max_length=1)
    d.run(2)
    got = d.rb.dequeue(env_ids=torch.tensor([1]))
    assert got.observation["obs"].tolist() == [[[1.0, 1.0]]]
    assert d.rb.total_size.item() == 1


def test_max_length_1_blocking_add_waits_for_the_one_slot() -> None:
    """Seed: "blocking (bool) - If True, blocks if there is no free slot to add data"."""
    d = Driver(num_envs=1, max_length=1)
    d.add()
    with pytest.raises(rr.ReplayTimeout):
        d.rb.add_batch(_one_step(), blocking=True, timeout=0.05)
    done = threading.Event()

    def add() -> None:
        d.rb.add_batch(_one_step(), blocking=True)
        done.set()

    th = threading.Thread(target=add)
    th.start()
    time.sleep(0.1)
    assert not done.is_set()
    assert d.rb.dequeue().observation["obs"].tolist() == [[[0.0, 0.0]]]
    th.join(JOIN)
    assert done.is_set() and d.rb.total_size.item() == 1
    d.rb.stop()
    assert d.rb.add_batch(_one_step(), blocking=True) is None  # stopped: returns, adds nothing
    assert d.rb.gather_all()[1].positions.tolist() == [1]


# =========================================================================== allow_multiprocess
def _add_in_child(rb: ReplayBuffer, out: Any) -> None:
    try:
        rb.add_batch(_one_step())
        out.put("added")
    except Exception as exc:  # reported to the parent, which fails the test
        out.put(repr(exc))


def test_allow_multiprocess_shares_the_buffer_with_a_forked_child() -> None:
    """ALF accepts ``allow_multiprocess=True`` (seed: "whether multiprocessing is
    supported") and shares the buffer: it works in its own process (threads included), and
    a step a forked child adds is in the parent's buffer (tests/compat/test_alf_multiprocess.py
    has the rest)."""
    d = Driver(num_envs=1, max_length=4, allow_multiprocess=True)
    d.run(3)
    batch, info = d.rb.get_batch(2, 2)
    d.check_rows(batch, info.env_ids, info.positions, 2)
    th = threading.Thread(target=d.add)
    th.start()
    th.join(JOIN)
    assert d.rb.total_size.item() == 4
    assert pickle.loads(pickle.dumps(d.rb)) is d.rb  # in its own process: the buffer itself
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_add_in_child, args=(d.rb, out))
    child.start()
    got = out.get(timeout=JOIN)
    child.join(JOIN)
    assert got == "added" and d.rb.total_size.item() == 4  # max_length 4: the oldest went
    assert d.rb.gather_all()[1].positions.tolist() == [1]
