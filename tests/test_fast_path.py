"""The per-step fast path (``StepWriter.add_plain`` and the index's deferred steps) against
the general path: the same calls must leave identical state, outputs and errors."""

from __future__ import annotations

import gc
import inspect
import weakref
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.spec.schema import ENDING, PLAIN

FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}


def make(fast: bool, **kw: Any) -> rr.ReplayBuffer:
    buf = rr.ReplayBuffer(kw.pop("capacity", 24), FIELDS, seed=3, **kw)
    buf._fast_add = fast  # the general path only: the reference
    return buf


def pair(**kw: Any) -> tuple[rr.ReplayBuffer, rr.ReplayBuffer]:
    return make(True, **kw), make(False, **kw)


def assert_same_state(a: rr.ReplayBuffer, b: rr.ReplayBuffer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["meta"] == sb["meta"]
    assert sa["arrays"].keys() == sb["arrays"].keys()
    for k in sa["arrays"]:
        np.testing.assert_array_equal(sa["arrays"][k], sb["arrays"][k], err_msg=k)


def step(c: int, envs: int, ends: list[tuple[bool, bool]], exact: bool) -> dict[str, Any]:
    """One step's values; ``exact`` gives every value its field's dtype (fast-path eligible)."""
    if envs == 1:
        term, trunc = ends[0]
        return {
            "obs": np.array([c, -c], np.float32 if exact else np.float64),
            "action": c if exact else np.int32(c),
            "reward": float(c % 5),
            "terminated": term,
            "truncated": trunc,
            "next_obs": np.array([c + 0.5, -c], np.float32),
        }
    e = np.arange(envs)
    flags = np.array(ends, bool).reshape(envs, 2)
    return {
        "obs": np.stack([c + e, -c - e], 1).astype(np.float32 if exact else np.float64),
        "action": (c * 10 + e).astype(np.int64 if exact else np.int32),
        "reward": (e % 3).astype(np.float32),
        "terminated": flags[:, 0].copy(),
        "truncated": flags[:, 1].copy(),
        "next_obs": np.stack([c + e + 0.5, -c - e], 1).astype(np.float32),
    }


FLAGS = st.sampled_from([(False, False)] * 6 + [(True, False), (False, True)])


@st.composite
def scenario(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    envs = draw(st.integers(1, 3))
    n, k = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    cfg = {
        "num_envs": envs,
        "capacity": envs * draw(st.integers(n + k, n + k + 5)),
        "n_step": n,
        "frame_stack": k,
        "record_episodic_return": draw(st.booleans()),
    }
    add = st.tuples(
        st.just("add"), st.lists(FLAGS, min_size=envs, max_size=envs), st.booleans(), st.booleans()
    )
    other = st.tuples(
        st.sampled_from(["sample", "len", "clear", "dequeue", "state", "end", "reload"])
    )
    ops = draw(st.lists(st.one_of(add, add, add, add, other), min_size=1, max_size=80))
    return cfg, ops


def kernel_soon(buf: rr.ReplayBuffer) -> None:
    """Compile the lockstep kernel (vector buffers) at the next plain step, not the 256th."""
    buf._writer._countdown[0] = 1


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(), st.booleans())
def test_fast_path_leaves_the_same_state_as_the_general_path(
    sc: tuple[dict[str, Any], list[tuple[Any, ...]]], kernel: bool
) -> None:
    cfg, ops = sc
    fast, ref = pair(**cfg)
    if kernel:
        kernel_soon(fast)
    envs = cfg["num_envs"]
    for c, op in enumerate(ops):
        kind = op[0]
        if kind == "add":
            _, ends, exact, some_envs = op
            values = step(c, envs, ends, exact)
            if envs > 1 and some_envs:  # one env only: the envs leave lockstep
                values = {k: v[1:2] for k, v in values.items()}
                values["env_ids"] = np.array([1])
            np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
        elif kind == "sample":
            if ref.num_sampleable:
                a, b = fast.sample(5), ref.sample(5)
                for name in b:
                    np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        elif kind == "len":
            assert len(fast) == len(ref)
            assert fast.num_sampleable == ref.num_sampleable
            np.testing.assert_array_equal(fast.sampleable_ids(), ref.sampleable_ids())
        elif kind == "clear":
            fast.clear()
            ref.clear()
        elif kind == "dequeue":
            if len(ref) >= envs and min(ref._index.stored_per_env()) >= 1:
                a, b = fast.dequeue(1), ref.dequeue(1)
                for name in b:
                    np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        elif kind == "reload":  # fresh final-record arrays, counters loaded in place
            for buf in (fast, ref):
                buf.load_state_dict(buf.state_dict())
        elif kind == "end":
            final = {"next_obs": np.array([-1.0, 1.0], np.float32)}
            try:
                want = ref.end_episode(0, **final)
            except rr.InvalidIdError:
                with pytest.raises(rr.InvalidIdError):
                    fast.end_episode(0, **final)
            else:
                np.testing.assert_array_equal(fast.end_episode(0, **final), want)
        else:
            assert_same_state(fast, ref)
    assert_same_state(fast, ref)


@pytest.mark.parametrize("envs", [1, 4])
def test_more_deferred_steps_than_the_settle_limit_and_the_capacity(envs: int) -> None:
    fast, ref = pair(capacity=8 * envs, num_envs=envs)
    fast._index._max_pending = 5
    for c in range(40):
        values = step(c, envs, [(c % 13 == 12, False)] * envs, exact=True)
        np.testing.assert_array_equal(fast.add(**values), ref.add(**values))
        if c % 7 == 0:
            assert_same_state(fast, ref)
    assert_same_state(fast, ref)
    fast, ref = pair(capacity=8 * envs, num_envs=envs)
    for c in range(30):  # 30 deferred steps of an 8-slot ring, settled at once
        values = step(c, envs, [(False, False)] * envs, exact=True)
        fast.add(**values)
        ref.add(**values)
    assert fast._index._pending == 30
    assert_same_state(fast, ref)


def test_the_fast_path_takes_the_plain_steps_and_defers_them() -> None:
    buf = make(True, capacity=20)
    for c in range(3):
        buf.add(**step(c, 1, [(False, False)], exact=True))
    assert buf._index._pending == 3
    buf.add(**step(3, 1, [(True, False)], exact=True))  # an ending step: stored at once
    assert buf._index._pending == 0
    assert len(buf) == 4
    vec = make(True, capacity=20, num_envs=2)
    vec.add(**step(0, 2, [(False, False)] * 2, exact=True))
    assert vec._index._pending == 1
    vec.add(**step(0, 2, [(False, False)] * 2, exact=False))  # needs casts: general path
    assert vec._index._pending == 0


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"obs": np.zeros(3, np.float32)}, rr.ShapeError),
        ({"obs": np.zeros(2, np.complex64)}, rr.DTypeError),
        ({"action": 2**70}, rr.DTypeError),
        ({"action": 1.5}, rr.DTypeError),
        ({"reward": "x"}, rr.DTypeError),
        ({"terminated": None}, rr.DTypeError),
        ({"extra": 1}, rr.FieldError),
        ({"next_obs": np.zeros(5, np.float32)}, rr.ShapeError),
    ],
)
def test_bad_values_get_the_general_paths_errors_and_change_nothing(
    change: dict[str, Any], error: type[Exception]
) -> None:
    fast, ref = pair()
    for buf in (fast, ref):
        buf.add(**step(0, 1, [(False, False)], exact=True))
    for buf in (fast, ref):
        with pytest.raises(error):
            buf.add(**{**step(1, 1, [(False, False)], exact=True), **change})
    assert_same_state(fast, ref)


def test_options_are_still_keywords_of_add() -> None:
    buf = rr.ReplayBuffer(4, FIELDS, num_envs=2)
    values = step(0, 2, [(False, False)] * 2, exact=True)
    one = {k: v[:1] for k, v in values.items()}
    assert buf.add(env_ids=[1], **one).tolist() == [1]
    assert buf.add(env_ids=[1], block=True, timeout=0.5, **one).tolist() == [3]
    with pytest.raises(rr.ReplayTimeout):
        buf.add(env_ids=[1], block=True, timeout=0.01, **one)
    with pytest.raises(ValueError, match="timeout"):
        buf.add(timeout=-1.0, **values)


def test_plain_check_tells_plain_ending_and_convertible_values() -> None:
    buf = make(True)
    names = (*buf.schema.fields, *buf.schema.next_names())
    check = buf.schema.plain_check(names, ())
    assert check(step(0, 1, [(False, False)], exact=True)) == PLAIN
    assert check(step(0, 1, [(False, True)], exact=True)) == ENDING
    assert check(step(0, 1, [(False, False)], exact=False)) == 0
    assert check({**step(0, 1, [(False, False)], exact=True), "reward": np.float32(1)}) == PLAIN
    assert check({**step(0, 1, [(False, False)], exact=True), "action": 2**63}) == 0
    vcheck = buf.schema.plain_check(names, (3,))
    assert vcheck(step(0, 3, [(False, False)] * 3, exact=True)) == PLAIN
    assert vcheck(step(0, 3, [(False, False), (True, False), (False, False)], exact=True)) == ENDING
    assert vcheck(step(0, 2, [(False, False)] * 2, exact=True)) == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(), st.booleans())
def test_prioritized_fast_path_hears_of_deferred_steps_like_the_general_path(
    sc: tuple[dict[str, Any], list[tuple[Any, ...]]], kernel: bool
) -> None:
    """Proportional: identical state. (Rank-based counts the changes of a batch of deferred
    steps net, so it may re-sort at other times; its rank bound is tested with either path.)"""
    cfg, ops = sc
    cfg = {k: v for k, v in cfg.items() if k != "record_episodic_return"}
    bufs = []
    for fast in (True, False):
        kw = {k: v for k, v in cfg.items() if k != "capacity"}
        buf = rr.PrioritizedReplayBuffer(cfg["capacity"], FIELDS, seed=5, **kw)
        buf._fast_add = fast
        if kernel:
            kernel_soon(buf)
        bufs.append(buf)
    envs = cfg["num_envs"]
    for c, op in enumerate(ops):
        if op[0] == "add":
            values = step(c, envs, op[1], exact=op[2])
            np.testing.assert_array_equal(bufs[0].add(**values), bufs[1].add(**values))
        elif op[0] == "sample" and bufs[1].num_sampleable:
            a, b = bufs[0].sample(4), bufs[1].sample(4)
            for name in b:
                np.testing.assert_array_equal(a[name], b[name], err_msg=name)
            new = np.arange(1, 5, dtype=np.float64) * (c + 1)
            assert bufs[0].update_priorities(a.ids, new) == bufs[1].update_priorities(b.ids, new)
        elif op[0] == "clear":
            for buf in bufs:
                buf.clear()
        elif op[0] == "state":
            assert_same_state(bufs[0], bufs[1])
    assert_same_state(bufs[0], bufs[1])


def test_a_richer_schema_takes_the_fast_path_and_stores_the_same() -> None:
    fields = {
        "obs": rr.Field((2, 3), np.uint8),
        "goal": rr.Field((2,), np.float64, observation=True),
        "action": rr.Field((), np.int8),
        "reward": rr.Field((2,), np.float32),
        "valid": rr.Field((), np.bool_),
    }
    bufs = [rr.ReplayBuffer(12, fields, seed=1) for _ in range(2)]
    bufs[1]._fast_add = False
    for c in range(30):
        values = {
            "obs": np.full((2, 3), c, np.uint8),
            "goal": np.array([c, -c], np.float64),
            "action": [c % 100, np.int8(c), 300][c % 3],  # 300 does not fit int8
            "reward": np.array([c, 1], np.float32),
            "valid": c % 2 == 0,
            "terminated": c % 7 == 6,
            "truncated": np.bool_(False),
            "next_obs": np.zeros((2, 3), np.uint8),
            "next_goal": np.zeros(2),
        }
        if c % 3 == 2:
            for buf in bufs:
                with pytest.raises(rr.DTypeError, match="action"):
                    buf.add(**values)
            continue
        np.testing.assert_array_equal(bufs[0].add(**values), bufs[1].add(**values))
    assert bufs[0]._index._pending > 0  # the fast path was taken
    assert_same_state(bufs[0], bufs[1])


def test_some_final_observations_given_and_others_not_take_the_general_path() -> None:
    fields = {**FIELDS, "goal": rr.Field((1,), np.float32, observation=True)}
    bufs = [rr.ReplayBuffer(12, fields, num_envs=2, seed=1) for _ in range(2)]
    bufs[1]._fast_add = False
    for c in range(6):
        values = step(c, 2, [(c == 4, False), (False, False)], exact=True)
        values["goal"] = np.full((2, 1), c, np.float32)
        if c % 2:
            values["next_goal"] = np.zeros((2, 1), np.float32)
        if c == 4:  # an ending step with next_obs but without next_goal
            for buf in bufs:
                with pytest.raises(rr.FieldError, match="next_goal"):
                    buf.add(**values)
            continue
        np.testing.assert_array_equal(bufs[0].add(**values), bufs[1].add(**values))
    assert_same_state(bufs[0], bufs[1])


def test_add_is_generated_with_one_keyword_per_field() -> None:
    buf = make(True)
    params = inspect.signature(buf.add).parameters
    assert list(params) == [*buf.schema.fields, "next_obs", "_options"]
    assert {p.kind for p in params.values()} == {
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.VAR_KEYWORD,
    }
    assert buf.add.__doc__ == rr.ReplayBuffer.add.__doc__
    with pytest.raises(TypeError):
        buf.add(np.zeros(2, np.float32))  # values are keywords, as always
    ref = make(False)
    assert "add" not in vars(ref)  # the class's add: the general path only
    ref._fast_add = True
    assert "add" in vars(ref) and ref._fast_add


# Names the generated add, add_plain and lockstep code use for their own values and locals.
CODE_NAMES = [
    "options", "out", "prep", "t", "r", "rows", "kind", "table", "call", "python", "index",
    "pending", "verdict", "settle", "defer", "np", "col0", "v0", "one_id", "countdown",
    "activate", "given", "args", "lock", "cond", "buf", "MISSING",
]  # fmt: skip


@pytest.mark.parametrize("envs", [1, 4])
def test_fields_named_like_the_generated_codes_names_are_stored_as_given(envs: int) -> None:
    # A vector buffer's kernel takes at most 12 values: 7 fields here, and next_obs.
    names = CODE_NAMES if envs == 1 else ["options", "out", "prep", "t", "table", "python"]
    fields = {"obs": rr.Field((2,), np.float32), **{n: rr.Field((), np.int64) for n in names}}
    bufs = [rr.ReplayBuffer(envs * 6, fields, num_envs=envs, seed=1) for _ in range(2)]
    bufs[1]._fast_add = False
    kernel_soon(bufs[0])
    lead = (envs,) if envs > 1 else ()
    for c in range(30):
        values = {
            "obs": np.full((*lead, 2), c, np.float32),
            **{n: np.full(lead, c * 100 + i, np.int64) for i, n in enumerate(names)},
            "reward": np.zeros(lead, np.float32),
            "terminated": np.full(lead, c % 7 == 6),
            "truncated": np.zeros(lead, bool),
            "next_obs": np.full((*lead, 2), c + 0.5, np.float32),
        }
        np.testing.assert_array_equal(bufs[0].add(**values), bufs[1].add(**values))
    assert (bufs[0]._writer.lockstep_kernel is not None) == (envs > 1)
    assert_same_state(*bufs)
    batch = bufs[0].sample(16)
    t = batch.ids // envs
    for i, n in enumerate(names):
        np.testing.assert_array_equal(batch[n], t * 100 + i, err_msg=n)


def test_a_subclass_that_defines_add_keeps_it() -> None:
    class Counting(rr.ReplayBuffer):
        calls = 0

        def add(self, **values: Any) -> Any:
            type(self).calls += 1
            return super().add(**values)

    buf = Counting(8, FIELDS)
    assert not buf._fast_add
    buf.add(**step(0, 1, [(False, False)], exact=True))
    assert Counting.calls == 1 and len(buf) == 1


@pytest.mark.parametrize("kind", ["one env", "vector", "prioritized vector"])
def test_a_dropped_buffer_is_freed_without_the_cycle_collector(kind: str) -> None:
    """No reference cycle keeps a buffer's columns alive once its last user drops it."""
    envs = 1 if kind == "one env" else 3
    cls = rr.PrioritizedReplayBuffer if kind.startswith("prioritized") else rr.ReplayBuffer
    gc.collect()
    gc.disable()
    try:
        buf = cls(30, FIELDS, num_envs=envs, seed=0)
        buf._writer._countdown[0] = 2  # vector buffers compile their kernel on the way
        for c in range(12):
            buf.add(**step(c, envs, [(c % 5 == 4, False)] + [(False, False)] * (envs - 1), True))
        buf.sample(4)
        assert (buf._writer.lockstep_kernel is not None) == (envs > 1)
        refs = [weakref.ref(x) for x in (buf, buf._writer, buf._index, buf._cols)]
        del buf
        assert [r() for r in refs] == [None] * len(refs)
    finally:
        gc.enable()
