"""ReAgent front-end as a drop-in replacement (issue 13): what ReAgent accepts, does and raises.

Each test cites the ReAgent behaviour it checks: the seed's documentation
(``/work/shared/seeds/000_*.txt``) or ReAgent's source at that version (its
``circular_replay_buffer.py``, ``prioritized_replay_buffer.py`` and ``sum_tree.py``), and for
the shape-inferring constructor ReAgent's later ``ReplayBuffer``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.compat.reagent import PrioritizedReplayBuffer, ReplayBuffer
from rlreplay.compat.reagent._assembly import c_contiguous, to_torch
from rlreplay.compat.reagent.circular_replay_buffer import ReplayElement
from rlreplay.compat.reagent.sum_tree import SumTree
from tests.compat.test_reagent import RefReAgent, fill, make, obs_of


# ---------------------------------------------------------------------- casting on add
def test_float_frames_into_default_uint8_storage() -> None:
    # ReAgent's _add stores with `self._store[name][cursor] = arg`: NumPy assignment casts
    # np.zeros(shape) (float64) into the default observation_dtype=np.uint8 without a word.
    buf = ReplayBuffer(observation_shape=(3,), stack_size=1, replay_capacity=20, batch_size=2)
    buf.add(np.zeros(3), 0, 1.0, False)
    buf.add(np.array([1.9, 200.2, 7.5]), 1.0, 2, True)  # float frame, float action, int reward
    batch = buf.sample_all_valid_transitions()
    want = np.zeros((2, 3), np.uint8)
    want[0], want[1] = np.zeros(3), np.array([1.9, 200.2, 7.5])
    assert batch.state.dtype == torch.uint8
    np.testing.assert_array_equal(batch.state.numpy(), want)
    assert batch.action.dtype == torch.int32 and batch.action.reshape(-1).tolist() == [0, 1]
    assert batch.reward.dtype == torch.float32 and batch.reward.reshape(-1).tolist() == [1, 2]


def test_float_action_into_int32_is_truncated_as_numpy_assignment() -> None:
    buf = make(update_horizon=1)  # action_dtype=np.int32 (ReAgent's default)
    actions = [1.7, -2.5, np.float64(3.99), True]
    for t, a in enumerate(actions):
        buf.add(obs_of(0, t), a, 0.5, t == len(actions) - 1)
    ref = np.zeros(len(actions), np.int32)
    for i, a in enumerate(actions):
        ref[i] = a  # what ReAgent's int32 action array holds
    got = buf.sample_all_valid_transitions().action.reshape(-1).numpy()
    np.testing.assert_array_equal(got, ref)


def test_extras_and_terminal_are_cast_too() -> None:
    mask = ReplayElement("mask", (2,), np.uint8)
    buf = make(extra_storage_types=[mask])
    buf.add(obs_of(0, 0), 0, 1.0, 0.0, [1.0, 0.0])  # a float terminal, a float list mask
    buf.add(obs_of(0, 1), 0, 1.0, 1, np.array([0.2, 3.7]))
    batch = buf.sample_all_valid_transitions()
    assert batch.mask.dtype == torch.uint8 and batch.mask.tolist() == [[1, 0], [0, 3]]
    assert batch.terminal.reshape(-1).tolist() == [False, True]


def test_shape_mismatch_still_raises_value_error() -> None:
    # ReAgent's _check_add_types: "arg observation has shape (3,), expected (2,)" (ValueError).
    buf = make()
    with pytest.raises(ValueError, match="shape"):
        buf.add(np.zeros(3), 0, 1.0, False)
    with pytest.raises(ValueError, match="shape"):
        buf.add(obs_of(0, 0), np.array([0, 1]), 1.0, False)
    assert buf.add_count == 0


def test_scalar_like_objects_pass_reagents_shape_check() -> None:
    # ReAgent treats anything that is not an ndarray, tuple or list as a scalar ("Assume it is
    # scalar") and assigns it: a one-element tensor action is stored.
    buf = make()
    buf.add(obs_of(0, 0), torch.tensor([2]), torch.tensor(0.5), np.bool_(True))
    batch = buf.sample_all_valid_transitions()
    assert batch.action.reshape(-1).tolist() == [2] and batch.reward.reshape(-1).tolist() == [0.5]


class RefUint8(RefReAgent):
    """ReAgent's ring with its default dtypes: uint8 frames, int32 actions."""

    def __init__(self, cap: int, k: int, n: int, gamma: float) -> None:
        super().__init__(cap, k, n, gamma)
        self.obs = np.zeros((cap, 2), np.uint8)


@settings(max_examples=20, deadline=None)
@given(
    k=st.integers(1, 3),
    n=st.integers(1, 3),
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    frames=st.lists(st.floats(0.0, 255.0), min_size=60, max_size=60),
    actions=st.lists(st.floats(-50.0, 50.0), min_size=60, max_size=60),
)
def test_casts_match_reagents_arrays(
    k: int, n: int, lengths: list[int], frames: list[float], actions: list[float]
) -> None:
    """Random float frames into uint8 and float actions into int32: every valid transition
    equals ReAgent's slot ring (NumPy assignment into preallocated arrays)."""
    cap = 16
    buf = make(
        stack_size=k,
        update_horizon=n,
        replay_capacity=cap,
        observation_dtype=np.uint8,
        extra_storage_types=[ReplayElement("log_prob", (), np.float32)],
    )
    ref = RefUint8(cap, k, n, 0.5)
    i = 0
    for e, length in enumerate(lengths):
        for t in range(length):
            o = np.array([frames[i % 60], frames[(i + 7) % 60]])
            args = (o, actions[i % 60], float(t), t == length - 1, float(e))
            buf.add(*args)
            ref.add(*args)
            i += 1
    assert buf._is_valid.tolist() == ref.valid.tolist()
    batch = buf.sample_all_valid_transitions()
    for row, s in enumerate(batch.indices.reshape(-1).tolist()):
        want = ref.transition(s)
        for name in ("state", "action", "reward", "terminal"):
            got = getattr(batch, name)[row].numpy()
            np.testing.assert_array_equal(got.reshape(np.shape(want[name])), want[name])


# ---------------------------------------------------------------------- exception types
@pytest.mark.parametrize("shape", [[2], np.array([2]), "2", True, 2.0])
def test_non_tuple_observation_shape_asserts(shape: Any) -> None:
    # ReAgent's constructor starts with `assert isinstance(observation_shape, tuple)`; only
    # an int (later versions) is read as a shape too.
    with pytest.raises(AssertionError):
        ReplayBuffer(shape, 1, 100, 4)
    with pytest.raises(rr.ConfigError):
        PrioritizedReplayBuffer(observation_shape=shape, stack_size=1, replay_capacity=100)


def test_constructor_value_errors_as_reagent() -> None:
    # ReAgent: "There is not enough capacity to cover update_horizon and stack_size." and
    # "Pointless to return as timeline format when update_horizon (1) is 1." (ValueError).
    with pytest.raises(ValueError, match="not enough capacity"):
        ReplayBuffer((2,), 4, 5, 1, update_horizon=2)
    with pytest.raises(ValueError, match="Pointless"):
        ReplayBuffer((2,), 1, 100, 1, return_as_timeline_format=True)
    ReplayBuffer((2,), 1, 100, 1, return_as_timeline_format=True, update_horizon=2)


def test_sum_tree_capacity_asserts_int() -> None:
    # Dopamine/ReAgent SumTree: `assert isinstance(capacity, int)`; capacity <= 0: ValueError.
    with pytest.raises(AssertionError):
        SumTree(4.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        SumTree(0)
    assert SumTree(np.int64(4)).capacity == 4


def test_batch_size_differing_from_indices_asserts() -> None:
    # ReAgent's sample_transition_batch: `assert len(indices) == batch_size`.
    buf = make()
    fill(buf, [4])
    with pytest.raises(AssertionError):
        buf.sample_transition_batch(batch_size=3, indices=torch.tensor([0, 1]))


def test_indices_read_as_reagent_reads_them() -> None:
    # ReAgent: `indices = indices.type(dtype=torch.int64)`; the stacks are read modulo
    # replay_capacity, the other elements as _store[name][indices] (IndexError past it).
    buf = make(replay_capacity=50)
    fill(buf, [4])
    by_float = buf.sample_transition_batch(batch_size=2, indices=torch.tensor([1.9, 2.2]))
    by_int = buf.sample_transition_batch(batch_size=2, indices=torch.tensor([1, 2]))
    np.testing.assert_array_equal(by_float.state.numpy(), by_int.state.numpy())
    wrapped = buf.sample_transition_batch(batch_size=2, indices=torch.tensor([-49, -48]))
    np.testing.assert_array_equal(wrapped.state.numpy(), by_int.state.numpy())
    with pytest.raises(IndexError):
        buf.sample_transition_batch(batch_size=2, indices=torch.tensor([51, 52]))


# ---------------------------------------------------------------------- priorities
@pytest.mark.parametrize(
    "as_indices",
    [
        lambda s: np.array(s, np.int32),  # ReAgent's documented "np.array with dtype int32"
        lambda s: torch.tensor(s),  # what sample_index_batch returns
        lambda s: torch.tensor(s, dtype=torch.int32),
        list,
    ],
)
def test_priorities_accept_int32_arrays_and_integer_tensors(as_indices: Any) -> None:
    buf = make(PrioritizedReplayBuffer)
    fill(buf, [4])  # priorities 1..4 in slots 0..3
    idx = as_indices([0, 1, 2, 3])
    assert buf.get_priority(idx).tolist() == [1, 2, 3, 4]
    buf.set_priority(idx, [4.0, 3.0, 2.0, 1.0])
    assert buf.get_priority(as_indices([3, 0])).tolist() == [1, 4]
    sampled = buf.sample_index_batch(8)
    buf.set_priority(sampled, np.ones(8))
    assert buf.get_priority(sampled).tolist() == [1.0] * 8


def test_priority_indices_errors() -> None:
    # ReAgent asserts integer indices (AssertionError); an index past its leaf array is an
    # IndexError.
    buf = make(PrioritizedReplayBuffer)
    fill(buf, [4])
    with pytest.raises(AssertionError, match="int32s, given: float64"):
        buf.get_priority(np.array([0.0, 1.0]))
    with pytest.raises(AssertionError):
        buf.set_priority(np.array([0.5]), [1.0])
    with pytest.raises(IndexError):  # capacity 50: ReAgent's tree has 64 leaves
        buf.get_priority(np.array([64], np.int32))
    with pytest.raises(IndexError):
        buf.get_priority(np.array([-65], np.int32))


# ---------------------------------------------------------------------- shapes of results
def test_everything_as_stack_terminal_is_unstacked() -> None:
    # ReAgent: terminal = store["terminal"][next_indices - 1], (B,) -> (B, 1); its
    # get_transition_elements declares ReplayElement("terminal", (batch_size,), uint8).
    buf = make(stack_size=3, return_everything_as_stack=True, batch_size=5)
    fill(buf, [4, 3])
    specs = {e.name: e for e in buf.get_transition_elements()}
    assert specs["terminal"].shape == (5,) and specs["terminal"].type == np.uint8
    assert specs["step"].shape == (5,)
    # reagent 0.1's get_transition_elements stacks only the states in its declaration.
    assert specs["action"].shape == (5,) and specs["state"].shape == (5, 2, 3)
    assert specs["indices"].type == np.int32
    batch = buf.sample_transition_batch()
    assert batch.terminal.shape == (5, 1) and batch.terminal.dtype == torch.bool
    assert batch.step.shape == (5, 1) and batch.action.shape == (5, 3)


def test_step_is_the_window_length() -> None:
    # ReAgent's _get_steps: the number of steps until a terminal or update_horizon.
    buf = make(update_horizon=3)
    fill(buf, [4, 2])  # slots 0..3 episode 0, 4..5 episode 1
    batch = buf.sample_all_valid_transitions()
    assert batch.indices.reshape(-1).tolist() == [0, 1, 2, 3, 4, 5]
    assert batch.step.reshape(-1).tolist() == [3, 3, 2, 1, 2, 1]
    assert batch.step.dtype == torch.int64
    timeline = make(update_horizon=3, return_as_timeline_format=True)
    fill(timeline, [4])
    steps = timeline.sample_all_valid_transitions().step.reshape(-1).tolist()
    assert steps == [3, 3, 2, 1]


def test_step_agrees_with_the_native_core() -> None:
    buf = make(update_horizon=3, replay_capacity=40)
    fill(buf, [5, 2, 6])
    core = rr.ReplayBuffer(40, {"obs": rr.Field((2,), np.float32)}, n_step=3, gamma=0.5)
    for e, n in enumerate([5, 2, 6]):
        for t in range(n):
            done = t == n - 1
            core.add(
                obs=obs_of(e, t),
                reward=float(t + 1),
                terminated=done,
                truncated=False,
                **({"next_obs": np.zeros(2, np.float32)} if done else {}),
            )
    batch = buf.sample_transition_batch(batch_size=32)
    native = core.get_transitions(buf._slot_id[batch.indices.reshape(-1).numpy()])
    np.testing.assert_array_equal(batch.step.reshape(-1).numpy(), native.steps)
    np.testing.assert_array_equal(batch.reward.reshape(-1).numpy(), native.reward)


def test_zero_d_arrays_stay_zero_d() -> None:
    # np.ascontiguousarray turns a 0-d array into shape (1,); the tensors keep their axes.
    assert c_contiguous(np.array(3.0)).shape == ()
    assert to_torch(np.array(3.0)).shape == ()
    assert to_torch([np.array(1.0), np.arange(2.0)])[0].shape == ()
    assert to_torch(np.arange(3)).shape == (3, 1)  # ReAgent's (B,) -> (B, 1)


def test_add_count_is_a_zero_d_array() -> None:
    # ReAgent (Dopamine): self.add_count = np.array(0).
    buf = make(stack_size=2)
    fill(buf, [3])
    assert isinstance(buf.add_count, np.ndarray) and buf.add_count.shape == ()
    assert buf.add_count == 4 and int(buf.add_count) == 4


# ---------------------------------------------------------------------- inferred elements
def later_api(cls: Any = ReplayBuffer, **kw: Any) -> Any:
    """ReAgent's later constructor: no observation_shape, no dtypes, no extra types."""
    args: dict[str, Any] = dict(stack_size=1, replay_capacity=30, batch_size=4, update_horizon=2)
    args.update(kw)
    return cls(**args)


def test_elements_inferred_from_the_first_add() -> None:
    # ReAgent's later ReplayBuffer.initialize_buffer: the keys observation, action, reward,
    # terminal and any others (extras); each with its first value's shape and dtype, float64
    # stored as float32.
    buf = later_api()
    assert buf.get_storage_signature() == [] and buf.size == 0
    with pytest.raises(RuntimeError):
        buf.sample_index_batch(2)
    for t in range(5):
        buf.add(
            observation=np.full(3, t, np.float64),
            action=t % 2,
            reward=float(t),
            terminal=t == 4,
            log_prob=np.log(0.5),
            mask=np.array([1, 0], np.uint8),
        )
    sig = {e.name: (e.shape, e.type) for e in buf.get_storage_signature()}
    assert sig["observation"] == ((3,), np.float32)
    assert sig["action"] == ((), np.dtype(np.int64))
    assert sig["reward"] == ((), np.float32) and sig["terminal"] == ((), np.bool_)
    assert sig["log_prob"] == ((), np.float32) and sig["mask"] == ((2,), np.uint8)
    # The later API's get_transition_elements: the element names.
    assert buf.get_transition_elements() == [
        "state",
        "action",
        "reward",
        "next_state",
        "next_action",
        "next_reward",
        "terminal",
        "indices",
        "step",
        "log_prob",
        "next_log_prob",
        "mask",
        "next_mask",
    ]
    batch = buf.sample_all_valid_transitions()
    assert batch.state.dtype == torch.float32 and batch.state.shape == (5, 3)
    assert batch.action.dtype == torch.int64
    want = np.array([0 + 0.99 * 1, 1 + 0.99 * 2, 2 + 0.99 * 3, 3 + 0.99 * 4, 4], np.float32)
    np.testing.assert_allclose(batch.reward.reshape(-1).numpy(), want, rtol=1e-6)


def test_inferred_elements_assert_shape_and_dtype() -> None:
    # ReAgent's later DenseMetadata.validate:
    # assert arr.shape == self.shape and dtype == self.dtype, "Expected ..., got ..."
    buf = later_api()
    buf.add(observation=np.zeros(2), action=1, reward=1.0, terminal=False)
    with pytest.raises(AssertionError, match="Expected"):
        buf.add(observation=np.zeros(3), action=1, reward=1.0, terminal=False)
    with pytest.raises(AssertionError, match="Expected"):
        buf.add(observation=np.zeros(2), action=1.5, reward=1.0, terminal=False)
    with pytest.raises(AssertionError):  # ReAgent: "... is dict or torch.Tensor"
        buf.add(observation=torch.zeros(2), action=1, reward=1.0, terminal=False)
    with pytest.raises(ValueError, match="Add expects"):  # an extra the first add lacked
        buf.add(observation=np.zeros(2), action=1, reward=1.0, terminal=False, x=1.0)
    assert buf.add_count == 1


def test_refused_first_add_leaves_the_elements_to_infer() -> None:
    buf = later_api()
    with pytest.raises(AssertionError):
        buf.add(observation=torch.zeros(2), action=1, reward=1.0, terminal=False)
    buf.add(observation=np.zeros(4, np.uint8), action=1, reward=1.0, terminal=True)
    assert buf.get_storage_signature()[0] == ReplayElement("observation", (4,), np.uint8)


def test_declared_dtype_with_inferred_shape_casts() -> None:
    buf = later_api(observation_dtype=np.uint8)
    buf.add(observation=np.array([1.7, 2.2]), action=0, reward=1.0, terminal=True)
    batch = buf.sample_all_valid_transitions()
    assert batch.state.dtype == torch.uint8 and batch.state.tolist() == [[1, 2]]


def test_inferred_buffer_agrees_with_the_declared_one() -> None:
    inferred = later_api(stack_size=2, update_horizon=3, seed=4)
    declared = ReplayBuffer(
        (2,),
        2,
        30,
        4,
        update_horizon=3,
        observation_dtype=np.float32,
        action_dtype=np.int64,
        extra_storage_types=[ReplayElement("log_prob", (), np.float32)],
        seed=4,
    )
    for e, n in enumerate([5, 3, 9]):
        for t in range(n):
            step = dict(
                observation=obs_of(e, t), action=t % 3, reward=float(t), terminal=t == n - 1
            )
            inferred.add(**step, log_prob=-float(t))
            declared.add(**step, log_prob=-float(t))
    a, b = inferred.sample_transition_batch(16), declared.sample_transition_batch(16)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert a._fields == b._fields


def test_inferred_prioritized_buffer() -> None:
    buf = later_api(PrioritizedReplayBuffer)
    buf.add(observation=np.zeros(2), action=0, reward=1.0, terminal=False, priority=2.0)
    buf.add(observation=np.ones(2), action=1, reward=1.0, terminal=True)  # max recorded: 2
    assert buf.get_priority(np.array([0, 1], np.int32)).tolist() == [2.0, 2.0]
    assert [e.name for e in buf.get_storage_signature()] == [
        "observation",
        "action",
        "reward",
        "terminal",
    ]
    batch = buf.sample_transition_batch(batch_size=4)
    assert batch.sampling_probabilities.shape == (4, 1)


def test_inferred_buffer_loads_into_a_fresh_inferring_buffer(tmp_path: Any) -> None:
    buf = later_api(stack_size=2, seed=1)
    for t in range(12):
        buf.add(
            observation=np.full(3, t, np.float32),
            action=t % 2,
            reward=1.0,
            terminal=t % 5 == 4,
            log_prob=-0.5,
        )
    buf.save(tmp_path, 7)
    fresh = later_api(stack_size=2, seed=1)
    fresh.load(tmp_path, 7)
    assert fresh.get_storage_signature() == buf.get_storage_signature()
    for x, y in zip(
        buf.sample_all_valid_transitions(), fresh.sample_all_valid_transitions(), strict=True
    ):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    fresh.add(
        observation=np.zeros(3, np.float32), action=1, reward=1.0, terminal=True, log_prob=0.0
    )
    empty = later_api()
    with pytest.raises(FileNotFoundError):
        empty.load(tmp_path, 8)
    assert empty.get_storage_signature() == []


def test_priority_of_a_slot_without_transition_is_kept_until_written() -> None:
    # ReAgent's set_priority writes the tree leaf of any slot; get_priority reads it back.
    buf = make(PrioritizedReplayBuffer, stack_size=2, replay_capacity=10)
    fill(buf, [2])  # slot 0 padding, slots 1, 2 steps; 3.. never written
    buf.set_priority(np.array([0, 5], np.int32), [2.5, 4.0])
    assert buf.get_priority(np.array([0, 5, 1], np.int32)).tolist() == [2.5, 4.0, 1.0]
    assert set(buf.sample_index_batch(64).tolist()) <= {1, 2}  # never drawn
    fill(buf, [2])  # slots 3 (padding), 4, 5: written over
    assert buf.get_priority(np.array([3, 5], np.int32)).tolist() == [0.0, 2.0]


def test_extra_named_next_something() -> None:
    # ReAgent stores any extra name; its batch has <x> and next_<x> for each.
    buf = make(extra_storage_types=[ReplayElement("next_obs", (2,), np.float32)])
    for t in range(3):
        buf.add(obs_of(0, t), 0, 1.0, t == 2, obs_of(0, t + 1))
    batch = buf.sample_all_valid_transitions()
    assert batch.next_obs[:, 0].tolist() == [2, 3, 4]
    assert batch.next_next_obs[:, 0].tolist() == [3, 4, 0]  # 0: after the terminal
    with pytest.raises(ValueError, match="taken"):  # next_<x> twice: a duplicate field
        make(extra_storage_types=[ReplayElement(n, (), np.float32) for n in ("a", "next_a")])
