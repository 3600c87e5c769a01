"""``nnabla_rl.utils.data``: the helpers nnabla-rl's algorithms apply to sampled experiences.

Written from nnabla-rl's code of that module: ``marshal_experiences`` unzips the experiences
and turns element ``k`` into ``add_axis_if_single_dim(np.asarray(data))`` (tuples recursively,
dicts through ``marshal_dict_experiences``, which leaves out, with a logged warning, a key whose
values raise ``ValueError`` in ``np.asarray``); ``list_of_dict_to_dict_of_list`` takes the keys
of the first dict; ``add_batch_dimension`` is ``np.expand_dims(d, 0)`` (per element of a
tuple); ``RingBuffer`` is the ring of nnabla-rl's bounded buffers (``KeyError`` out of range).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers import (
    HindsightReplayBuffer,
    MemoryEfficientAtariBuffer,
)
from rlreplay.compat.nnabla_rl.utils import data as data_module
from rlreplay.compat.nnabla_rl.utils.data import (
    DataHolder,
    RingBuffer,
    add_axis_if_single_dim,
    add_batch_dimension,
    compute_std_ndarray,
    convert_to_list_if_not_list,
    is_array_like,
    list_of_dict_to_dict_of_list,
    marshal_dict_experiences,
    marshal_experiences,
    normalize_ndarray,
    unnormalize_ndarray,
    unzip,
)


def reference_marshal(experiences: list[Any]) -> tuple[Any, ...]:
    """Element by element, slowly: what nnabla-rl's marshal_experiences computes."""
    out: list[Any] = []
    for k in range(min(len(e) for e in experiences)):
        column = [e[k] for e in experiences]
        if isinstance(column[0], dict):
            out.append(
                {key: reference_marshal([(d[key],) for d in column])[0] for key in column[0]}
            )
        elif isinstance(column[0], tuple):
            out.append(reference_marshal(column))
        else:
            arr = np.array(column)
            out.append(arr[:, None] if arr.ndim == 1 else arr)
    return tuple(out)


def same(a: Any, b: Any) -> bool:
    if isinstance(b, tuple):
        return isinstance(a, tuple) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(b, dict):
        return isinstance(a, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in b)
    return bool(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b))


def test_marshal_sampled_experiences_of_the_columnar_store() -> None:
    buffer = ReplayBuffer(capacity=20, seed=0)
    for t in range(12):
        s = np.full(3, t, np.float32)
        info = {"t": t, "nested": {"x": float(t)}}
        buffer.append((s, np.int64(t % 2), float(t), float(t % 4 != 3), s + 1, info))
    experiences, _ = buffer.sample(num_samples=5)
    s, a, r, non_terminal, s_next, info = marshal_experiences(experiences)
    assert s.shape == (5, 3) and s.dtype == np.float32 and s_next.shape == (5, 3)
    assert a.shape == (5, 1) and r.shape == (5, 1) and non_terminal.shape == (5, 1)
    assert info["t"].shape == (5, 1) and info["nested"]["x"].shape == (5, 1)
    assert np.array_equal(r[:, 0], s[:, 0]) and np.array_equal(info["t"][:, 0], r[:, 0])
    assert same(marshal_experiences(experiences), reference_marshal(experiences))


def test_marshal_agrees_with_the_native_core_on_the_same_data() -> None:
    core = rr.ReplayBuffer(
        20, {"obs": rr.Field((3,), np.float32), "action": rr.Field((), np.int64)}, seed=0
    )
    buffer = ReplayBuffer(capacity=20, seed=0)
    for t in range(10):
        s = np.full(3, t, np.float32)
        end = t % 5 == 4
        core.add(obs=s, action=t % 2, reward=float(t), terminated=end, truncated=False,
                 **({"next_obs": s + 1} if end else {}))  # fmt: skip
        buffer.append((s, np.int64(t % 2), float(t), 0.0 if end else 1.0, s + 1, {}))
    ids = np.arange(10)
    batch = core.get_transitions(ids)
    s, a, r, non_terminal, s_next, _ = marshal_experiences(buffer.sample_indices(ids)[0])
    assert np.array_equal(s, batch.obs) and np.array_equal(s_next, batch.next_obs)
    assert np.array_equal(a[:, 0], batch.action)
    assert np.array_equal(r[:, 0], batch.reward)
    assert np.array_equal(non_terminal[:, 0] == 0, batch.terminated)


def test_marshal_goal_states_and_her_info() -> None:
    """Tuple states become a tuple of arrays; HER's info keys become (B, 1) arrays."""
    buffer = HindsightReplayBuffer(lambda a, g, i: np.float32(1.0), hindsight_prob=0.5, seed=0)
    for t in range(8):
        s = (np.full(4, t), np.zeros(2), np.full(2, t))
        s_next = (np.full(4, t + 1), np.zeros(2), np.full(2, t + 1))
        buffer.append((s, np.zeros(2), -1.0, float(t != 3), s_next, {}))
    experiences, _ = buffer.sample(num_samples=6)
    s, a, r, _, s_next, info = marshal_experiences(experiences)
    assert [x.shape for x in s] == [(6, 4), (6, 2), (6, 2)] and len(s_next) == 3
    assert a.shape == (6, 2) and r.shape == (6, 1)
    assert info["index_in_episode"].shape == (6, 1) and info["episode_end_index"].shape == (6, 1)
    assert same(marshal_experiences(experiences), reference_marshal(experiences))


def test_marshal_atari_stacks() -> None:
    buffer = MemoryEfficientAtariBuffer(capacity=10, seed=0)
    for t in range(6):
        buffer.append((np.full((4, 84, 84), t / 255.0), t % 4, 1.0, 1.0, np.zeros((4, 84, 84)), {}))
    s, a, *_ = marshal_experiences(buffer.sample(num_samples=3)[0])
    assert s.shape == (3, 4, 84, 84) and s.dtype == np.float32 and a.shape == (3, 1)


def test_inconsistent_info_values_are_left_out_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    infos = [{"ok": 1, "ragged": np.zeros(2)}, {"ok": 2, "ragged": np.zeros(3)}]
    with caplog.at_level(logging.WARNING, logger="nnabla_rl"):
        out = marshal_dict_experiences(infos)
    assert list(out) == ["ok"] and out["ok"].tolist() == [[1], [2]]
    assert "ragged" in caplog.text
    # keys of the first dict; a missing one is None (nnabla-rl's d.get(key, None))
    assert list_of_dict_to_dict_of_list([{"a": 1, "b": 2}, {"a": 3}]) == {
        "a": [1, 3],
        "b": [2, None],
    }
    assert list_of_dict_to_dict_of_list([{"a": 1}, {"a": 3, "b": 2}]) == {"a": [1, 3]}
    out = marshal_dict_experiences([{"a": 1, "b": 2}, {"a": 3}])
    assert out["b"].dtype == object and out["b"].tolist() == [[2], [None]]


def test_tuples_inside_dicts_are_marshalled_element_by_element(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # nnabla-rl's marshal_dict_experiences hands tuple values to marshal_experiences
    infos = [{"goal": (np.zeros(2), 1.0)}, {"goal": (np.ones(2), 2.0)}]
    goal = marshal_dict_experiences(infos)["goal"]
    assert isinstance(goal, tuple) and goal[0].shape == (2, 2) and goal[1].tolist() == [[1], [2]]
    ragged = [{"goal": (np.zeros(2),), "ok": 1}, {"goal": (np.zeros(3),), "ok": 2}]
    with caplog.at_level(logging.WARNING, logger="nnabla_rl"):
        out = marshal_dict_experiences(ragged)
    assert list(out) == ["ok"] and "goal" in caplog.text  # the tuple's ValueError is caught


def test_small_helpers() -> None:
    assert unzip([(1, "a"), (2, "b")]) == [(1, 2), ("a", "b")]
    assert add_axis_if_single_dim(np.zeros(3)).shape == (3, 1)
    assert add_axis_if_single_dim(np.zeros((3, 2))).shape == (3, 2)
    assert add_batch_dimension(np.zeros((4, 2))).shape == (1, 4, 2)
    pair = add_batch_dimension((np.zeros(3), np.zeros((2, 2))))
    assert isinstance(pair, tuple) and [p.shape for p in pair] == [(1, 3), (1, 2, 2)]
    # nnabla-rl: an ndarray gets the axis, anything else is iterated into a tuple
    listed = add_batch_dimension([np.zeros(3), 1.0])
    assert isinstance(listed, tuple) and [np.shape(p) for p in listed] == [(1, 3), (1,)]
    with pytest.raises(TypeError):
        add_batch_dimension(1.0)  # a float is not iterable, as in nnabla-rl
    assert is_array_like([1]) and is_array_like(np.zeros(2)) and not is_array_like(1)
    assert convert_to_list_if_not_list((1, 2)) == [1, 2]
    assert convert_to_list_if_not_list(3) == [3] and convert_to_list_if_not_list("ab") == ["a", "b"]
    assert issubclass(RingBuffer, DataHolder)


def test_normalization_helpers() -> None:
    x = np.arange(4.0)
    assert normalize_ndarray(x, 1.0, 2.0).tolist() == [-0.5, 0.0, 0.5, 1.0]
    assert normalize_ndarray(x, 1.0, 2.0, (-0.2, 0.7)).tolist() == [-0.2, 0.0, 0.5, 0.7]
    assert unnormalize_ndarray(x, 1.0, 2.0, (0.0, 3.0)).tolist() == [1.0, 3.0, 3.0, 3.0]
    var = np.array([0.0, 4.0])
    assert compute_std_ndarray(var, 0.25, "add").tolist() == [0.5, 4.25**0.5]
    assert compute_std_ndarray(var, 0.25, "max").tolist() == [0.25, 2.0]
    with pytest.raises(ValueError, match="mode_for_floating_point_error"):
        compute_std_ndarray(var, 0.25, "sqrt")
    assert not hasattr(data_module, "set_data_to_variable")  # needs nnabla


@settings(max_examples=60, deadline=None)
@given(maxlen=st.integers(1, 6), items=st.lists(st.integers(), max_size=20))
def test_ring_buffer_against_a_deque(maxlen: int, items: list[int]) -> None:
    ring, reference = RingBuffer(maxlen), deque(maxlen=maxlen)
    for x in items:
        removed = ring.append_with_removed_item_check(x)
        full = len(reference) == maxlen
        assert removed == (reference[0] if full else None)
        reference.append(x)
        assert len(ring) == len(reference)
        assert [ring[i] for i in range(len(ring))] == list(reference)
    for bad in (-1, len(ring)):
        with pytest.raises(KeyError):
            ring[bad]


def test_ring_buffer_of_zero_length_fails_at_append() -> None:
    with pytest.raises(ZeroDivisionError):
        RingBuffer(0).append(1)
