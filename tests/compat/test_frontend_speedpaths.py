"""The ReAgent and keras-gym front-ends' speed shortcuts give what the general paths give.

``benchmarks/bench_compat_frontends.py`` times the front-ends against their originals; the
shortcuts it led to change no value, dtype, shape, exception or random draw, and each is
compared here with the general path it replaces:

* ``_assembly.c_contiguous`` copies a non-contiguous array with a short last axis (frame
  stacks moved to the last axis) one last-axis entry at a time, against NumPy's
  ``copy(order="C")``;
* ``_assembly.window_rewards`` reads the n-step window rewards from the reward column only,
  against the core's ``get_sequences(ids, n)["reward"]`` (which gathers every field), in whole
  ``sample_transition_batch`` results over Hypothesis sequences of adds (episode ends, wraps,
  negative, infinite and vector rewards).
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import rlreplay.compat.reagent._assembly as assembly
from rlreplay.compat.reagent import PrioritizedReplayBuffer, ReplayBuffer
from rlreplay.compat.reagent._kernels import interleaved

DTYPES = [np.uint8, np.float32, np.float64, np.int64, np.bool_, np.complex64]


@settings(max_examples=150, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    shape=hnp.array_shapes(min_dims=2, max_dims=4, max_side=20),
    perm_seed=st.integers(0, 2**16),
    step=st.sampled_from([None, 2]),
)
def test_c_contiguous_matches_numpy_copy(
    dtype: Any, shape: tuple[int, ...], perm_seed: int, step: int | None
) -> None:
    rng = np.random.default_rng(perm_seed)
    base = (rng.standard_normal(shape) * 50).astype(dtype)
    arr = np.moveaxis(base, int(rng.integers(len(shape))), -1)[..., ::step]
    got = assembly.c_contiguous(arr)
    if arr.flags.c_contiguous:  # returned as it is, on both paths
        assert got is arr
        return
    want = arr.copy(order="C")
    assert got.flags.c_contiguous and got.flags.writeable and got.flags.owndata
    assert got.dtype == want.dtype and got.shape == want.shape and got.strides == want.strides
    assert got.tobytes() == want.tobytes()
    assert not np.shares_memory(got, base)


def test_c_contiguous_keeps_contiguous_and_0d() -> None:
    a = np.arange(12.0).reshape(3, 4)
    assert assembly.c_contiguous(a) is a
    zero_d = assembly.c_contiguous(np.float32(2.5))
    assert zero_d.shape == () and zero_d.dtype == np.float32
    long_last = np.arange(200).reshape(10, 20).T  # last axis 10, strided, copied by NumPy
    assert assembly.c_contiguous(long_last).tobytes() == long_last.copy(order="C").tobytes()


def general_window_rewards(core: Any, ids: Any, m: Any, n: int) -> Any:
    """The general path: the core's runs, every field gathered."""
    return core.get_sequences(ids, n, within_episode=True)["reward"]


steps_strategy = st.lists(
    st.tuples(
        st.sampled_from([0.0, -0.0, 1.5, -2.25, 1e30, np.inf, -np.inf, 3.0]),
        st.booleans(),
    ),
    min_size=1,
    max_size=60,
)


def _fill(buf: Any, steps: list[tuple[float, bool]], vector: bool, prio: bool) -> None:
    for t, (r, end) in enumerate(steps):
        reward = np.array([r, -r], np.float32) if vector else r
        extra = (1.0 + t % 3,) if prio else ()
        buf.add(np.full(3, t, np.float32), t % 3, reward, int(end), *extra)


def _batches_equal(a: Any, b: Any) -> None:
    assert a._fields == b._fields
    for name, x, y in zip(a._fields, a, b, strict=True):
        if isinstance(x, list):
            assert len(x) == len(y)
            pairs = list(zip(x, y, strict=True))
        else:
            pairs = [(x, y)]
        for u, v in pairs:
            assert isinstance(u, torch.Tensor) and isinstance(v, torch.Tensor), name
            assert u.dtype == v.dtype and u.shape == v.shape, name
            assert u.numpy().tobytes() == v.numpy().tobytes(), name


@settings(max_examples=80, deadline=None)
@given(
    steps=steps_strategy,
    horizon=st.integers(1, 4),
    capacity=st.integers(8, 30),
    stack=st.integers(1, 3),
    vector=st.booleans(),
    prio=st.booleans(),
    timeline=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_window_rewards_match_sequences(
    steps: list[tuple[float, bool]],
    horizon: int,
    capacity: int,
    stack: int,
    vector: bool,
    prio: bool,
    timeline: bool,
    seed: int,
) -> None:
    cls = PrioritizedReplayBuffer if prio else ReplayBuffer
    kwargs: dict[str, Any] = dict(
        observation_shape=(3,),
        stack_size=stack,
        replay_capacity=capacity,
        batch_size=8,
        update_horizon=horizon,
        gamma=0.9,
        observation_dtype=np.float32,
        reward_shape=(2,) if vector else (),
    )
    if not prio and horizon > 1:
        kwargs["return_as_timeline_format"] = timeline
    results = []
    for path in (assembly.window_rewards, general_window_rewards):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(assembly, "window_rewards", path)
            buf = cls(**kwargs)
            _fill(buf, steps, vector, prio)
            if not buf._is_valid.any():
                return
            with np.errstate(all="ignore"):
                torch.manual_seed(seed)
                np.random.seed(seed)  # noqa: NPY002 (0.1's draws: the global generators)
                random.seed(seed)
                drawn = [buf.sample_transition_batch(batch_size=8) for _ in range(3)]
                every = np.flatnonzero(buf._is_valid)
                drawn.append(buf.sample_transition_batch(batch_size=every.size, indices=every))
        results.append(drawn)
    for a, b in zip(*results, strict=True):
        _batches_equal(a, b)


class GeneralPriorityWrites(PrioritizedReplayBuffer):
    """A step's priority writes as four calls (the general sequence), never the shortcut."""

    def _release(self, slot: int, *, for_step: bool = False) -> None:
        self._slot_tree._set_many(np.array([slot]), np.zeros(1))
        old = int(self._slot_id[slot])
        if old >= 0:
            self._prio_core.update_priorities(np.array([old]), np.zeros(1))
        ReplayBuffer._release(self, slot)

    def _on_step_written(self, new_id: int, values: Any) -> None:
        p = self._priority_of(values)
        self._prio_core.update_priorities(np.array([new_id]), np.array([p]))
        self._slot_tree._set_many(np.array([self.cursor()]), np.array([p]))
        self._max_recorded_priority = max(self._max_recorded_priority, p)


def _priority_state(buf: Any) -> tuple[Any, ...]:
    core = buf._prio_core
    ids = core.sampleable_ids()
    stored = np.unique(buf._slot_id[buf._slot_id >= 0])
    return (
        buf.get_priority(np.arange(buf._replay_capacity, dtype=np.int32)).tobytes(),
        buf._max_recorded_priority,
        core.max_priority,
        core.get_priorities(ids).tobytes(),
        ids.tobytes(),
        stored.tobytes(),
        buf._is_valid.tobytes(),
        buf.size,
    )


op_strategy = st.one_of(
    st.tuples(
        st.just("add"),
        st.sampled_from([None, 0.0, 0.5, 1.0, 7.0, 1e300, 1.7e308]),
        st.booleans(),
    ),
    st.tuples(st.just("sample"), st.integers(1, 6), st.booleans()),
    st.tuples(st.just("set"), st.sampled_from([0.0, 0.25, 3.0, 1e300]), st.booleans()),
)


@settings(max_examples=80, deadline=None)
@given(
    ops=st.lists(op_strategy, min_size=1, max_size=70),
    capacity=st.integers(5, 16),
    horizon=st.integers(1, 3),
    stack=st.integers(1, 2),
    seed=st.integers(0, 1000),
)
def test_step_priority_shortcut_matches_general_writes(
    ops: list[tuple[Any, ...]], capacity: int, horizon: int, stack: int, seed: int
) -> None:
    kwargs: dict[str, Any] = dict(
        observation_shape=(2,),
        stack_size=stack,
        replay_capacity=capacity,
        batch_size=4,
        update_horizon=horizon,
        observation_dtype=np.float32,
    )
    logs = []
    for cls in (PrioritizedReplayBuffer, GeneralPriorityWrites):
        buf = cls(**kwargs)
        log: list[Any] = []
        random.seed(seed)
        np.random.seed(seed)  # noqa: NPY002
        for t, (op, x, flag) in enumerate(ops):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                _apply(buf, log, t, op, x, flag)
            log.append([str(w.message) for w in caught])
        logs.append(log)
    assert logs[0] == logs[1]


def _apply(buf: Any, log: list[Any], t: int, op: str, x: Any, flag: bool) -> None:
    """One operation; what it returns or raises goes to ``log``, then the priority state."""
    try:
        if op == "add":
            buf.add(np.full(2, t, np.float32), t % 2, float(t), int(flag), x)
            log.append("added")
        elif op == "sample":
            batch = buf.sample_transition_batch(batch_size=x)
            log.append([v.numpy().tobytes() for v in batch])
            if flag:
                buf.set_priority(batch.indices.reshape(-1).int(), np.full(x, 2.0))
        else:
            slots = np.flatnonzero(buf._is_valid)[:2].astype(np.int32)
            buf.set_priority(slots, np.full(slots.size, x))
            log.append("set")
    except Exception as e:  # the same exceptions, at the same operations
        log.append((type(e), str(e)))
    log.append(_priority_state(buf))


@pytest.mark.parametrize(
    ("dtype", "k"),
    [
        (np.uint8, 2),
        (np.uint8, 4),
        (np.uint8, 8),
        (np.int16, 2),
        (np.int16, 4),
        (np.float32, 2),
        (np.bool_, 4),
        (np.float16, 4),
    ],
)
def test_packed_frame_stacks_are_numpy_copies(dtype: Any, k: int) -> None:
    # The word-per-pixel kernel (frames of 2, 4 or 8 bytes per pixel) against NumPy's copy.
    frames = (np.random.default_rng(k).standard_normal((3, k, 5, 7)) * 60).astype(dtype)
    view = np.moveaxis(frames, 1, -1)
    got = interleaved(view)
    assert got is not None and got.flags.c_contiguous and got.flags.owndata
    assert got.dtype == view.dtype and got.shape == view.shape
    assert got.tobytes() == view.copy(order="C").tobytes()


def test_frame_stacks_the_kernel_leaves_to_numpy() -> None:
    for k, dtype in ((3, np.uint8), (4, np.float64), (2, np.complex64)):
        assert interleaved(np.moveaxis(np.zeros((2, k, 4), dtype), 1, -1)) is None
    assert interleaved(np.zeros((2, 4, 4), np.uint8)[..., ::2]) is None  # not a moved stack


class ImmediatePriorityWrites(PrioritizedReplayBuffer):
    """Every step priority written at its add (no deferred writes)."""

    def _deferrable(self, p: float) -> bool:
        return False


deferral_ops = st.one_of(
    st.tuples(
        st.just("add"),
        st.sampled_from([None, 0.0, 0.5, 1.0, 7.0, 1e300, 1.7e308]),
        st.booleans(),
    ),
    st.tuples(st.just("adds"), st.integers(1, 40), st.booleans()),
    st.tuples(st.just("sample"), st.integers(1, 6), st.booleans()),
    st.tuples(st.just("set"), st.sampled_from([0.0, 0.25, 3.0, 1e300]), st.booleans()),
    st.tuples(st.just("check"), st.none(), st.booleans()),
)


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(deferral_ops, min_size=1, max_size=40),
    capacity=st.integers(65, 90),
    horizon=st.integers(1, 3),
    stack=st.integers(1, 2),
    seed=st.integers(0, 1000),
    seeded=st.booleans(),
)
def test_deferred_step_priorities_match_immediate_writes(
    ops: list[tuple[Any, ...]], capacity: int, horizon: int, stack: int, seed: int, seeded: bool
) -> None:
    # Step priorities wait for the next read of a tree; reads between adds ("check": every
    # priority, the core's too) and draws (0.1's and the core's, seed=) see what immediate
    # writes give. Bursts of adds ("adds") wrap the ring and fill the deferred list.
    kwargs: dict[str, Any] = dict(
        observation_shape=(2,),
        stack_size=stack,
        replay_capacity=capacity,
        batch_size=4,
        update_horizon=horizon,
        observation_dtype=np.float32,
        seed=seed if seeded else None,
    )
    logs = []
    for cls in (PrioritizedReplayBuffer, ImmediatePriorityWrites):
        buf = cls(**kwargs)
        log: list[Any] = []
        random.seed(seed)
        np.random.seed(seed)  # noqa: NPY002
        t = 0
        with warnings.catch_warnings(record=True) as caught:  # float32 reads of 1e300
            warnings.simplefilter("always")
            for op, x, flag in ops:
                if op == "check":
                    log.append(_priority_state(buf))
                    continue
                for _ in range(x if op == "adds" else 1):
                    p = 1.0 + (t % 5) if op == "adds" else x
                    _apply_only(buf, log, t, "add" if op == "adds" else op, p, flag)
                    t += 1
            log.append(_priority_state(buf))
        log.append([str(w.message) for w in caught])
        logs.append(log)
    assert logs[0] == logs[1]


def _apply_only(buf: Any, log: list[Any], t: int, op: str, x: Any, flag: bool) -> None:
    """:func:`_apply` without the priority state after it (a read that writes what waits)."""
    try:
        if op == "add":
            buf.add(np.full(2, t, np.float32), t % 2, float(t), int(flag and t % 3 == 0), x)
            log.append("added")
        elif op == "sample":
            batch = buf.sample_transition_batch(batch_size=x)
            log.append([v.numpy().tobytes() for v in batch])
            if flag:
                buf.set_priority(batch.indices.reshape(-1).int(), np.full(x, 2.0))
        else:
            slots = np.flatnonzero(buf._is_valid)[:2].astype(np.int32)
            buf.set_priority(slots, np.full(slots.size, x))
            log.append("set")
    except Exception as e:  # the same exceptions, at the same operations
        log.append((type(e), str(e)))
