"""Hostile arguments to the front-ends (ALF, ReAgent, keras-gym, nnabla-rl): answered with
their originals' error types, never hung, never a ``MemoryError``, and a refused call changes
nothing.

The strategies are :mod:`tests.test_hostile`'s. For each front-end a filled buffer is made
once; every example works on a deep copy of it. A call must, within the time bound, return or
raise one of the types its original raises for bad input (each front-end's list below: the
built-in types of its original's checks and of the NumPy/torch calls it makes, and the
rlreplay errors, which subclass them); never a ``MemoryError`` (sizes beyond the size budget
are refused before anything is allocated), a hang or another type. After a refusal the
buffer pickles to the same bytes as an untouched copy and draws the same next samples.
"""

from __future__ import annotations

import copy
import threading
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.compat.alf import ReplayAssertionError
from rlreplay.compat.keras_gym import ExperienceReplayBuffer, InsufficientCacheError
from rlreplay.compat.nnabla_rl import ReplayBuffer as NnablaBuffer
from rlreplay.compat.nnabla_rl.replay_buffers import ProportionalPrioritizedReplayBuffer
from rlreplay.compat.reagent import PrioritizedReplayBuffer as ReagentPrioritized
from tests.compat.test_alf import Driver
from tests.test_hostile import (
    EXAMPLES,
    TEST_BUDGET,
    budget,
    count,
    flags,
    floats,
    hostile,
    run_bounded,
    timeout,
)

# What each original raises for bad input (its own checks, NumPy's and torch's).
ORIGINAL: dict[str, tuple[type[BaseException], ...]] = {
    "alf": (ReplayAssertionError, AssertionError, RuntimeError, ValueError, TypeError,
            IndexError, KeyError),
    "reagent": (AssertionError, RuntimeError, ValueError, TypeError, IndexError, KeyError,
                OverflowError),
    # (keras-gym checks nothing: a Decimal("NaN") batch_size fails its comparison there too)
    "keras_gym": (InsufficientCacheError, ValueError, TypeError, IndexError, KeyError,
                  ArithmeticError, AttributeError),
    # (nnabla-rl compares positions before it indexes: Decimal("NaN") raises InvalidOperation;
    # it calls array methods on the errors it is given: a scalar has no .flatten)
    "nnabla_rl": (ValueError, TypeError, IndexError, KeyError, ArithmeticError, RuntimeError,
                  AttributeError),
}  # fmt: skip

# Refusals the original makes at or after its draw: the front-end draws first too (its
# streams are the original's), so only the generator may have moved. nnabla-rl's uniform
# sample checks num_samples against the size, then draws (NumPy's choice refuses a float or
# negative size after it drew), then refuses num_steps < 1, no indices and reads out of range
# (a NumPy num_steps such as np.uint8(255) wraps len - num_steps + 1 there, as here).
AFTER_DRAW: dict[str, tuple[str, ...]] = {"nnabla_rl": ("sample",)}


class Env:
    action_space = gymnasium.spaces.Discrete(3)


def build(name: str) -> Any:
    buf: Any
    if name == "alf":
        torch.manual_seed(0)  # ALF's buffer seeds its generator from torch's
        driver = Driver(num_envs=2, max_length=8)
        driver.run(12, episode_len=3)
        return driver.rb
    if name == "reagent":
        buf = ReagentPrioritized(
            observation_shape=(2,), stack_size=1, replay_capacity=32, batch_size=4, seed=1
        )
        for t in range(20):
            buf.add(np.full(2, t, np.float32), t % 3, 0.5, t % 5 == 4, priority=1.0 + t % 3)
        return buf
    if name == "keras_gym":
        buf = ExperienceReplayBuffer(Env(), capacity=32, batch_size=4, random_seed=1)
        for t in range(20):
            buf.add(np.full(2, t, np.float32), t % 3, 0.5, t % 5 == 4, episode_id=t // 5)
        return buf
    if name == "nnabla_p":
        buf = ProportionalPrioritizedReplayBuffer(capacity=32, seed=1)
    else:
        buf = NnablaBuffer(capacity=32, seed=1)  # (unseeded ones draw from a global generator)
    for t in range(20):
        s = np.full(2, t, np.float32)
        buf.append((s, np.array([t % 3]), 0.5, float(t % 5 != 4), s + 1, {}))
    buf[0]  # a read moves staged appends into the core, as any read would
    if name == "nnabla_p":  # a draw syncs the trees with the core, as any draw would
        buf.sample(2)
        buf.update_priorities(np.array([0.5, 2.0]))
    return buf


def next_samples(name: str, buf: Any) -> Any:
    """What the buffer draws next (plain arrays, to compare)."""
    if name == "alf":
        data, info = buf.get_batch(2, 2)
        return (data.observation["obs"].numpy(), info.positions.numpy())
    if name == "reagent":
        return buf.sample_index_batch(4).numpy()
    if name == "keras_gym":
        return buf.sample()[1]
    experiences, _ = buf.sample(3)
    return [float(e[2]) for e in experiences] + [e[0].tolist() for e in experiences]


def fingerprint(obj: Any, depth: int = 0) -> Any:
    """The state of a front-end as plain values: its core's ``state_dict()``, generators'
    states, and its attributes' numbers, strings, arrays and tensors, recursively (caches that
    a call may fill are left out: attributes whose value is ``None`` on one side only would
    show as a difference, so a front-end's lazily made plans are skipped by name)."""
    if depth > 6:
        return "..."
    if isinstance(obj, rr.ReplayBuffer):
        state = obj.state_dict()
        return ("core", state["meta"], {k: v.tolist() for k, v in state["arrays"].items()})
    if isinstance(obj, np.random.Generator):
        return ("rng", obj.bit_generator.state)
    if isinstance(obj, np.random.RandomState):
        return ("rng", str(obj.get_state()))
    if isinstance(obj, np.ndarray):
        return ("array", obj.dtype.str, obj.shape, obj.tolist())
    if isinstance(obj, torch.Tensor):
        return ("tensor", str(obj.dtype), obj.detach().cpu().numpy().tolist())
    if obj is None or isinstance(obj, bool | int | float | str | bytes | np.generic):
        return obj
    if isinstance(obj, list | tuple):
        return [fingerprint(v, depth + 1) for v in obj]
    if isinstance(obj, dict):
        return {str(k): fingerprint(v, depth + 1) for k, v in obj.items()}
    attrs = getattr(obj, "__dict__", None)
    if attrs is None or type(obj).__module__.split(".")[0] not in ("rlreplay", "tests"):
        return type(obj).__name__
    return {
        k: fingerprint(v, depth + 1)
        for k, v in attrs.items()
        if not k.startswith("_fast") and k not in CACHES
    }


# Caches a read fills (plans, lazily synced trees): invisible to every call's result.
CACHES = {"_row_bytes", "_last_ids", "_modules", "_parameters", "_buffers", "_leaf_order",
          "_tree_synced"}  # fmt: skip


class Twin:
    def __init__(self, name: str) -> None:
        self.name = name
        self.base = build(name)
        self.state = fingerprint(self.fresh())  # (a copy: scratch beyond counts is dropped)
        self.next = next_samples(name, self.fresh())

    def fresh(self) -> Any:
        if self.name in ("alf", "reagent"):  # (they do not deep-copy: built again, seeded)
            return build(self.name)
        return copy.deepcopy(self.base)

    def assert_untouched(self, buf: Any, what: str, drawn: bool = False) -> None:
        if drawn:  # the generator moved, as the original's: everything else as it was
            assert without_rngs(fingerprint(buf)) == without_rngs(self.state), what
            return
        assert fingerprint(buf) == self.state, what
        got = next_samples(self.name, buf)
        np.testing.assert_equal(got, self.next, err_msg=what)


def without_rngs(state: Any) -> Any:
    if isinstance(state, dict):
        return {k: without_rngs(v) for k, v in state.items() if k != "rng"}
    if isinstance(state, tuple) and state and state[0] == "rng":
        return "rng"
    if isinstance(state, tuple | list):
        return [without_rngs(v) for v in state]
    return state


_TWINS: dict[str, Twin] = {}


def twin_of(name: str) -> Twin:
    if name not in _TWINS:
        _TWINS[name] = Twin(name)
    return _TWINS[name]


Call = Callable[[Any], Any]


def calls(name: str) -> st.SearchStrategy[tuple[str, Call]]:
    def named(what: str, fn: Callable[..., Any], *args: st.SearchStrategy[Any]) -> Any:
        return st.builds(lambda *a: (what, lambda b: fn(b, *a)), *args)

    ints = st.one_of(st.lists(st.integers(-2, 20), min_size=1, max_size=3), hostile())
    wait = timeout(True)
    if name == "alf":
        return st.one_of(
            named("get_batch", lambda b, n, L: b.get_batch(n, L), count(), count()),
            named("dequeue", lambda b, e, n, bl, t: b.dequeue(e, n, bl, timeout=t),
                  st.one_of(st.none(), ints), count(10), flags(), wait),
            named("get_field", lambda b, f, e, p: b.get_field(f, e, p),
                  st.one_of(st.just("reward"), hostile()), ints, ints),
            named("steps_to_episode_end", lambda b, p, e: b.steps_to_episode_end(p, e),
                  ints, ints),
            named("get_episode_begin_position",
                  lambda b, p, e: b.get_episode_begin_position(p, e), ints, ints),
            named("clear", lambda b, e: b.clear(e), hostile()),
        )  # fmt: skip
    if name == "reagent":
        return st.one_of(
            named("sample_index_batch", lambda b, n: b.sample_index_batch(n), count()),
            named("sample_transition_batch",
                  lambda b, n, i: b.sample_transition_batch(n, i), count(),
                  st.one_of(st.none(), ints)),
            named("get_transition_elements", lambda b, n: b.get_transition_elements(n),
                  count()),
            named("set_priority", lambda b, i, p: b.set_priority(i, p), ints,
                  st.one_of(hostile(), st.lists(floats(), min_size=1, max_size=3))),
            named("get_priority", lambda b, i: b.get_priority(i), ints),
        )  # fmt: skip
    if name == "keras_gym":
        return st.one_of(
            named("sample(batch_size)", sample_with, count()),
            named("add", lambda b, s, a, r, d, e: b.add(s, a, r, d, e),
                  st.one_of(st.just(np.zeros(2, np.float32)), hostile()),
                  st.one_of(st.just(1), hostile()), st.one_of(st.just(0.5), hostile()),
                  st.one_of(st.just(False), hostile()), st.one_of(st.just(9), hostile())),
        )  # fmt: skip
    return st.one_of(
        named("sample", lambda b, n, k: b.sample(n, k), count(), count()),
        named("sample_indices", lambda b, i, k: b.sample_indices(i, k), ints, count()),
        named("getitem", lambda b, i: b[i], hostile()),
        named("update_priorities", lambda b, e: b.update_priorities(e), hostile()),
    )  # fmt: skip


def sample_with(buf: Any, batch_size: Any) -> Any:
    """keras-gym's ``sample()`` with its ``batch_size`` attribute set for the call only."""
    saved = buf.batch_size
    buf.batch_size = batch_size
    try:
        return buf.sample()
    finally:
        buf.batch_size = saved


FRONT_ENDS = ["alf", "reagent", "keras_gym", "nnabla_rl", "nnabla_p"]


def check(name: str, what: str, call: Call) -> None:
    twin = twin_of(name)
    buf = twin.fresh()
    allowed = ORIGINAL["nnabla_rl" if name.startswith("nnabla") else name]

    def quiet() -> Any:
        with warnings.catch_warnings():  # NumPy's casts warn as in the originals: not errors
            warnings.simplefilter("ignore")
            return call(buf)

    with budget(TEST_BUDGET):
        _, exc = run_bounded(quiet, what)
    if exc is None:
        return
    if not isinstance(exc, (*allowed, rr.ReplayError)) or isinstance(exc, MemoryError):
        raise AssertionError(f"{name}.{what} raised {type(exc).__name__}: {exc}") from exc
    drawn = name == "nnabla_rl" and what in AFTER_DRAW["nnabla_rl"]
    drawn = drawn and not str(exc).startswith("num_samples:")  # (checked before the draw)
    twin.assert_untouched(buf, f"{name}.{what} -> {type(exc).__name__}: {exc}", drawn)


@pytest.mark.parametrize("name", FRONT_ENDS)
@settings(max_examples=EXAMPLES * 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(data=st.data())
def test_hostile_front_end_calls_raise_their_originals_types(
    name: str, data: st.DataObject
) -> None:
    what, call = data.draw(calls(name), label="call")
    check(name, what, call)


@pytest.mark.slow
@pytest.mark.parametrize("name", FRONT_ENDS)
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_hostile_front_end_calls_10k(name: str, data: st.DataObject) -> None:
    what, call = data.draw(calls(name), label="call")
    check(name, what, call)


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("alf", lambda b: b.get_batch(10**12, 2)),
        ("alf", lambda b: b.get_batch(2, 2**40)),
        ("reagent", lambda b: b.sample_index_batch(10**12)),
        ("reagent", lambda b: b.sample_transition_batch(2**63)),
        ("nnabla_rl", lambda b: b.sample_indices([0], 10**12)),
        ("nnabla_p", lambda b: b.sample_indices(np.zeros(10**4, np.int64), 10**9)),
    ],
)
def test_front_end_sizes_beyond_the_budget_are_refused_before_the_draw(
    name: str, call: Call
) -> None:
    twin = twin_of(name)
    buf = twin.fresh()
    _, exc = run_bounded(lambda: call(buf), name)
    assert isinstance(exc, ORIGINAL["nnabla_rl" if name.startswith("nnabla") else name]), exc
    assert not isinstance(exc, MemoryError), exc
    twin.assert_untouched(buf, name)


@pytest.mark.parametrize("bad", [float("nan"), -1.0, -float("inf"), "1", 10**400])
def test_alf_blocking_calls_refuse_bad_timeouts(bad: Any) -> None:
    twin = twin_of("alf")
    buf = twin.fresh()
    with pytest.raises(rr.ConfigError, match="timeout"):
        buf.dequeue(n=1, blocking=True, timeout=bad)
    with pytest.raises(rr.ConfigError, match="timeout"):
        buf.dequeue(n=1, blocking=False, timeout=bad)  # checked whether it waits or not
    twin.assert_untouched(buf, "dequeue")


def test_alf_infinite_timeout_waits_for_ever() -> None:
    buf = twin_of("alf").fresh()
    buf.dequeue(n=8)  # every env empty
    out: list[Any] = []
    thread = threading.Thread(
        target=lambda: out.append(buf.dequeue(n=1, blocking=True, timeout=float("inf"))),
        daemon=True,
    )
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()
    buf.stop()  # ALF's stop ends a blocked dequeue with None
    thread.join(10)
    assert out == [None]
    torch.manual_seed(0)
