"""Shared pieces of the JAX buffer's tests: a JAX buffer and a NumPy core buffer fed the same
stream, and comparisons of what they hold.

Buffers are cached by configuration (:func:`pair`'s arguments), so every test and Hypothesis
example of one configuration reuses the same compiled functions; id arrays passed to the
compiled functions are padded to a fixed length for the same reason.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

import rlreplay as rr
import rlreplay.jax as rrj

Array = np.ndarray[Any, Any]

FIELDS: dict[str, rr.Field] = {
    "obs": rr.Field((2,), np.float32),
    "action": rr.Field((), np.int32),
}


@functools.cache
def jax_buffer(
    capacity: int,
    num_envs: int,
    n_step: int = 1,
    frame_stack: int = 1,
    stack_pad: str = "zero",
    prioritized: bool = False,
    finals_per_env: int | None = None,
    gamma: float = 0.9,
    alpha: float = 0.6,
    stratified: bool = True,
    next_fields: tuple[str, ...] = (),
    eps: float = 1e-6,
    variant: str = "proportional",
    recent_ratio: float = 0.0,
    recent_steps: int = 1,
) -> rrj.JaxBuffer:
    """One JAX buffer per configuration for the whole test session (compiled once)."""
    return rrj.make_buffer(
        capacity, FIELDS, num_envs=num_envs, n_step=n_step, gamma=gamma,
        frame_stack=frame_stack, stack_pad=stack_pad, prioritized=prioritized,
        finals_per_env=finals_per_env, alpha=alpha, beta=0.4, stratified=stratified,
        next_fields=next_fields, eps=eps, variant=variant, recent_ratio=recent_ratio,
        recent_steps=recent_steps,
    )  # fmt: skip


def numpy_twin(buf: rrj.JaxBuffer, seed: int = 0) -> rr.ReplayBuffer:
    """A fresh NumPy core buffer with ``buf``'s configuration."""
    c = buf.config
    kwargs: dict[str, Any] = dict(
        num_envs=c.num_envs, n_step=c.n_step, gamma=c.gamma, frame_stack=c.frame_stack,
        stack_pad=c.stack_pad, next_fields=c.next_fields, seed=seed,
    )  # fmt: skip
    if c.prioritized:
        return rr.PrioritizedReplayBuffer(c.capacity, FIELDS, **c.prioritized_kwargs(), **kwargs)
    return rr.ReplayBuffer(
        c.capacity, FIELDS, recent_ratio=c.recent_ratio, recent_steps=c.recent_steps, **kwargs
    )


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


def numpy_add(np_buf: rr.ReplayBuffer, step: Mapping[str, Array]) -> None:
    """``step`` (leading axis E) into the NumPy core buffer."""
    if np_buf.num_envs == 1:
        np_buf.add(**{k: v[0] for k, v in step.items()})
    else:
        np_buf.add(**step)


class Twins:
    """A JAX buffer's state and a NumPy core buffer fed the same steps.

    With ``finals_per_env < env_capacity`` the JAX buffer may drop an env's oldest episode to
    keep a final observation; :meth:`add` then drops the same steps from the NumPy buffer
    (``dequeue``), which is what that rule is defined to match.
    """

    def __init__(self, buf: rrj.JaxBuffer, seed: int = 0) -> None:
        self.buf = buf
        self.state = buf.init()
        self.np_buf = numpy_twin(buf, seed)
        self.count = 0
        self.np_head = np.zeros(buf.num_envs, np.int64)
        self.dropped = 0

    def add(self, step: Mapping[str, Array]) -> None:
        self.state = self.buf.add(self.state, step)
        numpy_add(self.np_buf, step)
        self.count += 1
        C = self.buf.env_capacity
        self.np_head = np.maximum(self.np_head, self.count - C)
        head = np.asarray(self.state.head)
        for e in np.flatnonzero(head > self.np_head):
            n = int(head[e] - self.np_head[e])
            self.np_buf.dequeue(n, env_ids=[int(e)])
            self.np_head[e] = head[e]
            self.dropped += n

    def clear(self) -> None:
        self.state = self.buf.clear(self.state)
        self.np_buf.clear()
        self.np_head[:] = self.count

    def abandon(self, env_id: int) -> None:
        """Abandon env ``env_id``'s running episode in both buffers."""
        self.state = self.buf.abandon_episode(self.state, env_id)
        self.np_buf.abandon_episode(env_id)


def jax_sampleable_ids(buf: rrj.JaxBuffer, state: rrj.BufferState) -> Array:
    """Every sampleable id of a JAX buffer, sorted: its ranges ``[lo, hi)`` on the host, less
    the holes of abandoned episodes (the per-row marks of :mod:`rlreplay.jax.holes`)."""
    lo, hi = np.asarray(state.lo), np.asarray(state.hi)
    hole = np.asarray(state.hole)
    E, C = buf.num_envs, buf.env_capacity
    ids = []
    for e in range(E):
        t = np.arange(lo[e], hi[e], dtype=np.int64)
        ids.append(t[hole[(t % C) * E + e] != t] * E + e)
    return np.sort(np.concatenate(ids))


def padded(ids: Array, size: int) -> Array:
    """``ids`` padded to ``size`` with its first id (one compiled shape for every call)."""
    out = np.full(size, ids[0] if ids.shape[0] else 0, np.int64)
    out[: ids.shape[0]] = ids
    return out


def update_padded(
    buf: rrj.JaxBuffer, state: rrj.BufferState, ids: Array, priorities: Array
) -> rrj.BufferState:
    """``update_priorities`` with ids padded to the capacity by -1 (ignored): one compiled
    shape per configuration."""
    pad = buf.capacity - ids.shape[0]
    ids = np.concatenate([ids, np.full(pad, -1)])
    return buf.update_priorities(state, ids, np.concatenate([priorities, np.zeros(pad)]))


def host_batch(batch: Mapping[str, Any], n: int | None = None) -> dict[str, Array]:
    out = {k: np.asarray(v) for k, v in batch.items()}
    return out if n is None else {k: v[:n] for k, v in out.items()}


def assert_bit_identical(ours: Mapping[str, Array], theirs: Mapping[str, Array]) -> None:
    """Same keys in the same order, same values bit for bit (dtypes as JAX stores them)."""
    assert list(ours) == list(theirs), (list(ours), list(theirs))
    for key, want in theirs.items():
        got = ours[key]
        assert got.shape == want.shape, (key, got.shape, want.shape)
        if want.dtype.kind in "iub":
            np.testing.assert_array_equal(got, want, err_msg=key)
        else:
            assert got.dtype == want.dtype, (key, got.dtype, want.dtype)
            assert got.tobytes() == want.tobytes(), (key, got, want)


def assert_same_contents(tw: Twins, size: int | None = None) -> None:
    """The same sampleable ids, and for each the same transition bit for bit."""
    ids = jax_sampleable_ids(tw.buf, tw.state)
    np.testing.assert_array_equal(ids, np.sort(tw.np_buf.sampleable_ids()))
    if ids.shape[0] == 0:
        return
    size = size or tw.buf.capacity
    ours = host_batch(tw.buf.get_transitions(tw.state, padded(ids, size)), ids.shape[0])
    theirs = {k: np.asarray(v) for k, v in tw.np_buf.get_transitions(ids).items()}
    assert_bit_identical(ours, theirs)
