"""Shared pieces of the device buffer's tests: a device buffer and a NumPy core buffer fed the
same stream, and comparisons of what they hold."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

import rlreplay as rr
import rlreplay.torch as rrt

Array = np.ndarray[Any, Any]

FIELDS: dict[str, rr.Field] = {
    "obs": rr.Field((2,), np.float32),
    "action": rr.Field((), np.int32),
}


def make(
    device: str, *, prioritized: bool = False, fields: Mapping[str, rr.Field] | None = None,
    **kwargs: Any,
) -> rrt.DeviceReplayBuffer:  # fmt: skip
    """A device buffer of :data:`FIELDS` (gamma 0.9 unless given)."""
    kwargs.setdefault("gamma", 0.9)
    kwargs.setdefault("seed", 0)
    cls = rrt.DevicePrioritizedReplayBuffer if prioritized else rrt.DeviceReplayBuffer
    return cls(kwargs.pop("capacity"), dict(fields or FIELDS), device=device, **kwargs)


def numpy_twin(buf: rrt.DeviceReplayBuffer, seed: int = 0) -> rr.ReplayBuffer:
    """A fresh NumPy core buffer with ``buf``'s configuration."""
    c = buf.config
    fields = {n: f for n, f in c.schema.fields.items()}
    cls = rr.PrioritizedReplayBuffer if c.prioritized else rr.ReplayBuffer
    return cls(c.capacity, fields, seed=seed, **c.core_kwargs())


def random_step(
    rng: np.random.Generator, num_envs: int, p_end: float = 0.2, p_trunc: float = 0.1
) -> dict[str, Array]:
    """One step of every env, with random episode ends."""
    E = num_envs
    return {
        "obs": rng.standard_normal((E, 2)).astype(np.float32),
        "action": rng.integers(-5, 5, E).astype(np.int32),
        "reward": rng.standard_normal(E).astype(np.float32),
        "terminated": rng.random(E) < p_end,
        "truncated": rng.random(E) < p_trunc,
        "next_obs": rng.standard_normal((E, 2)).astype(np.float32),
    }


def on(step: Mapping[str, Array], device: str) -> dict[str, torch.Tensor]:
    """``step`` as tensors on ``device``."""
    return {k: torch.from_numpy(np.asarray(v)).to(device) for k, v in step.items()}


def numpy_add(np_buf: rr.ReplayBuffer, step: Mapping[str, Array]) -> None:
    """``step`` (leading axis E) into the NumPy core buffer."""
    if np_buf.num_envs == 1:
        np_buf.add(**{k: v[0] for k, v in step.items()})
    else:
        np_buf.add(**step)


class Twins:
    """A device buffer and a NumPy core buffer fed the same steps.

    With ``finals_per_env < env_capacity`` the device buffer may drop an env's oldest episode
    to keep a final observation; :meth:`add` then drops the same steps from the NumPy buffer
    (``dequeue``), which is what that rule is defined to match.
    """

    def __init__(self, buf: rrt.DeviceReplayBuffer, seed: int = 0, tensors: bool = True) -> None:
        self.buf = buf
        self.np_buf = numpy_twin(buf, seed)
        self.tensors = tensors
        self.count = 0
        self.np_head = np.zeros(buf.num_envs, np.int64)
        self.dropped = 0

    def add(self, step: Mapping[str, Array]) -> None:
        ids = self.buf.add(**(on(step, str(self.buf.device)) if self.tensors else step))
        E = self.buf.num_envs
        np.testing.assert_array_equal(ids.cpu().numpy(), self.count * E + np.arange(E))
        numpy_add(self.np_buf, step)
        self.count += 1
        C = self.buf.env_capacity
        self.np_head = np.maximum(self.np_head, self.count - C)
        head = self.buf._ring.head.cpu().numpy()
        for e in np.flatnonzero(head > self.np_head):
            n = int(head[e] - self.np_head[e])
            self.np_buf.dequeue(n, env_ids=[int(e)])
            self.np_head[e] = head[e]
            self.dropped += n

    def clear(self) -> None:
        self.buf.clear()
        self.np_buf.clear()
        self.np_head[:] = self.count


def host(batch: Mapping[str, Any]) -> dict[str, Array]:
    """A batch's tensors as NumPy arrays."""
    return {
        k: v.cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
        for k, v in batch.items()
    }


def assert_bit_identical(ours: Mapping[str, Array], theirs: Mapping[str, Array]) -> None:
    """Same keys in the same order, same dtypes and values bit for bit."""
    assert list(ours) == list(theirs), (list(ours), list(theirs))
    for key, want in theirs.items():
        got = ours[key]
        assert got.shape == want.shape, (key, got.shape, want.shape)
        assert got.dtype == want.dtype.newbyteorder("="), (key, got.dtype, want.dtype)
        assert got.tobytes() == want.astype(got.dtype).tobytes(), (key, got, want)


def assert_same_contents(tw: Twins) -> None:
    """The same sampleable ids (in the core's order), and for each the same transition bit
    for bit."""
    ids = tw.buf.sampleable_ids().cpu().numpy()
    np.testing.assert_array_equal(ids, tw.np_buf.sampleable_ids())
    assert int(tw.buf.num_sampleable) == tw.np_buf.num_sampleable
    if ids.shape[0] == 0:
        return
    ours = host(tw.buf.get_transitions(torch.from_numpy(ids).to(tw.buf.device)))
    theirs = {k: np.asarray(v) for k, v in tw.np_buf.get_transitions(ids).items()}
    assert_bit_identical(ours, theirs)
