"""``as_=``/``device=`` on every sampling call, and the buffer-wide default (issue 15).

Each sampling call of a uniform or prioritized buffer gives the same values as NumPy, as
torch tensors (sharing memory with the batch on the CPU) or JAX arrays; a bad format or
device is refused before anything is drawn; the default survives a checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.io import TensorBatch
from rlreplay.io import frameworks as fw
from tests.io.conftest import FIELDS, Buffer, PBuffer, fill

torch = pytest.importorskip("torch")

CALLS: dict[str, Callable[..., Any]] = {
    "sample": lambda buf, **kw: buf.sample(16, **kw),
    "sample_sequences": lambda buf, **kw: buf.sample_sequences(4, 8, **kw),
    "sample_episodes": lambda buf, **kw: buf.sample_episodes(3, **kw),
}
CASES = [(cls, call) for cls in (Buffer, PBuffer) for call in CALLS]


def make(cls: type[rr.ReplayBuffer] = Buffer, **kwargs: Any) -> rr.ReplayBuffer:
    buf = cls(200, FIELDS, n_step=3, seed=0, **kwargs)
    fill(buf, 120, seed=1)
    return buf


def assert_same_values(tb: TensorBatch, batch: rr.Batch) -> None:
    assert isinstance(tb, TensorBatch) and list(tb) == list(batch)
    for name, arr in batch.items():
        got = np.asarray(tb[name])
        np.testing.assert_array_equal(got, arr.astype(got.dtype), err_msg=name)


@pytest.mark.parametrize(("cls", "call"), CASES)
def test_every_call_converts_the_batch_numpy_would_give(cls: type, call: str) -> None:
    pytest.importorskip("jax")
    ref = CALLS[call](make(cls))
    assert type(ref) is rr.Batch
    as_torch = CALLS[call](make(cls), as_="torch")
    assert_same_values(as_torch, ref)
    assert all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in as_torch.values())
    assert_same_values(CALLS[call](make(cls), as_="jax", device="cpu"), ref)
    # The buffer-wide default gives the same, and a call's as_="numpy" overrides it.
    assert_same_values(CALLS[call](make(cls, as_="torch")), ref)
    again = CALLS[call](make(cls, as_="torch", device="cpu"), as_="numpy")
    assert type(again) is rr.Batch and all(np.array_equal(again[k], ref[k]) for k in ref)


@pytest.mark.parametrize(("cls", "call"), CASES)
def test_torch_on_the_cpu_shares_the_batch_memory(
    cls: type, call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[np.ndarray[Any, Any]] = []
    real = fw._shareable

    def spy(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out = real(arr)
        assert out is arr  # the batch's arrays are writable and native: never copied
        handed.append(arr)
        return out

    monkeypatch.setattr(fw, "_shareable", spy)
    tb = CALLS[call](make(cls, as_="torch", device="cpu"))
    assert len(handed) == len(tb)
    for arr, (name, t) in zip(handed, tb.items(), strict=True):
        assert t.data_ptr() == arr.ctypes.data, name  # the tensor is the array: no copy


def test_sample_tensors_are_the_arrays_of_the_assembled_batch() -> None:
    seen: list[rr.Batch] = []

    def keep(batch: rr.Batch) -> rr.Batch:
        seen.append(batch)
        return batch

    for kw in ({"transform": keep}, {"transform": keep, "length": 5}):
        buf = make(as_="torch")
        tb = buf.sample(8, **kw) if "length" not in kw else buf.sample_sequences(8, **kw)
        batch = seen.pop()
        for name, arr in batch.items():
            assert tb[name].data_ptr() == arr.ctypes.data, name
        tb.reward.view(-1)[0] = 123.0  # a write through the tensor lands in the batch's array
        assert batch.reward.flat[0] == 123.0


def test_to_a_device_through_pinned_memory_without_blocking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No GPU here: the device path runs to torch's meta device, pinning recorded."""
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
    buf = make(PBuffer, as_="torch", device="meta")
    for call in CALLS.values():
        calls.clear()
        tb = call(buf)
        assert all(t.device.type == "meta" for t in tb.values())
        assert calls == [("pin", None), ("to", True)] * len(tb)
    calls.clear()
    cpu = buf.sample(4, device="cpu")  # a call's device overrides the buffer's
    assert calls == [] and all(t.device.type == "cpu" for t in cpu.values())


def rng_state(buf: rr.ReplayBuffer) -> Any:
    return buf.rng.bit_generator.state


@pytest.mark.parametrize("call", sorted(CALLS))
def test_refused_calls_draw_nothing(call: str) -> None:
    buf = make(PBuffer)
    before = rng_state(buf)
    bad: list[tuple[dict[str, Any], str]] = [
        ({"as_": "tensorflow"}, r"as_: expected one of \('numpy', 'torch', 'jax'\), got 'tens"),
        ({"as_": "numpy", "device": "cuda:0"}, "device: NumPy arrays live on the CPU"),
        ({"device": "cuda:0"}, "device: NumPy arrays live on the CPU"),
        ({"as_": "torch", "device": "no-such-device"}, "device: expected a torch device"),
    ]
    if not torch.cuda.is_available():
        bad.append(({"as_": "torch", "device": "cuda"}, "'cuda' needs CUDA"))
    for kw, message in bad:
        with pytest.raises(rr.ConfigError, match=message):
            CALLS[call](buf, **kw)
        assert rng_state(buf) == before, kw
    CALLS[call](buf)
    assert rng_state(buf) != before


def test_out_is_numpy_only() -> None:
    buf = make(as_="torch")
    out = buf.sample(16, as_="numpy")
    before = rng_state(buf)
    for kw in ({}, {"as_": "jax"}):
        with pytest.raises(rr.ConfigError, match=r"out: .* needs as_='numpy'; got as_="):
            buf.sample(16, out=out, **kw)
        assert rng_state(buf) == before
    assert buf.sample(16, out=out, as_="numpy") is out


def test_rate_limited_refusal_costs_no_sample() -> None:
    buf = make(rate_limiter=rr.MinSize(1))
    before = buf._pacing.counts()
    with pytest.raises(rr.ConfigError, match="as_"):
        buf.sample(4, as_="tf")
    with pytest.raises(rr.ConfigError, match="as_"):
        buf.sample_sequences(4, 3, as_="tf")
    assert buf._pacing.counts() == before
    assert isinstance(buf.sample(4, as_="torch"), TensorBatch)
    assert buf._pacing.counts() != before


def test_constructor_checks_the_default() -> None:
    assert make().output == ("numpy", None)
    assert make(as_="numpy", device="cpu").output == ("numpy", None)
    assert make(as_="torch", device=torch.device("cpu")).output == ("torch", "cpu")
    with pytest.raises(rr.ConfigError, match="as_: expected one of"):
        make(as_="tf")
    with pytest.raises(rr.ConfigError, match="device: a buffer-wide device is a string"):
        make(as_="jax", device=object())
    with pytest.raises(rr.ConfigError, match="device: NumPy arrays live on the CPU"):
        make(device="cuda:0")
    if not torch.cuda.is_available():
        with pytest.raises(rr.ConfigError, match="needs CUDA"):
            make(as_="torch", device="cuda:0")


def test_a_call_format_other_than_the_default_ignores_its_device() -> None:
    pytest.importorskip("jax")
    buf = make(as_="torch", device="meta")
    jb = buf.sample(4, as_="jax")  # the buffer's device is for torch: JAX's default here
    assert all(x.devices() == {__import__("jax").devices()[0]} for x in jb.values())
    assert type(buf.sample(4, as_="numpy")) is rr.Batch


@pytest.mark.parametrize("cls", [Buffer, PBuffer])
def test_the_default_round_trips_through_checkpoints(cls: type, tmp_path: Path) -> None:
    buf = make(cls, as_="torch", device="cpu")
    assert buf.state_dict()["config"]["as_"] == "torch"
    buf.save(tmp_path / "b.ckpt")
    again = rr.load(tmp_path / "b.ckpt")
    assert again.output == ("torch", "cpu")
    assert_same_values(again.sample(8), buf.sample(8, as_="numpy"))
    plain = rr.load(tmp_path / "b.ckpt", as_="numpy")  # e.g. where torch is not installed
    assert plain.output == ("numpy", None) and type(plain.sample(2)) is rr.Batch
    jax_default = rr.load(tmp_path / "b.ckpt", as_="jax")
    assert jax_default.output == ("jax", None)
    # NumPy buffers write the configuration they always wrote.
    assert "as_" not in make(cls).state_dict()["config"]


def test_iterate_passes_the_format_through() -> None:
    buf = make(PBuffer, as_="torch")
    with buf.iterate(8, prefetch=1) as it:
        assert isinstance(next(it), TensorBatch)
    with buf.iterate(8, prefetch=1, as_="numpy") as it:
        assert type(next(it)) is rr.Batch
    with buf.iterate(2, prefetch=1, method="sample_episodes", device="cpu") as it:
        tb = next(it)
        assert isinstance(tb, TensorBatch) and tb.mask.dtype == torch.bool
    with pytest.raises(rr.ConfigError, match="device: NumPy arrays live on the CPU"):
        buf.iterate(8, as_="numpy", device="cuda:0")
    with pytest.raises(rr.ConfigError, match="as_: expected one of"):
        buf.iterate(8, as_="tf")


def test_state_dicts_move_between_buffers_of_any_output() -> None:
    torch_buf = make(PBuffer, as_="torch", device="cpu")
    plain = PBuffer(200, FIELDS, n_step=3, seed=0)
    plain.load_state_dict(torch_buf.state_dict())  # the data moves; the output stays this one's
    assert plain.output == ("numpy", None)
    ref = torch_buf.sample(8, as_="numpy")
    np.testing.assert_array_equal(plain.sample(8).ids, ref.ids)
    back = PBuffer(200, FIELDS, n_step=3, seed=0, as_="jax")
    back.load_state_dict(plain.state_dict())
    assert back.output == ("jax", None)
    with pytest.raises(rr.CheckpointError, match="configuration differs"):
        Buffer(200, FIELDS, n_step=2, as_="torch").load_state_dict(plain.state_dict())
