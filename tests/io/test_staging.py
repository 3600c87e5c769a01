"""The pinned ring (:mod:`rlreplay.io.staging`): slots reused, a slot's copy awaited before it is
rewritten, copies enqueued on the side stream, the caller's stream made to wait and the
tensors kept for it; buffers and ``iterate`` to a CUDA device send their batches through one
ring. Without a GPU the CUDA calls go to a recording fake; with ``RLREPLAY_TEST_DEVICE`` naming
a CUDA device the ring also runs against CUDA."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rlreplay as rr  # noqa: E402
from rlreplay.io import frameworks as fw  # noqa: E402
from rlreplay.io import staging  # noqa: E402
from rlreplay.io.staging import PinnedRing  # noqa: E402


class FakeStream:
    def __init__(self, name: str, log: list[tuple[Any, ...]]) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: FakeStream) -> None:
        self.log.append(("wait_stream", self.name, other.name))


class FakeEvent:
    def __init__(self, log: list[tuple[Any, ...]], number: int) -> None:
        self.log, self.number = log, number
        self.stream: str | None = None

    def record(self, stream: FakeStream) -> None:
        self.stream = stream.name
        self.log.append(("record", self.number, stream.name))

    def synchronize(self) -> None:
        self.log.append(("synchronize", self.number))


class FakeCuda:
    """Records every CUDA call; 'device' tensors are CPU clones made on the active stream."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.active: str | None = None
        self.allocated = 0
        self.events = 0
        self.current = FakeStream("current", self.log)

    def pinned(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        self.allocated += 1
        return torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype)).dtype)

    def side_stream(self) -> FakeStream:
        self.log.append(("side_stream",))
        return FakeStream("side", self.log)

    def current_stream(self) -> FakeStream:
        return self.current

    @contextlib.contextmanager
    def on(self, stream: FakeStream) -> Iterator[None]:
        self.active = stream.name
        try:
            yield
        finally:
            self.active = None

    def event(self) -> FakeEvent:
        self.events += 1
        return FakeEvent(self.log, self.events)

    def copy(self, host: Any) -> Any:
        self.log.append(("copy", self.active))
        return host.clone()

    def keep(self, tensor: Any, stream: FakeStream) -> None:
        self.log.append(("keep", stream.name))


def batch(i: int, rows: int = 4) -> dict[str, np.ndarray[Any, Any]]:
    return {
        "obs": np.full((rows, 3), i, np.float32),
        "action": np.arange(rows, dtype=">i8") + i,  # foreign byte order: converted once
        "terminated": np.arange(rows) % 2 == i % 2,
    }


def test_values_arrive_and_slots_are_reused() -> None:
    cuda = FakeCuda()
    ring = PinnedRing("cuda:0", slots=2, backend=cuda)
    outs = [ring(batch(i)) for i in range(5)]
    for i, out in enumerate(outs):  # earlier results are not overwritten by later batches
        for name, arr in batch(i).items():
            assert out[name].numpy().tolist() == arr.tolist(), (i, name)
    assert outs[0]["action"].dtype == torch.int64
    assert cuda.allocated == 2 * 3  # two slots of three keys, allocated once
    assert cuda.log.count(("side_stream",)) == 1
    assert all(entry == ("copy", "side") for entry in cuda.log if entry[0] == "copy")


def test_a_slot_waits_for_its_last_copy_and_the_caller_waits_for_the_copies() -> None:
    cuda = FakeCuda()
    ring = PinnedRing("cuda:0", slots=2, backend=cuda)
    for i in range(3):
        ring(batch(i))
    log = cuda.log
    syncs = [entry for entry in log if entry[0] == "synchronize"]
    assert syncs == [("synchronize", 1)]  # the third batch reuses the first one's slot
    first_copy_of_third = [i for i, e in enumerate(log) if e[0] == "copy"][6]
    assert log.index(("synchronize", 1)) < first_copy_of_third
    for n in (1, 2, 3):  # each batch: its copies, then its event on the side stream, then the
        rec = log.index(("record", n, "side"))  # caller's stream waits, and keeps the tensors
        assert log[rec + 1] == ("wait_stream", "current", "side")
        assert log[rec + 2 : rec + 5] == [("keep", "current")] * 3
        assert all(e[0] == "copy" for e in log[rec - 3 : rec])


def test_a_new_shape_or_dtype_reallocates_that_key_only() -> None:
    cuda = FakeCuda()
    ring = PinnedRing("cuda:0", slots=1, backend=cuda)
    ring(batch(0))
    assert cuda.allocated == 3
    out = ring(batch(1, rows=6))  # every key changes shape
    assert cuda.allocated == 6 and out["obs"].shape == (6, 3)
    b = batch(2, rows=6)
    b["obs"] = b["obs"].astype(np.float64)
    out = ring(b)
    assert cuda.allocated == 7 and out["obs"].dtype == torch.float64
    assert out["obs"].numpy().tolist() == b["obs"].tolist()


def test_threads_share_a_ring_safely() -> None:
    cuda = FakeCuda()
    ring = PinnedRing("cuda:0", slots=2, backend=cuda)
    errors: list[str] = []

    def work(k: int) -> None:
        for i in range(50):
            j = 1000 * k + i
            out = ring(batch(j))
            if out["obs"].numpy().tolist() != batch(j)["obs"].tolist():
                errors.append(f"thread {k} batch {i}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors and cuda.allocated == 6


def test_bad_slot_count() -> None:
    with pytest.raises(ValueError, match="slots"):
        PinnedRing("cuda:0", slots=0, backend=FakeCuda())


def fake_cuda_output(monkeypatch: pytest.MonkeyPatch) -> list[FakeCuda]:
    """Buffers' outputs to 'cuda:0' resolve (no CUDA here) and their rings get a fake each."""
    made: list[FakeCuda] = []
    real_device = fw._torch_device

    def device(dev: Any) -> Any:
        return torch.device("cuda:0") if str(dev).startswith("cuda") else real_device(dev)

    def backend(dev: Any) -> FakeCuda:
        made.append(FakeCuda())
        return made[-1]

    monkeypatch.setattr(fw, "_torch_device", device)
    monkeypatch.setattr(fw, "_can_pin", lambda: True)
    monkeypatch.setattr(staging, "CudaBackend", backend)
    return made


def filled(**kwargs: Any) -> rr.ReplayBuffer:
    buf = rr.ReplayBuffer(64, {"obs": rr.Field((3,), np.float32)}, seed=0, **kwargs)
    for t in range(20):
        obs, end = np.full(3, t, np.float32), t % 7 == 6
        buf.add(obs=obs, reward=1.0, terminated=end, truncated=False, next_obs=obs + 0.5)
    return buf


def test_a_buffer_to_cuda_sends_every_sample_through_one_ring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = fake_cuda_output(monkeypatch)
    buf = filled(as_="torch", device="cuda:0")
    twin = filled()
    for _ in range(4):
        tb: Any = buf.sample(8)
        ref = twin.sample(8)
        assert tb.obs.numpy().tolist() == ref.obs.tolist()
        assert tb.ids.numpy().tolist() == ref.ids.tolist()
    assert len(made) == 1 and made[0].log.count(("side_stream",)) == 1
    assert made[0].allocated == 2 * len(tb)  # two slots, allocated once


def test_iterate_resolves_its_output_once(monkeypatch: pytest.MonkeyPatch) -> None:
    made = fake_cuda_output(monkeypatch)
    buf, twin = filled(), filled()
    with buf.iterate(8, prefetch=1, as_="torch", device="cuda:0", timeout=10) as it:
        got = [next(it) for _ in range(5)]
    refs = [twin.sample(8) for _ in range(5)]
    for tb, ref in zip(got, refs, strict=True):
        assert tb.obs.numpy().tolist() == ref.obs.tolist()
    assert len(made) == 1  # one ring for the iterator, not one per batch
    with pytest.raises(rr.ConfigError, match="out: refills a NumPy batch"):
        buf.iterate(8, as_="torch", device="cuda:0", out=buf.sample(8))


CUDA = os.environ.get("RLREPLAY_TEST_DEVICE", "")


@pytest.mark.skipif(
    not (CUDA.startswith("cuda") and torch.cuda.is_available()), reason="needs a CUDA device"
)
def test_on_cuda() -> None:  # pragma: no cover - runs on a GPU only
    ring = PinnedRing(CUDA, slots=2)
    outs = [ring(batch(i, rows=1024)) for i in range(6)]
    torch.cuda.synchronize()
    for i, out in enumerate(outs):
        assert out["obs"].device.type == "cuda"
        assert out["obs"].cpu().numpy().tolist() == batch(i, rows=1024)["obs"].tolist()
