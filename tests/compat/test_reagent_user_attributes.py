"""ReAgent's checkpoints carry the public attributes a user attaches to the buffer.

reagent 0.1's ``_return_checkpointable_elements`` saves every ``__dict__`` member whose name
does not start with ``_`` (an array with ``np.save(allow_pickle=False)``, anything else with
``pickle.dump``) and ``load`` restores every public attribute the buffer has, requiring its
file. The front-end does the same, with a restricted unpickler on load.
"""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.compat.reagent.circular_replay_buffer import ReplayBuffer
from rlreplay.compat.reagent.prioritized_replay_buffer import PrioritizedReplayBuffer


def make(cls: Any = ReplayBuffer) -> Any:
    buf = cls(observation_shape=(2,), stack_size=1, replay_capacity=5, batch_size=2)
    extra = (1.0,) if cls is PrioritizedReplayBuffer else ()  # the priority
    for t in range(3):
        buf.add(np.full(2, t, np.uint8), 0, float(t), t == 2, *extra)
    return buf


class Custom:
    """A user class: ReAgent would unpickle it; the front-end refuses to run its code."""

    def __init__(self) -> None:
        self.value = 3


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_public_attributes_round_trip(tmp_path: Path, cls: Any) -> None:
    buf = make(cls)
    buf.step_count = 4753849
    buf.note = "String data"
    buf.config = {"lr": 1e-3, "layers": [64, 64], "pair": (1, None)}
    buf.weights = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf.scale = np.float64(0.5)
    buf.save(tmp_path, 7)
    for name in ("step_count", "note", "config", "weights", "scale"):
        assert (tmp_path / f"{name}_ckpt.7.gz").exists()
    with gzip.open(tmp_path / "weights_ckpt.7.gz") as f:  # an array: .npy, no pickle
        np.testing.assert_array_equal(np.load(f, allow_pickle=False), buf.weights)
    other = make(cls)
    other.step_count, other.note, other.config = 0, "", {}
    other.weights, other.scale = np.zeros(1), 0.0
    other.load(tmp_path, 7)
    assert other.step_count == 4753849 and other.note == "String data"
    assert other.config == {"lr": 1e-3, "layers": [64, 64], "pair": (1, None)}
    np.testing.assert_array_equal(other.weights, buf.weights)
    assert other.weights.dtype == np.float32
    assert other.scale == 0.5 and type(other.scale) is np.float64


def test_only_the_attributes_the_buffer_has_are_loaded(tmp_path: Path) -> None:
    buf = make()
    buf.extra, buf.kept = 1, 2
    buf.save(tmp_path, 1)
    other = make()
    other.kept = 0
    other.load(tmp_path, 1)
    assert other.kept == 2 and not hasattr(other, "extra")


def test_a_missing_attribute_file_fails_before_anything_changes(tmp_path: Path) -> None:
    buf = make()
    buf.save(tmp_path, 1)
    other = make()
    other.add(np.full(2, 9, np.uint8), 1, 9.0, False)
    other.unsaved = "here"
    before = other.add_count
    with pytest.raises(FileNotFoundError, match=r"unsaved_ckpt\.1\.gz"):
        other.load(tmp_path, 1)
    assert other.add_count == before and other.unsaved == "here"


def test_user_classes_are_refused_on_load(tmp_path: Path) -> None:
    buf = make()
    buf.obj = Custom()
    buf.save(tmp_path, 2)  # saved as ReAgent saves it (pickled)
    other = make()
    other.obj = None
    with pytest.raises(rr.CheckpointError, match="obj"):
        other.load(tmp_path, 2)
    assert other.obj is None


def test_a_pickle_that_runs_code_is_refused(tmp_path: Path) -> None:
    buf = make()
    buf.save(tmp_path, 3)

    class Evil:
        def __reduce__(self) -> Any:
            return (os.system, ("echo unsafe",))

    with gzip.open(tmp_path / "flag_ckpt.3.gz", "wb") as f:
        f.write(pickle.dumps(Evil()))
    other = make()
    other.flag = False
    with pytest.raises(rr.CheckpointError, match="refused global"):
        other.load(tmp_path, 3)
    assert other.flag is False


def test_object_arrays_fail_at_save_as_reagent(tmp_path: Path) -> None:
    buf = make()
    buf.objects = np.array([{"a": 1}], dtype=object)
    with pytest.raises(ValueError):  # np.save(..., allow_pickle=False), as in ReAgent
        buf.save(tmp_path, 1)
