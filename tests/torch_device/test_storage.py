"""TorchStorage beyond the storage contract (``tests/contracts/test_storage_torch.py``): inputs
as tensors on the device, the same contents as the NumPy storage for the same writes, states
that move between the two, dtypes, and no host synchronisation on writes and reads."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch

import rlreplay as rr
from rlreplay.spec.schema import Schema
from rlreplay.storage import Columns, MemoryBackend
from rlreplay.storage.torch import TorchStorage
from tests.contracts.storage import contract_schema, step_values
from tests.torch_device.helpers import no_host_sync

Array = np.ndarray[Any, Any]
E, C, F = 3, 5, 2


def on_device(values: dict[str, Array], device: str) -> dict[str, torch.Tensor]:
    """Each value as a tensor on ``device`` (big-endian arrays in the host's order first)."""
    out = {}
    for name, v in values.items():
        native = v.astype(v.dtype.newbyteorder("="))
        out[name] = torch.from_numpy(native).to(device)
    return out


def same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["finals_capacity"] == b["finals_capacity"]
    assert list(a["arrays"]) == list(b["arrays"])
    for name, x in a["arrays"].items():
        y = b["arrays"][name]
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name


def test_tensor_inputs_store_what_numpy_inputs_store(device: str) -> None:
    """The same writes, given as tensors on the device to a TorchStorage and as NumPy arrays to
    Columns, leave the same state (bit for bit, in the NumPy checkpoint format)."""
    schema = contract_schema()
    ref = Columns(schema, E, C, F, MemoryBackend())
    s = TorchStorage(schema, E, C, F, device)
    rng = np.random.default_rng(0)
    dev = torch.device(device)

    rows = step_values(schema, rng, (E * C,))
    ref.write(np.arange(E * C, dtype=np.int64), rows)
    s.write(torch.arange(E * C, device=device), on_device(rows, device))
    one = step_values(schema, rng, ())
    ref.write(7, one)
    s.write(7, on_device(one, device))
    lockstep = step_values(schema, rng, (E,))
    ref.write(slice(2, None, C), lockstep)
    s.write(slice(2, None, C), on_device(lockstep, device))
    # Finals: a bool mask on the device, row numbers on the device, and an unbatched step.
    batch = step_values(schema, rng, (4,))
    mask = np.array([False, True, False, True])
    ref.write_finals(np.array([5, 0], np.int64), batch, mask)
    s.write_finals(torch.tensor([5, 0], device=device), on_device(batch, device),
                   torch.from_numpy(mask).to(device))  # fmt: skip
    batch = step_values(schema, rng, (4,))
    ref.write_finals(np.array([1, 2, 3], np.int64), batch, np.array([3, 0, 2]))
    s.write_finals(torch.tensor([1, 2, 3], device=device), on_device(batch, device),
                   torch.tensor([3, 0, 2], device=device))  # fmt: skip
    one = step_values(schema, rng, ())
    ref.write_finals(np.array([4], np.int64), one, None)
    s.write_finals(torch.tensor([4], device=device), on_device(one, device), None)
    same_state(s.state_dict(), ref.state_dict())

    slots = np.array([[0, 14], [7, 7]], np.int64)
    for name, f in schema.fields.items():
        got = s.take(name, torch.from_numpy(slots).to(device))
        assert got.device == dev and tuple(got.shape) == (2, 2, *f.shape)
        assert s.to_numpy(got, f.dtype).tobytes() == ref.take(name, slots).tobytes()
    for name in schema.observation_names:
        got = s.take_finals(name, torch.tensor([4, 0], device=device))
        assert got.device == dev
        want = ref.take_finals(name, np.array([4, 0], np.int64))
        assert s.to_numpy(got, want.dtype).tobytes() == want.tobytes()

    moves = (np.array([0, 4, 5], np.int64), np.array([0, 8, 9], np.int64))
    ref.grow_finals(4, *moves)
    s.grow_finals(4, *(torch.from_numpy(m).to(device) for m in moves))
    same_state(s.state_dict(), ref.state_dict())


def test_states_move_between_the_numpy_and_torch_storages(device: str) -> None:
    schema = contract_schema()
    rng = np.random.default_rng(1)
    ref = Columns(schema, E, C, 4, MemoryBackend())
    ref.add_derived("discounted_return", np.dtype(np.float32), -1.0)
    ref.write(np.arange(E * C, dtype=np.int64), step_values(schema, rng, (E * C,)))
    ref.write_finals(np.arange(E * 4, dtype=np.int64), step_values(schema, rng, (E * 4,)),
                     np.arange(E * 4))  # fmt: skip
    s = TorchStorage(schema, E, C, F, device)
    s.add_derived("discounted_return", np.dtype(np.float32), 0.0)
    s.load_state_dict(ref.state_dict())
    same_state(s.state_dict(), ref.state_dict())
    back = Columns(schema, E, C, F, MemoryBackend())
    back.add_derived("discounted_return", np.dtype(np.float32), 0.0)
    back.load_state_dict(s.state_dict())
    same_state(back.state_dict(), ref.state_dict())


def test_dtypes(device: str) -> None:
    """Unsigned fields come back unsigned with every bit; big-endian fields are held in the
    host's order and checkpoint in theirs; dtypes torch lacks are refused."""
    schema = Schema.build(
        {
            "u16": rr.Field((2,), np.uint16),
            "u32": rr.Field((), np.uint32),
            "u64": rr.Field((), np.uint64),
            "big": rr.Field((2,), ">i4", observation=True),
        }
    )
    s = TorchStorage(schema, 1, 4, 1, device)
    values: dict[str, Array] = {
        "u16": np.array([[65535, 1]] * 2, np.uint16),
        "u32": np.array([2**32 - 1, 7], np.uint32),
        "u64": np.array([2**64 - 1, 2**63], np.uint64),
        "big": np.array([[-2, 3]] * 2, ">i4"),
    }
    s.write(
        np.array([1, 3], np.int64), step_values(schema, np.random.default_rng(0), (2,)) | values
    )
    assert s.steps["u64"].dtype == torch.uint64
    assert s.take("u64", np.array([3, 1])).dtype == torch.uint64
    assert s.steps["big"].dtype == torch.int32
    for name, v in values.items():
        got = s.to_numpy(s.take(name, np.array([1, 3])), schema.fields[name].dtype)
        assert got.dtype == v.dtype and got.tobytes() == v.tobytes(), name
    assert s.state_dict()["arrays"]["steps/big"].dtype == np.dtype(">i4")
    wide = Schema.build({"obs": rr.Field((), np.float32), "x": rr.Field((), np.longdouble)})
    if np.dtype(np.longdouble).itemsize > 8:
        with pytest.raises(rr.ConfigError, match="'x'"):
            TorchStorage(wide, 1, 4, 1, device)
    with pytest.raises(rr.ConfigError):
        TorchStorage(schema, 1, 4, 1, "no-such-device")


def test_awkward_host_inputs_are_written_without_warnings(device: str) -> None:
    """Read-only, reversed, big-endian and other-dtype NumPy inputs and Python scalars."""
    schema = Schema.build({"obs": rr.Field((3,), np.float32), "a": rr.Field((), np.int64)})
    s = TorchStorage(schema, 1, 4, 1, device)
    rest = {"reward": 0.0, "terminated": False, "truncated": False}
    obs = np.arange(6, dtype=np.float32).reshape(2, 3)
    obs.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.write(np.array([0, 1]), {"obs": obs, "a": np.array([5, 6], ">i8")} | rest)
        s.write(np.array([2, 3]), {"obs": obs[::-1], "a": np.array([7, 8], np.int32)} | rest)
        s.write(3, {"obs": np.float64(1.5), "a": 9} | rest)
        s.write_finals(np.array([0]), {"next_obs": obs[1]}, None)
    assert s.to_numpy(s.steps["obs"]).tolist() == [[0, 1, 2], [3, 4, 5], [3, 4, 5], [1.5] * 3]
    assert s.to_numpy(s.steps["a"]).tolist() == [5, 6, 7, 9]
    assert s.to_numpy(s.finals["obs"]).tolist() == [[3, 4, 5]]


def test_writes_and_reads_do_not_synchronise(device: str) -> None:
    """write, write_finals (bool mask and row numbers on the device, one unbatched step), take,
    take_finals, grow_finals, set_finals_capacity, add_derived and nbytes, given tensors on
    the device, read no device value on the host (on a CUDA device: make no synchronising
    CUDA call)."""
    schema = contract_schema()
    s = TorchStorage(schema, E, C, F, device)
    rng = np.random.default_rng(2)
    rows = on_device(step_values(schema, rng, (E,)), device)
    one = on_device(step_values(schema, rng, ()), device)
    slots = torch.tensor([0, 6, 12], device=device)
    mask = torch.tensor([True, False, True], device=device)
    pos = [torch.tensor(p, device=device) for p in ([1, 2], [3], [5], [1, 5], [1, 9])]
    row_one = torch.tensor([1], device=device)
    with no_host_sync(device) as counter:  # every input already on the device
        s.write(slots, rows)
        s.write(slice(1, None, C), rows)
        s.write(4, one)
        s.write_finals(pos[0], rows, mask)
        s.write_finals(pos[1], rows, row_one)
        s.write_finals(pos[2], one, None)
        for name in schema.fields:
            s.take(name, slots.reshape(3, 1))
        for name in schema.observation_names:
            s.take_finals(name, pos[3])
        s.grow_finals(4, pos[3], pos[4])
        s.add_derived("r", np.dtype(np.float32), 0.0)
        assert s.nbytes > 0
        s.set_finals_capacity(2)
    assert counter.calls == {}, dict(counter.calls)


def test_joint_observation_tensors(device: str) -> None:
    """``joint_finals``: the step and final rows of each observation field are views of one
    tensor, written and read as the separate columns are; a reallocation of the finals ends
    the sharing; the contents match a storage without joint tensors."""
    schema = contract_schema()
    rng = np.random.default_rng(3)
    plain = TorchStorage(schema, E, C, F, device)
    joint = TorchStorage(schema, E, C, F, device, joint_finals=True)
    for t in range(2 * C):
        values = on_device(step_values(schema, rng, (E,)), device)
        slots = torch.arange(E, device=device) * C + t % C
        plain.write(slots, values)
        joint.write(slots, values)
        pos = torch.arange(E, device=device) * F + t % F
        plain.write_finals(pos, values, torch.ones(E, dtype=torch.bool, device=device))
        for name in schema.observation_names:
            joint.write_joint(name, pos + E * C, values["next_" + name])
    same_state(plain.state_dict(), joint.state_dict())
    rows = torch.tensor([[0, E * C], [E * C + E * F + E, 1]], device=device)
    for name in schema.observation_names:
        whole = joint.joint(name)
        assert whole is not None and whole.shape[0] == E * C + E * F + E + 1
        assert joint.steps[name].data_ptr() == whole.data_ptr()
        got = joint.take_joint(name, rows)
        assert got.shape == (2, 2, *schema.fields[name].shape)
        assert torch.equal(got[0, 0], joint.steps[name][0])
        assert torch.equal(got[0, 1], joint.finals[name][0])
        assert not got[1, 0].to(torch.float64).abs().sum()  # the row of zeros
    assert joint.nbytes > plain.nbytes
    joint.set_finals_capacity(F + 1)
    assert all(joint.joint(n) is None for n in schema.observation_names)
    assert joint.finals["pixels"].shape[0] == E * (F + 1)
