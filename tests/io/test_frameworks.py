"""torch and JAX outputs: zero-copy on the CPU, pinned non-blocking copies to a device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.io import TensorBatch, convert
from rlreplay.io import frameworks as fw
from tests.io.conftest import FIELDS, Buffer, PBuffer, fill

torch = pytest.importorskip("torch")


def batches() -> dict[str, rr.Batch]:
    """One batch of every sampling method, from uniform and prioritized buffers."""
    out: dict[str, rr.Batch] = {}
    for cls in (Buffer, PBuffer):
        buf = cls(200, FIELDS, n_step=3, seed=0, **({"alpha": 0.6} if cls is PBuffer else {}))
        fill(buf, 120, seed=1)
        out[f"{cls.__name__}.sample"] = buf.sample(16)
        out[f"{cls.__name__}.sample_sequences"] = buf.sample_sequences(4, 8)
        out[f"{cls.__name__}.sample_episodes"] = buf.sample_episodes(3)
    return out


BATCHES = batches()


@pytest.mark.parametrize("which", sorted(BATCHES))
def test_torch_cpu_shares_memory(which: str) -> None:
    batch = BATCHES[which]
    tb = convert(batch, "torch")
    assert isinstance(tb, TensorBatch) and list(tb) == list(batch)
    for name, arr in batch.items():
        t = tb[name]
        assert t.device.type == "cpu" and tuple(t.shape) == arr.shape
        assert t.numpy().dtype == arr.dtype
        assert t.data_ptr() == arr.ctypes.data, name  # the same memory: no copy
    # ... shown by a write through the tensor.
    arr = batch["reward"]
    tb.reward.view(-1)[0] = 7.0
    assert arr.flat[0] == 7.0
    assert tb.ids is tb["ids"]


def test_read_only_and_foreign_order_arrays_are_copied() -> None:
    ro = np.arange(4, dtype=np.float32)
    ro.flags.writeable = False
    big = np.arange(3, dtype=">i4")
    tb = convert(rr.Batch(ro=ro, big=big), "torch")
    assert tb.ro.data_ptr() != ro.ctypes.data
    assert tb.ro.tolist() == [0, 1, 2, 3] and tb.big.tolist() == [0, 1, 2]


def test_device_path_pins_and_does_not_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: the non-CPU path runs against the meta device, with pinning recorded."""
    calls: list[tuple[str, Any]] = []
    real_to = torch.Tensor.to

    def pin(self: Any) -> Any:
        calls.append(("pin", None))
        return self

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(("to", kwargs.get("non_blocking")))
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(fw, "_can_pin", lambda: True)
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    monkeypatch.setattr(torch.Tensor, "to", to)
    batch = BATCHES["ReplayBuffer.sample"]
    tb = convert(batch, "torch", device="meta")
    assert all(t.device.type == "meta" for t in tb.values())
    assert calls == [("pin", None), ("to", True)] * len(batch)
    calls.clear()
    monkeypatch.setattr(fw, "_can_pin", lambda: False)  # no CUDA: no pinning, still async
    convert(batch, "torch", device=torch.device("meta"))
    assert calls == [("to", True)] * len(batch)


def test_bad_arguments() -> None:
    batch = BATCHES["ReplayBuffer.sample"]
    with pytest.raises(rr.ConfigError, match="as_"):
        convert(batch, "tensorflow")
    with pytest.raises(rr.ConfigError, match="device"):
        convert(batch, "torch", device="no-such-device")
    if not torch.cuda.is_available():
        with pytest.raises(rr.ConfigError, match="needs CUDA"):
            convert(batch, "torch", device="cuda:0")
    with pytest.raises(rr.ConfigError, match="CPU"):
        convert(batch, "numpy", device="cuda:0")
    assert convert(batch, "numpy") is batch
    assert convert(batch, "numpy", device="cpu") is batch


@pytest.mark.parametrize("which", sorted(BATCHES))
def test_jax_via_dlpack(which: str) -> None:
    jax = pytest.importorskip("jax")
    batch = BATCHES[which]
    jb = convert(batch, "jax")
    for name, arr in batch.items():
        got = np.asarray(jb[name])
        np.testing.assert_array_equal(got, arr.astype(got.dtype), err_msg=name)
        if arr.dtype.itemsize <= 4 and arr.ctypes.data % 64 == 0:  # JAX keeps these in place
            assert jb[name].unsafe_buffer_pointer() == arr.ctypes.data, name
    cpu = convert(batch, "jax", device="cpu")
    assert all(x.devices() == {jax.devices("cpu")[0]} for x in cpu.values())
    with pytest.raises(rr.ConfigError, match="JAX has no device"):
        convert(batch, "jax", device="tpu:7")


def test_tensor_batch_is_read_only_and_pickles() -> None:
    import pickle

    tb = convert(BATCHES["ReplayBuffer.sample"], "torch")
    with pytest.raises(AttributeError, match="read-only"):
        tb.obs = None
    with pytest.raises(AttributeError, match="no field"):
        _ = tb.nothing
    again = pickle.loads(pickle.dumps(tb))
    assert torch.equal(again.obs, tb.obs) and "obs" in repr(tb)
