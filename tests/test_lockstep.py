"""The lockstep kernel: one compiled, checked write of a step of every env.

The kernel on its own against NumPy's strided assignment, then buffers that take it against
buffers on the general path (same state, ids and errors), including the values its dispatcher
turns away and the back-off that follows.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.writing import lockstep
from rlreplay.writing.lockstep import ENDING, MISMATCH, STORED, LockstepKernel
from tests.test_fast_path import assert_same_state, kernel_soon

E, C = 3, 5
FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}


def columns_and_kernel(
    spec: dict[str, tuple[Any, tuple[int, ...]]], finals: tuple[str, ...] = ()
) -> tuple[dict[str, Any], LockstepKernel]:
    cols: dict[str, Any] = {n: np.zeros((E * C, *shape), dt) for n, (dt, shape) in spec.items()}
    names = (*spec, *finals)
    fields = {n: (np.dtype(spec[n.removeprefix("next_")][0]), spec[n.removeprefix("next_")][1])
              for n in names}  # fmt: skip
    kernel = LockstepKernel(names, fields, {n: cols.get(n) for n in names}, E, C)
    return cols, kernel


SPEC = {
    "obs": (np.uint8, (2, 3)),
    "action": (np.int64, ()),
    "reward": (np.float32, (2,)),
    "terminated": (np.bool_, ()),
    "truncated": (np.bool_, ()),
}


def values_for(t: int, ends: tuple[bool, ...] = (False,) * E) -> list[Any]:
    e = np.arange(E)
    return [
        (t * 10 + e[:, None, None] + np.arange(6).reshape(2, 3)).astype(np.uint8),
        (t * 100 + e).astype(np.int64),
        np.stack([e + t, -e - t], 1).astype(np.float32),
        np.array(ends, bool),
        np.zeros(E, bool),
        np.zeros((E, 2, 3), np.uint8),  # next_obs: checked, not stored
    ]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=12))
def test_the_kernel_writes_what_a_strided_assignment_writes(steps: list[int]) -> None:
    cols, kernel = columns_and_kernel(SPEC, finals=("next_obs",))
    ref = {n: c.copy() for n, c in cols.items()}
    for t in steps:
        vals = values_for(t)
        assert kernel.call(kernel.table, t, *vals) == STORED
        for name, v in zip(SPEC, vals, strict=False):
            ref[name][t % C :: C] = v
        np.testing.assert_array_equal(kernel.ids, t * E + np.arange(E))
        for name in SPEC:
            np.testing.assert_array_equal(cols[name], ref[name], err_msg=name)


def test_the_kernel_writes_nothing_for_an_ending_step_or_a_wrong_shape() -> None:
    cols, kernel = columns_and_kernel(SPEC, finals=("next_obs",))
    before = {n: c.copy() for n, c in cols.items()}
    assert kernel.call(kernel.table, 4, *values_for(4, (False, True, False))) == ENDING
    bad = values_for(4)
    bad[2] = np.zeros((E, 3), np.float32)  # reward of shape (3,), not (2,)
    assert kernel.call(kernel.table, 4, *bad) == MISMATCH
    bad = values_for(4, (True, False, False))
    bad[5] = np.zeros((E, 3, 2), np.uint8)  # a wrong final observation outranks the end
    assert kernel.call(kernel.table, 4, *bad) == MISMATCH
    bad = [v[:2] for v in values_for(4)]  # two envs' rows, not three
    assert kernel.call(kernel.table, 4, *bad) == MISMATCH
    for name in SPEC:
        np.testing.assert_array_equal(cols[name], before[name], err_msg=name)


@pytest.mark.parametrize(
    "change",
    [
        lambda v: v.astype(np.float64),  # another dtype
        lambda v: np.asfortranarray(np.repeat(v, 2, axis=1))[:, ::2],  # not contiguous
        lambda v: np.frombuffer(v.tobytes(), v.dtype).reshape(v.shape),  # read-only
    ],
)
def test_the_dispatcher_turns_away_values_of_other_types(change: Any) -> None:
    cols, kernel = columns_and_kernel(SPEC)
    vals = values_for(1)[:5]
    vals[2] = change(vals[2])
    with pytest.raises(TypeError):
        kernel.call(kernel.table, 1, *vals)
    assert not any(c.any() for c in cols.values())


def test_schemas_the_kernel_does_not_cover_are_refused() -> None:
    with pytest.raises(rr.ConfigError, match="values"):
        LockstepKernel(tuple(f"f{i}" for i in range(13)), {}, {}, E, C)
    cols = {"x": np.zeros((E * C, 1, 1, 1, 1, 1), np.float32)}
    with pytest.raises(rr.ConfigError, match="dimensions"):
        LockstepKernel(("x",), {"x": (np.dtype(np.float32), (1,) * 5)}, cols, E, C)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- in a buffer
def vector_step(c: int, envs: int, ends: list[bool] | None = None) -> dict[str, Any]:
    e = np.arange(envs)
    return {
        "obs": np.stack([c + e, -c - e], 1).astype(np.float32),
        "action": (c * 10 + e).astype(np.int64),
        "reward": (e % 3).astype(np.float32),
        "terminated": np.array(ends or [False] * envs, bool),
        "truncated": np.zeros(envs, bool),
        "next_obs": np.stack([c + e + 0.5, -c - e], 1).astype(np.float32),
    }


def buffers(envs: int = 4, **kw: Any) -> tuple[rr.ReplayBuffer, rr.ReplayBuffer]:
    fast = rr.ReplayBuffer(envs * 6, FIELDS, num_envs=envs, seed=2, **kw)
    ref = rr.ReplayBuffer(envs * 6, FIELDS, num_envs=envs, seed=2, **kw)
    ref._fast_add = False
    fast._writer._countdown[0] = 3  # the kernel after three plain steps
    return fast, ref


def test_a_vector_buffer_compiles_its_kernel_after_some_plain_steps() -> None:
    fast, ref = buffers()
    for c in range(41):  # the last step is plain
        if c == 2:
            assert fast._writer.lockstep_kernel is None
        values = vector_step(c, 4, [c % 9 == 8, False, c % 5 == 4, False])
        np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
    assert fast._writer.lockstep_kernel is not None
    assert fast._index._pending > 0  # plain steps went through the kernel, deferred
    assert_same_state(fast, ref)
    np.testing.assert_array_equal(fast.sample(8).obs, ref.sample(8).obs)


def test_the_default_countdown_and_the_buffers_that_never_compile() -> None:
    assert rr.ReplayBuffer(8, FIELDS, num_envs=2)._writer._countdown[0] == lockstep.ACTIVATE_AFTER
    one = rr.ReplayBuffer(8, FIELDS, seed=0)
    returns = rr.ReplayBuffer(8, FIELDS, num_envs=2, record_episodic_return=True)
    for buf, envs in ((one, 1), (returns, 2)):
        buf._writer._countdown[0] = 1
        for c in range(5):
            values = vector_step(c, envs)
            buf.add(**({k: v[0] for k, v in values.items()} if envs == 1 else values))
        assert buf._writer.lockstep_kernel is None


def test_rejected_values_go_back_to_the_python_path_with_a_longer_countdown() -> None:
    fast, ref = buffers()
    for c in range(5):
        fast.add(**vector_step(c, 4))
        ref.add(**vector_step(c, 4))
    assert fast._writer.add_plain.__name__ == "add_lockstep"
    odd = {**vector_step(5, 4), "obs": np.zeros((2, 4), np.float32).T}  # not C-contiguous
    np.testing.assert_array_equal(fast.add(**odd), ref.add(**odd))
    assert fast._writer.add_plain.__name__ == "add_plain"
    assert fast._writer._backoff == 2 * lockstep.ACTIVATE_AFTER
    assert fast._writer._countdown[0] == 2 * lockstep.ACTIVATE_AFTER - 1  # this call counted
    fast._writer._countdown[0] = 1
    for c in range(6, 12):
        values = vector_step(c, 4)
        np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
    assert fast._writer.add_plain.__name__ == "add_lockstep"
    assert_same_state(fast, ref)


def test_a_kernel_that_does_not_compile_leaves_the_python_path_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(examples: Any) -> Any:
        raise RuntimeError("no compiler today")

    monkeypatch.setattr(lockstep, "_compiled", fail)
    fast, ref = buffers()
    with pytest.warns(rr.PerformanceWarning, match="no compiler today"):
        for c in range(4):  # the third plain step tries to compile
            values = vector_step(c, 4)
            np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
    assert fast._writer.lockstep_kernel is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second try, no second warning
        for c in range(4, 40):
            values = vector_step(c, 4, [c % 9 == 8, False, False, c % 5 == 4])
            np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
    assert fast._writer.lockstep_kernel is None and fast._writer.add_plain.__name__ == "add_plain"
    assert_same_state(fast, ref)


def test_without_numbas_array_intrinsic_no_kernel_is_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lockstep, "_array_at", None)
    assert "get_cfarray_intrinsic" in str(lockstep.unsupported(["a"], {}, {}))
    fast, ref = buffers()
    for c in range(20):
        values = vector_step(c, 4, [c % 7 == 6, False, False, False])
        np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
    assert fast._writer.lockstep_kernel is None
    assert_same_state(fast, ref)


def test_add_inlines_the_writers_path_and_follows_its_changes() -> None:
    fast, ref = buffers()
    off, _ = buffers()
    off._fast_add = False  # a buffer whose add is the general path stays so
    kernel_code = "_w_call"  # a constant of the inlined lockstep path only

    def inlined(buf: rr.ReplayBuffer) -> bool:
        return kernel_code in vars(buf)["add"].__code__.co_names

    assert not inlined(fast)
    for c in range(5):
        for buf in (fast, ref, off):
            buf.add(**vector_step(c, 4))
    assert inlined(fast)
    off._writer._activate_lockstep()  # (its add never takes the fast path that would)
    assert off._writer.lockstep_kernel is not None and "add" not in vars(off)
    odd = {**vector_step(5, 4), "obs": np.zeros((2, 4), np.float32).T}  # rejected: Python path
    np.testing.assert_array_equal(fast.add(**odd), ref.add(**odd))
    assert not inlined(fast)
    kernel_soon(fast)
    for c in range(6, 9):
        values = vector_step(c, 4, [c == 7, False, False, c == 7])
        np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
    assert inlined(fast)
    assert_same_state(fast, ref)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"obs": np.zeros((4, 3), np.float32)}, rr.ShapeError),
        ({"action": np.zeros(3, np.int64)}, rr.ShapeError),
        ({"next_obs": np.zeros((4, 5), np.float32)}, rr.ShapeError),
        ({"action": np.zeros(4, np.complex64)}, rr.DTypeError),
        ({"action": None}, rr.DTypeError),
        ({"extra": np.zeros(4)}, rr.FieldError),
    ],
)
def test_bad_values_get_the_general_paths_errors_after_the_kernel_compiled(
    change: dict[str, Any], error: type[Exception]
) -> None:
    fast, ref = buffers()
    for c in range(5):
        fast.add(**vector_step(c, 4))
        ref.add(**vector_step(c, 4))
    assert fast._writer.lockstep_kernel is not None
    values = vector_step(5, 4)
    values.update(change)
    if "extra" in change:
        del values["truncated"]  # the right count of names, one unknown
    for buf in (fast, ref):
        with pytest.raises(error):
            buf.add(**values)
    assert_same_state(fast, ref)


def test_an_ending_step_without_its_final_observation_is_named_after_the_kernel() -> None:
    fast, ref = buffers()
    for c in range(5):
        plain = {k: v for k, v in vector_step(c, 4).items() if k != "next_obs"}
        fast.add(**plain)
        ref.add(**plain)
    assert fast._writer.lockstep_kernel is not None
    ending = {k: v for k, v in vector_step(5, 4, [True, False, False, False]).items()
              if k != "next_obs"}  # fmt: skip
    for buf in (fast, ref):
        with pytest.raises(rr.FieldError, match="next_obs"):
            buf.add(**ending)
    assert_same_state(fast, ref)


def test_prioritized_vector_fills_through_the_kernel_keep_their_priorities() -> None:
    bufs = [rr.PrioritizedReplayBuffer(48, FIELDS, num_envs=4, seed=4) for _ in range(2)]
    bufs[1]._fast_add = False
    bufs[0]._writer._countdown[0] = 2
    for c in range(30):
        values = vector_step(c, 4, [c % 7 == 6, False, False, c % 11 == 10])
        np.testing.assert_array_equal(bufs[0].add(**values), bufs[1].add(**values))
        if c % 10 == 9:
            a, b = bufs[0].sample(6), bufs[1].sample(6)
            np.testing.assert_array_equal(a.ids, b.ids)
            np.testing.assert_array_equal(a.weights, b.weights)
    assert bufs[0]._writer.lockstep_kernel is not None
    assert_same_state(bufs[0], bufs[1])


# ---------------------------------------------------------------------------- episode ends
def count_general_stores(buf: rr.ReplayBuffer) -> list[int]:
    """How many calls reach the writer's general store (a counter the test reads)."""
    calls = [0]
    store = buf._writer.store

    def counted(prep: Any) -> Any:
        calls[0] += 1
        return store(prep)

    buf._writer.store = counted  # type: ignore[method-assign]
    return calls


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.lists(st.booleans(), min_size=4, max_size=4), min_size=1, max_size=60),
    st.integers(1, 3),
    st.integers(1, 2),
)
def test_the_kernel_stores_ending_steps_as_the_general_store_does(
    ends: list[list[bool]], n_step: int, frame_stack: int
) -> None:
    fast, ref = buffers(n_step=n_step, frame_stack=frame_stack)
    general = count_general_stores(fast)
    for c, row in enumerate([[False] * 4] * 4 + ends):
        values = vector_step(c, 4, row)
        np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
    kernel = fast._writer.lockstep_kernel
    assert kernel is not None and kernel.stores_ends
    # Every step went through the kernel but for two per doubling of the final records: the
    # one that grows them, and the next end, when the kernel has to be pointed at them again.
    doublings = int(np.log2(fast._index.finals_capacity // fast._finals0))
    assert general[0] <= 2 * doublings
    assert_same_state(fast, ref)
    if ref.num_sampleable:
        a, b = fast.sample(8), ref.sample(8)
        for name in b:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_the_kernel_follows_the_final_records_when_they_grow_and_after_a_load() -> None:
    # 40 slots per env, 16 final records per env at first: env 0 ends every episode at once.
    fast = rr.ReplayBuffer(160, FIELDS, num_envs=4, seed=2)
    ref = rr.ReplayBuffer(160, FIELDS, num_envs=4, seed=2)
    ref._fast_add = False
    fast._writer._countdown[0] = 2
    general = count_general_stores(fast)
    for c in range(120):
        if c == 70:  # new final-record arrays: the kernel must not write to the old ones
            for buf in (fast, ref):
                buf.load_state_dict(buf.state_dict())
        values = vector_step(c, 4, [c > 1, c % 3 == 2, False, False])  # two plain steps first
        np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
    assert fast._index.finals_capacity == 64 == ref._index.finals_capacity
    # The general store took the growths (16 -> 32 -> 64), the first end after each of them
    # and after the load (the kernel re-points them).
    assert 0 < general[0] <= 6
    assert_same_state(fast, ref)
    a, b = fast.sample(16), ref.sample(16)
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_a_prioritized_kernel_leaves_episode_ends_to_the_general_store() -> None:
    per = rr.PrioritizedReplayBuffer(24, FIELDS, num_envs=4, seed=4)  # its store is observed
    per._writer._countdown[0] = 1
    for c in range(3):
        per.add(**vector_step(c, 4))
    kernel = per._writer.lockstep_kernel
    assert kernel is not None and not kernel.stores_ends


def test_final_observations_given_only_at_episode_ends_still_take_the_kernel() -> None:
    """The documented habit: ``next_obs`` only when a step ends an episode. Plain steps pass
    placeholders (with a table that keeps ends out); ending steps the kernel stores."""
    fast, ref = buffers()
    general = count_general_stores(fast)
    for c in range(40):
        ends = [c % 9 == 8, False, c % 5 == 4, False]
        values = vector_step(c, 4, ends)
        if not any(ends):
            del values["next_obs"]
        np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
    kernel = fast._writer.lockstep_kernel
    assert kernel is not None and kernel.stores_ends
    assert general[0] == 0
    assert_same_state(fast, ref)


def test_point_finals_needs_every_final_observation() -> None:
    _, kernel = columns_and_kernel(SPEC, finals=("next_obs",))
    index = rr.ReplayBuffer(E * C, FIELDS, num_envs=E)._index
    with pytest.raises(rr.ConfigError, match="next_obs"):
        kernel.point_finals(index, {"obs": np.zeros((E * 4, 2, 3), np.float32)})  # wrong dtype
    with pytest.raises(rr.ConfigError, match="every next_"):
        kernel.point_finals(index, {"obs": np.zeros((E * 4, 2, 3), np.uint8),
                                    "depth": np.zeros((E * 4, 1), np.uint8)})  # fmt: skip
    assert not kernel.stores_ends


def test_a_memmap_buffer_takes_the_kernel_with_its_ends(tmp_path: Any) -> None:
    """Columns and final records in files: the kernel writes them through their mappings,
    and follows the final records into their new files when they grow."""
    fast = rr.ReplayBuffer(160, FIELDS, num_envs=4, seed=2, storage="memmap", path=tmp_path)
    ref = rr.ReplayBuffer(160, FIELDS, num_envs=4, seed=2)
    ref._fast_add = False
    fast._writer._countdown[0] = 2
    for c in range(100):
        values = vector_step(c, 4, [c > 1 and c % 2 == 0, c % 9 == 8, False, c > 1])
        np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
    kernel = fast._writer.lockstep_kernel
    assert kernel is not None and kernel.stores_ends
    assert fast._index.finals_capacity > 16  # grown into new files
    assert_same_state(fast, ref)
    fast.close()
