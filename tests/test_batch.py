"""rr.Batch: a read-only typed mapping with attribute access, holding fresh writable arrays."""

from __future__ import annotations

import copy
import itertools
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr


def small_batch() -> rr.Batch:
    return rr.Batch(obs=np.arange(6.0).reshape(2, 3), reward=np.array([1.0, 2.0]))


# --------------------------------------------------------------------------- mapping + attributes
def test_mapping_and_attribute_access_agree() -> None:
    b = small_batch()
    assert isinstance(b, Mapping)
    assert len(b) == 2
    assert list(b) == ["obs", "reward"]
    assert set(b.keys()) == {"obs", "reward"}
    assert "obs" in b and "next_obs" not in b
    assert b.obs is b["obs"]
    assert b.reward is b["reward"]
    assert b.get("missing") is None
    assert dict(b.items())["obs"] is b.obs
    assert b.batch_size == 2
    assert "obs" in dir(b)


def test_positional_mapping_and_keywords_merge() -> None:
    b = rr.Batch({"obs": np.zeros(2)}, reward=np.ones(2))
    assert sorted(b) == ["obs", "reward"]


def test_missing_names_raise_the_usual_errors() -> None:
    b = small_batch()
    with pytest.raises(KeyError):
        b["next_obs"]
    with pytest.raises(AttributeError, match="next_obs"):
        _ = b.next_obs
    assert not hasattr(b, "next_obs")


def test_batch_is_read_only() -> None:
    b = small_batch()
    with pytest.raises(AttributeError, match="read-only"):
        b.obs = np.zeros((2, 3))
    with pytest.raises(AttributeError):
        b.new_field = np.zeros(2)
    with pytest.raises(AttributeError):
        b._data = {}
    with pytest.raises(TypeError):
        b["obs"] = np.zeros((2, 3))  # type: ignore[index]
    with pytest.raises(TypeError):
        del b["obs"]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        del b.obs
    assert sorted(b) == ["obs", "reward"]
    np.testing.assert_array_equal(b.obs, np.arange(6.0).reshape(2, 3))


def test_replace_returns_a_new_batch_and_leaves_the_old_one() -> None:
    b = small_batch()
    old_obs = b.obs
    new_obs = np.ones((2, 3))
    c = b.replace(obs=new_obs, extra=np.zeros(2))
    assert isinstance(c, rr.Batch)
    assert c is not b
    assert c.obs is new_obs
    assert c.reward is b.reward
    assert sorted(c) == ["extra", "obs", "reward"]
    assert b.obs is old_obs
    assert sorted(b) == ["obs", "reward"]
    d = b.replace()
    assert d is not b and dict(d.items()).keys() == dict(b.items()).keys()


def test_to_dict_is_a_plain_independent_dict() -> None:
    b = small_batch()
    d = b.to_dict()
    assert type(d) is dict
    d["obs"] = None
    assert isinstance(b.obs, np.ndarray)


def test_repr_names_fields_dtypes_and_shapes() -> None:
    r = repr(small_batch())
    assert "obs" in r and "float64" in r and "[2, 3]" in r


@pytest.mark.parametrize(
    "clone",
    [
        pytest.param(copy.copy, id="copy"),
        pytest.param(copy.deepcopy, id="deepcopy"),
        pytest.param(lambda b: pickle.loads(pickle.dumps(b)), id="pickle"),
    ],
)
def test_batch_survives_copy_and_pickle(clone: Any) -> None:
    # Batches cross process boundaries (multiprocessing queues, data loaders), so they must
    # pickle; copy/deepcopy go through the same protocol.
    b = small_batch()
    c = clone(b)
    assert isinstance(c, rr.Batch)
    assert sorted(c) == sorted(b)
    np.testing.assert_array_equal(c.obs, b.obs)
    np.testing.assert_array_equal(c["reward"], b["reward"])


# --------------------------------------------------------------------------- sampled batches
FIELDS = {"obs": rr.Field((3,), np.float32), "action": rr.Field((), np.int64)}


def filled(n_step: int, frame_stack: int, storage: str, path: Path | None) -> rr.ReplayBuffer:
    buf = rr.ReplayBuffer(
        48,
        FIELDS,
        n_step=n_step,
        frame_stack=frame_stack,
        seed=3,
        storage=storage,
        path=path,
    )
    for t in range(80):  # past capacity, episodes of 7 steps
        end = t % 7 == 6
        buf.add(
            obs=np.full(3, t, np.float32),
            action=t,
            reward=float(t),
            next_obs=np.full(3, 1000 + t, np.float32),
            terminated=end and t % 2 == 0,
            truncated=end and t % 2 == 1,
        )
    return buf


CONFIGS = [
    pytest.param(n, k, s, id=f"n{n}-k{k}-{s}")
    for n, k, s in itertools.product((1, 3), (1, 4), ("memory", "memmap"))
]


@pytest.mark.parametrize(("n_step", "frame_stack", "storage"), CONFIGS)
def test_sampled_arrays_are_fresh_writable_copies(
    n_step: int, frame_stack: int, storage: str, tmp_path: Path
) -> None:
    path = tmp_path / "a" if storage == "memmap" else None
    twin_path = tmp_path / "b" if storage == "memmap" else None
    buf = filled(n_step, frame_stack, storage, path)
    twin = filled(n_step, frame_stack, storage, twin_path)
    ids = buf.sampleable_ids()
    reference = {k: v.copy() for k, v in buf.get_transitions(ids).items()}

    batches = (buf.sample(32), buf.get_transitions(ids))
    twin.sample(32)  # keeps the twins' generators in step
    for batch in batches:
        assert isinstance(batch, rr.Batch)
        arrays = list(batch.items())
        for name, arr in arrays:
            assert type(arr) is np.ndarray, name
            assert arr.flags.writeable, name
            assert arr.shape[0] == batch.batch_size, name
        # No two entries share memory: writing one never changes another.
        for (na, a), (nb, b) in itertools.combinations(arrays, 2):
            assert not np.shares_memory(a, b), (na, nb)
        # Scribble over everything the batch holds.
        for _, arr in arrays:
            arr[...] = 1 if arr.dtype != np.bool_ else True

    # The buffer did not see the scribbles: same transitions, same later samples as the twin.
    again = buf.get_transitions(ids)
    for k, v in reference.items():
        np.testing.assert_array_equal(again[k], v, err_msg=k)
    for _ in range(3):
        a, b = buf.sample(16), twin.sample(16)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_sampled_batch_has_the_documented_keys() -> None:
    buf = filled(3, 4, "memory", None)
    b = buf.sample(5)
    assert set(b) == {
        "obs",
        "action",
        "reward",
        "next_obs",
        "terminated",
        "truncated",
        "discount",
        "steps",
        "ids",
        "env_ids",
        "weights",
    }
    assert b.batch_size == 5
    assert b.obs.shape == (5, 4, 3) and b.next_obs.shape == (5, 4, 3)
    assert b.reward.dtype == np.float32 and b.discount.dtype == np.float32
    assert b.terminated.dtype == np.bool_ and b.truncated.dtype == np.bool_
    np.testing.assert_array_equal(b.weights, np.ones(5, np.float32))
    with pytest.raises(AttributeError):
        b.obs = b.next_obs
