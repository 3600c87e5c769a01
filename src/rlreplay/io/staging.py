"""Host-to-GPU copies of NumPy batches through reused pinned buffers on a side CUDA stream.

:class:`PinnedRing` is what a buffer's torch output (``as_="torch", device="cuda:0"``) and the
:meth:`~rlreplay.ReplayBuffer.iterate` prefetcher send batches through. For each batch it

1. takes the next of ``slots`` *slots*: page-locked host tensors, one per key of the batch,
   allocated once and reused while the key's shape and dtype stay the same (a new shape or
   dtype reallocates that tensor only);
2. waits, if needed, until the copy that last read the slot has finished (a CUDA event: with
   two slots, the copy of batch ``i`` runs while batch ``i + 1`` is written on the host);
3. writes the batch into the slot with NumPy (one host copy, as ``Tensor.pin_memory`` makes);
4. enqueues the host-to-device copies on the ring's own CUDA stream (``non_blocking=True``), so
   they overlap the kernels already queued on the caller's stream (the learner's step) instead
   of waiting behind them;
5. makes the caller's current stream wait for those copies (``wait_stream``) and marks each
   device tensor as used by it (``record_stream``), so the tensors are safe to use on that
   stream at once and their memory is not reused before the caller's work on them is done.

Compared with pinning each batch afresh (a page-locked allocation per array, then the copy on
the caller's stream), the ring allocates nothing in the steady state and moves the copies off
the learner's stream. The host waits only in step 2, and only when ``slots`` copies are still
in flight.

Threads: a ring serialises its calls with a lock (slots are shared state); calls from one
producer thread, as :meth:`~rlreplay.ReplayBuffer.iterate` makes, never contend.

The CUDA calls go through a small backend object (:class:`CudaBackend`), so the ring's
bookkeeping is tested on machines without a GPU with a fake one; on a GPU the same tests run
against CUDA (``RLREPLAY_TEST_DEVICE=cuda:0``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import numpy as np

__all__ = ["Backend", "CudaBackend", "PinnedRing"]

Array = np.ndarray[Any, Any]


class Backend(Protocol):
    """What :class:`PinnedRing` needs from CUDA (see :class:`CudaBackend`)."""

    def pinned(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A page-locked host tensor of ``shape`` holding ``dtype`` (native byte order)."""

    def side_stream(self) -> Any:
        """A new stream on the device, for the copies."""

    def current_stream(self) -> Any:
        """The caller's current stream on the device."""

    def on(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        """A context in which work is enqueued on ``stream``."""

    def event(self) -> Any:
        """A new event (``record(stream)``, ``synchronize()``)."""

    def copy(self, host: Any) -> Any:
        """``host`` copied to the device without blocking the host."""

    def keep(self, tensor: Any, stream: Any) -> None:
        """Mark ``tensor``'s memory as used by ``stream`` (not reused before its work ends)."""


class CudaBackend:
    """:class:`Backend` on a CUDA device, with :mod:`torch.cuda`."""

    def __init__(self, device: Any) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)

    def pinned(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        torch = self._torch
        like = torch.from_numpy(np.empty(0, dtype))
        return torch.empty(shape, dtype=like.dtype, pin_memory=True)

    def side_stream(self) -> Any:
        return self._torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]

    def current_stream(self) -> Any:
        return self._torch.cuda.current_stream(self.device)

    def on(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return self._torch.cuda.stream(stream)

    def event(self) -> Any:
        return self._torch.cuda.Event()  # type: ignore[no-untyped-call]

    def copy(self, host: Any) -> Any:
        return host.to(self.device, non_blocking=True)

    def keep(self, tensor: Any, stream: Any) -> None:
        tensor.record_stream(stream)


class _Slot:
    """One set of pinned host tensors (by key) and the event of the copy that last read them."""

    __slots__ = ("done", "hosts")

    def __init__(self) -> None:
        self.hosts: dict[str, tuple[Any, Array]] = {}  # key -> (pinned tensor, its NumPy view)
        self.done: Any = None

    def host(self, backend: Backend, name: str, arr: Array) -> tuple[Any, Array]:
        """The slot's pinned tensor for ``name``, (re)allocated for ``arr``'s shape and dtype."""
        held = self.hosts.get(name)
        dtype = arr.dtype.newbyteorder("=")
        if held is None or held[1].shape != arr.shape or held[1].dtype != dtype:
            tensor = backend.pinned(arr.shape, dtype)
            held = (tensor, tensor.numpy())
            self.hosts[name] = held
        return held


class PinnedRing:
    """Sends NumPy batches to a CUDA device through ``slots`` reused pinned buffers on a side
    stream (see the module docstring).

    Args:
        device: The CUDA device (``"cuda:0"``, a :class:`torch.device`).
        slots: Pinned buffer sets in rotation (``>= 1``; 2 lets one batch be written while
            the previous one is copied).
        backend: The CUDA calls (default: :class:`CudaBackend` of ``device``).
    """

    def __init__(self, device: Any, slots: int = 2, backend: Backend | None = None) -> None:
        if slots < 1:
            raise ValueError(f"slots: expected an int >= 1, got {slots!r}")
        self.backend: Backend = CudaBackend(device) if backend is None else backend
        self._slots = [_Slot() for _ in range(slots)]
        self._next = 0
        self._stream: Any = None  # made on first use (a stream needs the device's context)
        self._lock = threading.Lock()

    @property
    def slots(self) -> int:
        return len(self._slots)

    def __call__(self, batch: Mapping[str, Array]) -> dict[str, Any]:
        """Every array of ``batch`` as a tensor on the device, usable on the caller's current
        stream at once."""
        backend = self.backend
        with self._lock:
            if self._stream is None:
                self._stream = backend.side_stream()
            stream = self._stream
            slot = self._slots[self._next]
            self._next = (self._next + 1) % len(self._slots)
            if slot.done is not None:
                slot.done.synchronize()  # the copy that last read this slot has finished
                slot.done = None
            out: dict[str, Any] = {}
            with backend.on(stream):
                for name, arr in _arrays(batch):
                    tensor, view = slot.host(backend, name, arr)
                    np.copyto(view, arr, casting="equiv")
                    out[name] = backend.copy(tensor)
                done = backend.event()
                done.record(stream)
            slot.done = done
            current = backend.current_stream()
            current.wait_stream(stream)
            for tensor in out.values():
                backend.keep(tensor, current)
        return out


def _arrays(batch: Mapping[str, Any]) -> Iterator[tuple[str, Array]]:
    for name, value in batch.items():
        yield name, np.asarray(value)
