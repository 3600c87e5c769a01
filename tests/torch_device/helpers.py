"""Devices under test, and a counter of host synchronisations."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

DEVICES = ["cpu"] + [d for d in [os.environ.get("RLREPLAY_TEST_DEVICE")] if d and d != "cpu"]

# Tensor methods that read a tensor's values on the host (for a device tensor: wait for the
# device, then copy), and ops whose output shape depends on values (which must read a count on
# the host).
SYNCING = frozenset(
    {
        "item", "cpu", "tolist", "numpy", "__bool__", "__index__", "__int__", "__float__",
        "__complex__", "nonzero", "masked_select", "unique", "unique_consecutive", "argwhere",
        "repeat_interleave", "bincount",
    }
)  # fmt: skip


class CountSyncs(TorchFunctionMode):
    """Counts, by name, the calls of :data:`SYNCING` on tensors while it is active (and of
    ``Tensor.to`` / ``copy_`` towards the CPU from another device)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", str(func))
        if name in SYNCING:
            self.calls[name] += 1
        elif name in ("to", "copy_") and args and isinstance(args[0], torch.Tensor):
            if name == "to":
                target = [a for a in args[1:] if isinstance(a, torch.device | str)]
                dev = kwargs.get("device", target[0] if target else None)
                to_cpu = dev is not None and torch.device(dev).type == "cpu"
                if to_cpu and args[0].device.type != "cpu":
                    self.calls["to(cpu)"] += 1
            elif args[0].device.type == "cpu" and len(args) > 1:
                src = args[1]
                if isinstance(src, torch.Tensor) and src.device.type != "cpu":
                    self.calls["copy_(to cpu)"] += 1
        return func(*args, **kwargs)


@contextlib.contextmanager
def no_host_sync(device: str) -> Iterator[CountSyncs]:
    """A :class:`CountSyncs` over the block; on a CUDA device also torch's sync debug mode set
    to ``"error"`` (any synchronising CUDA call raises)."""
    cuda = torch.device(device).type == "cuda"
    previous = torch.cuda.get_sync_debug_mode() if cuda else 0
    if cuda:
        torch.cuda.set_sync_debug_mode("error")
    try:
        with CountSyncs() as counter:
            yield counter
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(previous)
