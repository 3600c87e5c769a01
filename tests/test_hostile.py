"""Hostile arguments to every public method of every buffer kind: answered, never hung.

Hypothesis generates arguments a hostile (or careless) caller could pass: huge and negative
ints (``2**63``, ``np.uint64(2**64 - 1)``, ``10**400``), NaN and infinite floats, NumPy scalars
of every kind, arrays of odd dtypes and shapes, ``None``, strings and plain objects, mixed
with valid values so that each check is reached behind the others. For each public method of
each buffer kind (uniform and prioritized, one and two envs, rank-based, rate-limited), every
call must, within :data:`BOUND` seconds:

* return, or raise an rlreplay error (:class:`rlreplay.ReplayError`), never another exception
  (a bare ``MemoryError``, NumPy's ``ValueError``, ``OverflowError``) and never hang;
* after a refusal, leave the buffer exactly as a twin that got nothing: ``state_dict()``
  (configuration, meta with the generator's state, every array) equal, and the next samples
  equal.

A size above the size budget must be refused before anything is allocated: the suite lowers
the budget to :data:`TEST_BUDGET` (64 MiB), so that sizes between "small" and "absurd" are
refused too instead of being allocated on a shared test machine; the tests of the real budget
use it as it is. Blocking calls get timeouts of at most 10 ms, or invalid ones: ``None`` and
``inf`` mean "for ever" (tested apart: they wait until another thread frees them).

The default run is short (:data:`EXAMPLES` per method and kind); ``-m slow`` runs 10^4
examples per method over the kinds that have it (the ``slow`` profile of
``tests/conftest.py``).
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as npst

import rlreplay as rr
from rlreplay.spec import arguments

BOUND = 20.0  # seconds a call may take before it counts as hung (a loaded 2-core machine)
TEST_BUDGET = 64 << 20
EXAMPLES = 40
FOREVER = (None, math.inf, 1e300, threading.TIMEOUT_MAX)

FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}


@contextmanager
def budget(nbytes: int) -> Iterator[None]:
    """Lower the size budget for the block (buffers cache row sizes, not the budget)."""
    saved = arguments.SIZE_BUDGET
    arguments.SIZE_BUDGET = nbytes
    try:
        yield
    finally:
        arguments.SIZE_BUDGET = saved


# ---------------------------------------------------------------------- buffers
def steps(n: int, num_envs: int, start: int = 0, every: int = 5) -> list[dict[str, Any]]:
    """``n`` valid steps (one ``add`` each) of ``num_envs`` envs; episodes end every ``every``."""
    out = []
    for i in range(start, start + n):
        lead = () if num_envs == 1 else (num_envs,)
        end = i % every == every - 1
        values: dict[str, Any] = {
            "obs": np.full((*lead, 2), i, np.float32),
            "action": np.full(lead, i % 3, np.int64),
            "reward": np.full(lead, 0.5 * i, np.float32),
            "terminated": np.full(lead, end),
            "truncated": np.zeros(lead, bool),
        }
        if end:
            values["next_obs"] = np.full((*lead, 2), -i, np.float32)
        out.append(values)
    return out


def build(kind: str) -> rr.ReplayBuffer:
    """A filled buffer of ``kind`` (its ring full, so ``add(block=True)`` waits)."""
    e = 2 if kind.endswith("2") else 1
    common: dict[str, Any] = {"num_envs": e, "n_step": 2, "seed": 7}
    if kind.startswith("prioritized"):
        variant = "rank_based" if kind.endswith("2") else "proportional"
        buf: rr.ReplayBuffer = rr.PrioritizedReplayBuffer(
            16 * e, FIELDS, variant=variant, beta_steps=10, frame_stack=e, **common
        )
    elif kind == "limited":
        limiter = rr.SampleToInsertRatio(1.0, 4, error_buffer=(-12.0, 24.0))
        buf = rr.ReplayBuffer(16, FIELDS, rate_limiter=limiter, **common)
    else:
        buf = rr.ReplayBuffer(
            16 * e, FIELDS, frame_stack=e, record_episodic_return=e == 2, **common
        )
    for values in steps(20, e):
        buf.add(**values)
    if isinstance(buf, rr.PrioritizedReplayBuffer):
        ids = buf.sampleable_ids()
        buf.update_priorities(ids, np.linspace(0.5, 3.0, ids.shape[0]))
        # A rank-based re-sort that is due is made by the next read of the masses (a draw,
        # priority_mass, sample_starts), refused or not: make it now, as every read would.
        buf.priority_mass()
    return buf


KINDS = ("uniform", "uniform2", "prioritized", "prioritized2", "limited")


class Twin:
    """A kind's untouched buffer, its state and its next samples, made once."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.base = build(kind)
        self.state = self.base.state_dict()
        self.next = next_samples(copy.copy(self.base))

    def fresh(self) -> rr.ReplayBuffer:
        return copy.copy(self.base)

    def assert_untouched(self, buf: rr.ReplayBuffer, what: str) -> None:
        got = buf.state_dict()
        assert got["config"] == self.state["config"], what
        assert got["meta"] == self.state["meta"], what
        assert sorted(got["arrays"]) == sorted(self.state["arrays"]), what
        for name, arr in self.state["arrays"].items():
            other = got["arrays"][name]
            assert other.dtype == arr.dtype and other.shape == arr.shape, f"{what}: {name}"
            assert np.array_equal(other, arr, equal_nan=arr.dtype.kind == "f"), f"{what}: {name}"
        for mine, theirs in zip(next_samples(buf), self.next, strict=True):
            assert sorted(mine) == sorted(theirs), what
            for key in mine:
                np.testing.assert_array_equal(mine[key], theirs[key], err_msg=f"{what}: {key}")


def next_samples(buf: rr.ReplayBuffer) -> list[rr.Batch]:
    out = [buf.sample(4), buf.sample_sequences(2, 3)]
    if not isinstance(buf, rr.PrioritizedReplayBuffer):
        out.append(buf.sample_episodes(2))
    return out


_TWINS: dict[str, Twin] = {}


def twin_of(kind: str) -> Twin:
    if kind not in _TWINS:
        _TWINS[kind] = Twin(kind)
    return _TWINS[kind]


# ---------------------------------------------------------------------- hostile values
HUGE_INTS = [
    2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**9, 10**12,
    10**18, 10**30, 10**400, -1, -(2**31), -(2**63), -(10**400), 0,
]  # fmt: skip
NP_INTS = [
    np.uint64(2**64 - 1), np.int64(2**63 - 1), np.int64(-(2**63)), np.uint32(2**32 - 1),
    np.int8(-1), np.uint8(255), np.int16(0), np.int32(3), np.uint64(5),
]  # fmt: skip
ODD_FLOATS = [
    math.nan, math.inf, -math.inf, -0.0, 5e-324, 1e308, -1e-300, np.float32(math.nan),
    np.float16(math.inf), np.float64(-1.0), np.float32(0.5), np.longdouble(2.5),
]  # fmt: skip


class Opaque:
    """An object with no numeric meaning (and a plain repr)."""

    def __repr__(self) -> str:
        return "Opaque()"


ODD_OBJECTS = [
    None, True, False, np.True_, "", "3", "numpy", b"\x00", [], [1, 2], (1,), {}, {"a": 1},
    Opaque(), object, Decimal("NaN"), Decimal("1e400"), Fraction(1, 3), 1j, np.complex128(1j),
    np.datetime64("2020-01-01"), np.timedelta64(3, "s"), Ellipsis, range(3), slice(1),
]  # fmt: skip

_ODD_DTYPES: list[Any] = [
    np.float16, np.float32, np.float64, np.int8, np.int64, np.uint64, np.bool_, np.complex64,
    "U3", "S2", "M8[s]", "m8[s]", "O",
]  # fmt: skip


def odd_arrays() -> st.SearchStrategy[Any]:
    return npst.arrays(
        dtype=st.sampled_from([np.dtype(d) for d in _ODD_DTYPES]),
        shape=npst.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
    )


def ints() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(-3, 40), st.sampled_from(HUGE_INTS), st.integers(), st.sampled_from(NP_INTS)
    )


def floats() -> st.SearchStrategy[Any]:
    return st.one_of(st.floats(), st.sampled_from(ODD_FLOATS))


def hostile() -> st.SearchStrategy[Any]:
    """Anything: ints, floats, NumPy scalars, odd arrays, None, strings, objects."""
    return st.one_of(ints(), floats(), st.sampled_from(ODD_OBJECTS), odd_arrays())


def count(small: int = 8) -> st.SearchStrategy[Any]:
    """A count: often valid (1 .. small), often huge or negative, else anything."""
    return st.one_of(
        st.integers(1, small),
        st.integers(1, small).map(np.int64),
        st.sampled_from(HUGE_INTS + NP_INTS),
        hostile(),
    )


def timeout(blocking: bool) -> st.SearchStrategy[Any]:
    """Invalid timeouts, and short ones; the for-ever ones only for calls that cannot wait."""
    bad = [math.nan, -1, -1e-9, -math.inf, np.float64(math.nan), True, "1", Opaque(), 10**400,
           -(10**400), np.complex128(1), Decimal("NaN")]  # fmt: skip
    options = [st.sampled_from(bad), st.floats(0.0, 0.01), st.just(0), st.just(np.float32(0.0))]
    if not blocking:
        options.append(st.sampled_from(FOREVER))
    return st.one_of(options)


def waits(blocking: bool) -> st.SearchStrategy[dict[str, Any]]:
    """The ``timeout`` keyword of a call: always given to one that may wait (else optional)."""
    if blocking:
        return st.fixed_dictionaries({"timeout": timeout(True)})
    return maybe(timeout=timeout(False))


def flags() -> st.SearchStrategy[Any]:
    return st.one_of(st.booleans(), hostile())


def maybe(**options: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A dict holding any subset of the keyword arguments ``options`` draws."""
    return st.fixed_dictionaries({}, optional=options)


def id_args(kind: str) -> st.SearchStrategy[Any]:
    """Ids: valid ones of the twin, stale and never-issued ones, or anything hostile."""
    twin = twin_of(kind)
    valid = twin.base.sampleable_ids().tolist()
    return st.one_of(
        st.lists(st.sampled_from(valid), min_size=1, max_size=4),
        st.lists(st.sampled_from(valid), min_size=1, max_size=4).map(np.asarray),
        st.lists(st.one_of(st.sampled_from(valid), ints()), max_size=4),
        st.sampled_from(valid),
        hostile(),
    )


def step_values(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    """A valid step of ``kind`` with some of its values made hostile, or unknown names added."""
    e = 2 if kind.endswith("2") else 1
    good = steps(1, e, start=40)[0]
    names = [*good, "next_obs", "nxt"]
    return st.builds(
        lambda changes, drop: {
            **{k: v for k, v in good.items() if k not in drop},
            **changes,
        },
        st.dictionaries(st.sampled_from(names), hostile(), max_size=2),
        st.sets(st.sampled_from(list(good)), max_size=1),
    )


# ---------------------------------------------------------------------- calls
Call = Callable[[rr.ReplayBuffer], Any]


def call_of(name: str, *args: Any, **kwargs: Any) -> Call:
    def call(buf: rr.ReplayBuffer) -> Any:
        return getattr(buf, name)(*args, **kwargs)

    call.__name__ = f"{name}(*{args!r:.200}, **{kwargs!r:.200})"
    return call


Strategy = st.SearchStrategy[Call]


def calls(kind: str, method: str) -> Strategy:
    """Hostile calls of ``method`` on a buffer of ``kind``."""
    limited = kind == "limited"
    out_arg = st.one_of(st.none(), hostile(), st.just({"obs": np.zeros((4, 2), np.float32)}))
    as_arg = st.one_of(st.none(), st.sampled_from(["numpy", "torch", "tensorflow", ""]), hostile())
    output = {"as_": as_arg, "device": hostile()}
    transform = st.one_of(st.none(), hostile())

    def call(*args: st.SearchStrategy[Any], **options: st.SearchStrategy[Any]) -> Strategy:
        """``method(*args, **options)``: every option optional, but a ``waits`` dict."""
        extra = options.pop("timeout", st.just({}))
        return st.builds(
            lambda a, t, kw: call_of(method, *a, **t, **kw),
            st.tuples(*args),
            extra,
            maybe(**options),
        )

    if method == "sample":
        return call(count(), timeout=waits(limited), recent_ratio=hostile() | st.floats(0, 1),
                    recent_steps=count(), replacement=flags(), out=out_arg,
                    transform=transform, **output)  # fmt: skip
    if method == "sample_sequences":
        return call(count(), count(), timeout=waits(limited), within_episode=flags(),
                    pad=flags(), balance_envs=flags(), transform=transform,
                    **output)  # fmt: skip
    if method == "sample_episodes":
        return call(count(), **output)
    if method == "dequeue":
        env_ids = st.one_of(st.just([0]), hostile())
        return call(count(20), timeout=waits(True), env_ids=env_ids, block=flags())
    if method in ("get_transitions", "episode_begin", "steps_to_episode_end", "get_episode"):
        return call(id_args(kind))
    if method == "get_sequences":
        return call(id_args(kind), count(), within_episode=flags())
    if method == "get_field":
        names = st.one_of(st.sampled_from(["obs", "action", "reward", "next_obs"]), hostile())
        return call(names, id_args(kind))
    if method == "add":
        return st.builds(
            lambda v, t, kw: call_of("add", **v, **t, **kw),
            step_values(kind),
            waits(True),
            maybe(block=flags(), env_ids=hostile()),
        )
    if method == "extend":
        return st.builds(
            lambda v, t, kw: call_of("extend", **v, **t, **kw),
            step_values(kind).map(lambda v: {k: np.asarray(x)[None] for k, x in v.items()}),
            waits(True),
            maybe(env_id=st.one_of(st.just(0), hostile()), block=flags()),
        )
    if method == "end_episode":
        finals = st.dictionaries(st.sampled_from(["next_obs", "obs", "x"]), hostile(), max_size=2)
        return st.builds(
            lambda e, kw: call_of("end_episode", e, **kw),
            st.one_of(st.just(0), hostile()),
            finals,
        )
    if method == "abandon_episode":
        return call(hostile())
    if method == "iterate":
        methods = st.one_of(st.sampled_from(["sample", "nope"]), hostile())
        return call(count(), prefetch=count(3), method=methods, timeout=waits(False), **output)
    if method == "load_state_dict":
        keys = st.sampled_from(["class", "config", "meta", "arrays"])
        return call(st.one_of(hostile(), st.dictionaries(keys, hostile(), max_size=4)))
    if method == "update_priorities":
        priorities = st.one_of(hostile(), st.lists(floats(), min_size=1, max_size=4))
        return call(id_args(kind), priorities, mask=hostile(), eta=hostile())
    if method == "get_priorities":
        return call(id_args(kind))
    if method == "sample_starts":
        e = 2 if kind.endswith("2") else 1
        bounds = st.one_of(st.just([0] * e), st.just([100] * e), hostile())
        return call(count(), bounds, bounds)
    raise AssertionError(method)


CORE = ["sample", "sample_sequences", "sample_episodes", "dequeue", "get_transitions",
        "get_sequences", "get_episode", "episode_begin", "steps_to_episode_end", "get_field",
        "add", "extend", "end_episode", "abandon_episode", "iterate",
        "load_state_dict"]  # fmt: skip
PRIORITIZED = ["update_priorities", "get_priorities", "sample_starts"]
CASES = [(k, m) for k in KINDS for m in CORE] + [
    (k, m) for k in KINDS if k.startswith("prioritized") for m in PRIORITIZED
]


def run_bounded(fn: Callable[[], Any], what: str) -> tuple[Any, BaseException | None]:
    """``fn()`` on a thread: its result or exception, failing if it takes over :data:`BOUND`."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append((fn(), None))
        except BaseException as exc:  # handed to the test
            box.append((None, exc))

    thread = threading.Thread(target=target, daemon=True, name="hostile-call")
    start = time.monotonic()
    thread.start()
    thread.join(BOUND)
    if thread.is_alive():
        pytest.fail(f"{what} did not return within {BOUND} s (hung)")
    assert time.monotonic() - start < BOUND
    return box[0]  # type: ignore[no-any-return]


def check_call(kind: str, call: Call) -> None:
    """The contract: returns, or raises an rlreplay error leaving the buffer as its twin."""
    twin = twin_of(kind)
    buf = twin.fresh()
    try:
        with budget(TEST_BUDGET):
            result, exc = run_bounded(lambda: call(buf), call.__name__)
        if exc is None:
            if hasattr(result, "close"):  # an iterate() prefetcher: stop its thread
                result.close()
            return
        if not isinstance(exc, rr.ReplayError):
            raise AssertionError(
                f"{call.__name__} raised {type(exc).__name__}, not an rlreplay error: {exc}"
            ) from exc
        twin.assert_untouched(buf, f"{call.__name__} -> {type(exc).__name__}: {exc}")
    finally:
        buf.close()


@pytest.mark.parametrize(("kind", "method"), CASES)
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(data=st.data())
def test_hostile_calls_are_answered_and_refusals_change_nothing(
    kind: str, method: str, data: st.DataObject
) -> None:
    check_call(kind, data.draw(calls(kind, method), label="call"))


@pytest.mark.slow
@pytest.mark.parametrize("method", CORE + PRIORITIZED)
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_hostile_calls_10k(method: str, data: st.DataObject) -> None:
    """10^4 examples per method (the ``slow`` profile), over the kinds that have it."""
    kind = data.draw(st.sampled_from([k for k, m in CASES if m == method]), label="kind")
    check_call(kind, data.draw(calls(kind, method), label="call"))


# ---------------------------------------------------------------------- the real size budget
@pytest.mark.parametrize(
    ("call", "name", "shown"),
    [
        (lambda b: b.sample(10**12), "batch_size", "10**12"),
        (lambda b: b.sample(2**63), "batch_size", "2**63"),
        (lambda b: b.sample(np.uint64(2**64 - 1)), "batch_size", "18446744073709551615"),
        (lambda b: b.sample(10**400), "batch_size", "10**400"),
        (lambda b: b.sample_sequences(2, 10**9), "length", "2, 10**9"),
        (lambda b: b.sample_sequences(10**9, 2), "batch_size", "10**9, 2"),
        (lambda b: b.sample_episodes(10**12), "n", "10**12"),
        (lambda b: b.get_sequences(b.sampleable_ids()[:2], 10**12), "length", "10**12"),
        (lambda b: b.iterate(10**10), "prefetch", "2"),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_sizes_beyond_the_budget_are_refused_before_anything_is_drawn(
    kind: str, call: Call, name: str, shown: str
) -> None:
    twin = twin_of(kind)
    buf = twin.fresh()
    with pytest.raises(rr.ConfigError) as info:
        raising(lambda: call(buf), f"{kind}: {name}")
    message = str(info.value)
    assert name in message and shown in message and "size budget" in message, message
    twin.assert_untouched(buf, message)


def raising(fn: Callable[[], Any], what: str) -> Any:
    """:func:`run_bounded`, raising what the call raised."""
    result, exc = run_bounded(fn, what)
    if exc is not None:
        raise exc
    return result


@pytest.mark.parametrize("kind", ["prioritized", "prioritized2"])
def test_sample_starts_beyond_the_budget_is_refused_before_the_draw(kind: str) -> None:
    twin = twin_of(kind)
    buf = twin.fresh()
    assert isinstance(buf, rr.PrioritizedReplayBuffer)
    e = buf.num_envs
    with pytest.raises(rr.ConfigError, match="n: sample_starts"):
        raising(lambda: buf.sample_starts(10**12, [0] * e, [100] * e), kind)
    twin.assert_untouched(buf, "sample_starts(10**12)")


def test_run_bounded_raises_what_the_call_raised() -> None:
    result, exc = run_bounded(lambda: 1 // 0, "division")
    assert result is None and isinstance(exc, ZeroDivisionError)


def test_the_budget_is_the_machines_memory() -> None:
    import os

    expected = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert rr.spec.size_budget() == arguments.SIZE_BUDGET == expected


def test_a_batch_within_the_budget_is_drawn_and_one_byte_over_is_refused() -> None:
    buf = twin_of("uniform").fresh()
    transition = buf._budget.transition
    with budget(transition * 10):
        assert buf.sample(10).obs.shape == (10, 2)
        with pytest.raises(rr.ConfigError, match="batch_size"):
            buf.sample(11)


def test_sample_episodes_checks_the_drawn_episodes_and_rolls_the_draw_back() -> None:
    """With ``n`` rings of an env above the budget, the drawn episodes' longest decides; a
    refused draw leaves the generator as it was."""
    twin = twin_of("uniform")
    buf = twin.fresh()
    step = buf._budget.step
    longest = 5  # episodes of the fixture end every 5 steps
    with budget(step * 3 * longest):  # 3 episodes fit, 3 rings of 16 do not
        assert buf.sample_episodes(3).mask.shape[0] == 3
    buf = twin.fresh()
    with budget(step * 3 * longest - 1), pytest.raises(rr.ConfigError, match="n: sample_episodes"):
        buf.sample_episodes(3)
    twin.assert_untouched(buf, "sample_episodes over the budget")


# ---------------------------------------------------------------------- timeouts
BAD_TIMEOUTS = [math.nan, np.float64(math.nan), -1, -1e-9, -math.inf, 10**400, True, "1"]
Prepare = Callable[[rr.ReplayBuffer], None]


def nothing(buf: rr.ReplayBuffer) -> None:
    """No preparation: the fixture's ring is already full."""


Blocking = tuple[str, Prepare, Callable[[rr.ReplayBuffer, Any], Any], Prepare]


def blocking_calls(kind: str) -> list[Blocking]:
    """``(what, prepare, call(buf, timeout), free)``: after ``prepare`` the call waits (for
    room, data or the rate limiter) until ``free`` makes what it waits for."""
    e = 2 if kind.endswith("2") else 1
    values = steps(1, e, start=40)[0]
    ext: dict[str, Any] = {k: np.asarray(v)[None] for k, v in steps(1, 1, start=40)[0].items()}
    lead = () if e == 1 else (e,)

    def empty(buf: rr.ReplayBuffer) -> None:
        buf.dequeue(buf.env_capacity)

    def one_more(buf: rr.ReplayBuffer) -> None:
        buf.add(**steps(1, e, start=50)[0])

    def make_room(buf: rr.ReplayBuffer) -> None:
        buf.dequeue(4)

    out: list[Blocking] = [
        ("add", nothing, lambda b, t: b.add(block=True, timeout=t, **values), make_room),
        ("extend", nothing, lambda b, t: b.extend(block=True, timeout=t, **ext), make_room),
        ("dequeue", empty, lambda b, t: b.dequeue(1, block=True, timeout=t), one_more),
    ]
    del lead
    if kind == "limited":

        def at_max_diff(buf: rr.ReplayBuffer) -> None:  # diff = 24: inserts wait
            for v in steps(4, 1, start=60):
                buf.add(**v)

        def sample_one(buf: rr.ReplayBuffer) -> None:
            buf.sample(1)

        out += [
            ("add-limiter", at_max_diff, lambda b, t: b.add(timeout=t, **values), sample_one),
            # 20 inserts pay for 32 samples (min_diff -12): 33 wait for one more insert
            ("sample-limiter", nothing, lambda b, t: b.sample(33, timeout=t), one_more),
            ("sample_sequences-limiter", nothing,
             lambda b, t: b.sample_sequences(33, 2, timeout=t), one_more),
        ]  # fmt: skip
    return out


def states_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a["config"] != b["config"] or a["meta"] != b["meta"] or set(a["arrays"]) != set(b["arrays"]):
        return False
    return all(np.array_equal(v, b["arrays"][k]) for k, v in a["arrays"].items())


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS, ids=repr)
@pytest.mark.parametrize("kind", KINDS)
def test_nan_negative_and_non_numbers_are_refused_by_every_blocking_call(
    kind: str, timeout: Any
) -> None:
    twin = twin_of(kind)
    for what, prepare, call, _ in blocking_calls(kind):
        buf, reference = twin.fresh(), twin.fresh()
        prepare(buf)
        prepare(reference)
        result, exc = run_bounded(lambda: call(buf, timeout), what)  # noqa: B023
        assert isinstance(exc, rr.ConfigError), (what, result, exc)
        assert "timeout" in str(exc) and arguments.shown(timeout) in str(exc), str(exc)
        assert states_equal(buf.state_dict(), reference.state_dict()), what


@pytest.mark.parametrize("timeout", [0, 0.01, np.float32(0.01), np.int64(0)], ids=repr)
@pytest.mark.parametrize("kind", KINDS)
def test_short_timeouts_time_out_and_change_nothing(kind: str, timeout: Any) -> None:
    twin = twin_of(kind)
    for what, prepare, call, _ in blocking_calls(kind):
        buf, reference = twin.fresh(), twin.fresh()
        prepare(buf)
        prepare(reference)
        result, exc = run_bounded(lambda: call(buf, timeout), what)  # noqa: B023
        assert isinstance(exc, rr.ReplayTimeout), (what, result, exc)
        assert states_equal(buf.state_dict(), reference.state_dict()), what


@pytest.mark.parametrize("timeout", FOREVER, ids=repr)
@pytest.mark.parametrize("kind", KINDS)
def test_infinite_timeouts_wait_until_another_thread_frees_the_call(
    kind: str, timeout: Any
) -> None:
    """``None``, ``inf`` and anything past ``threading.TIMEOUT_MAX`` wait for ever: the call is
    still waiting after a while, and goes through once another thread makes what it needs."""
    twin = twin_of(kind)
    for what, prepare, call, free in blocking_calls(kind):
        buf = twin.fresh()
        prepare(buf)
        done = threading.Event()
        box: list[Any] = []

        def waiter(
            call: Callable[[rr.ReplayBuffer, Any], Any] = call,
            buf: rr.ReplayBuffer = buf,
            box: list[Any] = box,
            done: threading.Event = done,
        ) -> None:
            try:
                box.append(call(buf, timeout))
            except BaseException as exc:
                box.append(exc)
            done.set()

        threading.Thread(target=waiter, daemon=True).start()
        assert not done.wait(0.1), (what, box)  # waiting, neither refused nor timed out
        free(buf)
        assert done.wait(BOUND), f"{what} was not freed"
        assert not isinstance(box[0], BaseException), (what, box[0])
        buf.close()


def test_the_rate_limiter_takes_the_same_timeouts() -> None:
    limiter = rr.MinSize(5)
    bad: Any
    for bad in BAD_TIMEOUTS:
        with pytest.raises(rr.ConfigError, match="timeout"):
            limiter.await_sample(1, bad)
        with pytest.raises(rr.ConfigError, match="timeout"):
            limiter.await_insert(1, bad)
    assert limiter.stats.inserts == limiter.stats.samples == limiter.stats.sample_waits == 0
    with pytest.raises(rr.ReplayTimeout):
        limiter.await_sample(1, 0.01)

    def insert() -> None:
        limiter.await_insert(5)
        limiter.commit_insert(5, 5)

    threading.Timer(0.2, insert).start()
    limiter.await_sample(1, math.inf)  # waits for the timer's inserts
    assert limiter.stats.samples == 1


def test_iterate_takes_the_same_timeouts() -> None:
    buf = twin_of("uniform").fresh()
    bad: Any
    for bad in BAD_TIMEOUTS:
        with pytest.raises(rr.ConfigError, match="timeout"):
            buf.iterate(2, timeout=bad)
    with buf.iterate(2, timeout=math.inf) as batches:
        assert next(batches).obs.shape == (2, 2)


@pytest.mark.parametrize("method", ["add", "extend"])
def test_add_block_is_checked_as_a_flag(method: str) -> None:
    buf = twin_of("uniform").fresh()
    values = steps(1, 1, start=40)[0]
    if method == "extend":
        values = {k: np.asarray(v)[None] for k, v in values.items()}
    with pytest.raises(rr.ConfigError, match="block"):
        getattr(buf, method)(block=np.zeros(0), timeout=0, **values)


# ---------------------------------------------------------------------- failing transforms
class Boom(Exception):
    """What the failing transform raises."""


def boom(batch: rr.Batch) -> rr.Batch:
    raise Boom("the transform failed")


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_transform_rolls_the_draw_back(kind: str) -> None:
    """The transform's own exception passes through; the generator and a prioritized buffer's
    beta schedule are as before the call: the next samples equal an untouched twin's."""
    twin = twin_of(kind)
    calls: list[Call] = [
        lambda b: b.sample(4, transform=boom),
        lambda b: b.sample_sequences(2, 3, transform=boom),
        lambda b: b.sample_sequences(2, 3, pad=False, transform=boom),
    ]
    if not kind.startswith("prioritized"):
        calls.append(lambda b: b.sample(4, transform=boom, recent_ratio=0.5))  # general path
    for call in calls:
        buf = twin.fresh()
        with pytest.raises(Boom):
            call(buf)
        twin.assert_untouched(buf, "a failing transform")
        buf.close()


def test_a_failing_buffer_transform_rolls_the_draw_back() -> None:
    fails = [False]

    def sometimes(batch: rr.Batch) -> rr.Batch:
        if fails[0]:
            raise Boom("the buffer's transform failed")
        return batch

    buf = rr.ReplayBuffer(16, FIELDS, seed=3, transforms=[sometimes])
    twin = rr.ReplayBuffer(16, FIELDS, seed=3, transforms=[sometimes])
    for b in (buf, twin):
        for values in steps(10, 1):
            b.add(**values)
    fails[0] = True
    with pytest.raises(Boom):
        buf.sample(4)
    fails[0] = False
    assert states_equal(buf.state_dict(), twin.state_dict())
    np.testing.assert_array_equal(buf.sample(8).ids, twin.sample(8).ids)


def test_a_transform_that_is_not_callable_is_refused_before_the_draw() -> None:
    twin = twin_of("prioritized")
    three: Any = 3
    calls: list[Call] = [
        lambda b: b.sample(4, transform=three),
        lambda b: b.sample_sequences(2, 2, transform=three),
    ]
    for call in calls:
        buf = twin.fresh()
        with pytest.raises(rr.ConfigError, match="transform"):
            call(buf)
        twin.assert_untouched(buf, "transform=3")


# ---------------------------------------------------------------------- construction
def test_check_capacity_refuses_storage_beyond_the_budget() -> None:
    from rlreplay.buffer.budget import check_capacity

    fields = rr.ReplayBuffer(16, FIELDS).schema.fields
    check_capacity(10**6, fields)
    for capacity in (10**12, 2**63, 10**400):
        with pytest.raises(rr.ConfigError, match="capacity"):
            check_capacity(capacity, fields)


@pytest.mark.parametrize("capacity", [10**12, 2**63])
def test_a_capacity_beyond_the_budget_is_refused_before_allocation(capacity: int) -> None:
    with pytest.raises(rr.ConfigError, match="capacity"):
        rr.ReplayBuffer(capacity, FIELDS)


# ---------------------------------------------------------------------- the rate limiter
def limiter_calls() -> st.SearchStrategy[tuple[str, Callable[[rr.RateLimiter], Any]]]:
    def named(what: str, fn: Callable[..., Any], *args: st.SearchStrategy[Any]) -> Any:
        return st.builds(lambda *a: (what, lambda lim: fn(lim, *a)), *args)

    wait = timeout(True)
    return st.one_of(
        named("can_insert", lambda lim, n: lim.can_insert(n), count()),
        named("can_sample", lambda lim, n: lim.can_sample(n), count()),
        named("await_insert", lambda lim, n, t: lim.await_insert(n, t), count(), wait),
        named("await_sample", lambda lim, n, t: lim.await_sample(n, t), count(), wait),
        named("commit_insert", lambda lim, n, s: lim.commit_insert(n, s), count(), count()),
        named("cancel_insert", lambda lim, n: lim.cancel_insert(n), count()),
        named("cancel_sample", lambda lim, n: lim.cancel_sample(n), count()),
        named("set_size", lambda lim, n: lim.set_size(n), count()),
        named("load_state_dict", lambda lim, s: lim.load_state_dict(s), st.one_of(
            hostile(), st.fixed_dictionaries({}, optional={
                "config": hostile(), "inserts": count(), "samples": count(), "size": count()}))),
    )  # fmt: skip


def limiter_state(lim: rr.RateLimiter) -> tuple[Any, ...]:
    stats = lim.stats.to_dict()
    stats.pop("insert_blocked_s")
    stats.pop("sample_blocked_s")
    return (lim.state_dict(), stats)


@settings(max_examples=EXAMPLES * 4, deadline=None)
@given(call=limiter_calls())
def test_hostile_rate_limiter_calls_are_answered_and_refusals_change_nothing(
    call: tuple[str, Callable[[rr.RateLimiter], Any]],
) -> None:
    check_limiter_call(*call)


@pytest.mark.slow
@settings(deadline=None)
@given(call=limiter_calls())
def test_hostile_rate_limiter_calls_10k(call: tuple[str, Callable[[rr.RateLimiter], Any]]) -> None:
    check_limiter_call(*call)


def check_limiter_call(what: str, fn: Callable[[rr.RateLimiter], Any]) -> None:
    lim = rr.SampleToInsertRatio(2.0, 3, error_buffer=8.0)
    lim.await_insert(3, 0)
    lim.commit_insert(3, 3)
    lim.await_insert(1, 0)  # one pending insert
    before = limiter_state(lim)
    _, exc = run_bounded(lambda: fn(lim), what)
    if exc is not None:
        assert isinstance(exc, rr.ReplayError), f"{what}: {type(exc).__name__}: {exc}"
        if not isinstance(exc, rr.ReplayTimeout):  # (a timeout counts itself in the stats)
            assert limiter_state(lim) == before, what
