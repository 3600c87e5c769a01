"""Hostile arguments to the sharded service (``ReplayService``, its ``Writer``): answered, never
hung, and a refused call changes nothing.

The strategies are :mod:`tests.test_hostile`'s. One prioritized, rate-limited service of two
shards serves every example. Before each call its generator's state, its sample count, its
queued priority updates and the shards' and limiter's counters are taken; after a refusal (an
rlreplay error) they must be unchanged, so the next samples are those of a service that never
saw the call. A ``Writer`` keeps steps locally until it flushes: each example gets a fresh
one whose buffer must stay as it was after a refusal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.distributed import ReplayService
from tests.test_hostile import (
    BAD_TIMEOUTS,
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

FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}
E = 4


def step(t: int) -> dict[str, Any]:
    end = t % 5 == 4
    return {
        "obs": np.full((E, 2), t, np.float32),
        "action": np.full(E, t % 3, np.int64),
        "reward": np.full(E, 0.5, np.float32),
        "terminated": np.full(E, end),
        "truncated": np.zeros(E, bool),
        "next_obs": np.full((E, 2), -t, np.float32),
    }


@pytest.fixture(scope="module")
def service(ray_local: Any) -> Iterator[ReplayService]:
    limiter = rr.SampleToInsertRatio(1.0, 4, error_buffer=(-1e9, 1e9))  # never in the way
    svc = ReplayService(2, 64, FIELDS, prioritized=True, seed=3, num_envs=E,
                        rate_limiter=limiter)  # fmt: skip
    with svc.writer(list(range(E)), flush_every=8) as w:
        for t in range(12):
            w.add(**step(t))
    yield svc
    svc.close()


def state(svc: ReplayService) -> tuple[Any, ...]:
    stats = svc.stats(timeout=60)
    shards = [{k: v for k, v in s.items() if k != "checkpoint"} for s in stats["shards"]]
    limiter = dict(stats["rate_limiter"])
    for k in ("insert_blocked_s", "sample_blocked_s"):
        limiter.pop(k)
    return (str(svc._rng.bit_generator.state), svc._samples, shards, limiter)


Call = Callable[[ReplayService], Any]


def service_calls(ids: list[int]) -> st.SearchStrategy[tuple[str, Call]]:
    wait = st.fixed_dictionaries({"timeout": timeout(True)})
    some_ids = st.one_of(st.lists(st.sampled_from(ids), min_size=1, max_size=4), hostile())

    def named(name: str, fn: Callable[..., Any], *args: st.SearchStrategy[Any]) -> Any:
        return st.builds(lambda *a: (name, lambda svc: fn(svc, *a)), *args)

    return st.one_of(
        named("sample", lambda s, b, t: s.sample(b, **t), count(), wait),
        named(
            "iterate",
            lambda s, b, p, c, t: s.iterate(b, prefetch=p, per_call=c, **t),
            count(),
            count(3),
            count(3),
            wait,
        ),
        named(
            "update_priorities",
            lambda s, i, p, t, w: s.update_priorities(i, p, wait=w, **t),
            some_ids,
            st.one_of(hostile(), st.lists(floats(), min_size=1, max_size=4)),
            wait,
            flags(),
        ),
        named("get_transitions", lambda s, i, t: s.get_transitions(i, **t), some_ids, wait),
        named("stats", lambda s, t: s.stats(**t), wait),
        named(
            "writer",
            lambda s, e, f: s.writer(e, flush_every=f),
            st.one_of(st.just([0, 1]), hostile()),
            count(),
        ),
    )


def check(svc: ReplayService, what: str, call: Call) -> None:
    before = state(svc)
    with budget(TEST_BUDGET):
        result, exc = run_bounded(lambda: call(svc), what)
    if exc is None:
        if hasattr(result, "close"):  # an iterate() generator: nothing requested yet
            result.close()
        return
    if not isinstance(exc, rr.ReplayError):
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}") from exc
    assert state(svc) == before, f"{what} -> {type(exc).__name__}: {exc}"


_IDS: list[int] = []


def known_ids(svc: ReplayService) -> list[int]:
    """Service ids of stored transitions (drawn once)."""
    if not _IDS:
        _IDS.extend(sorted({int(i) for i in svc.sample(32, timeout=60).ids}))
    return _IDS


@settings(
    max_examples=EXAMPLES * 3,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_hostile_service_calls_are_answered_and_refusals_change_nothing(
    service: ReplayService, data: st.DataObject
) -> None:
    name, call = data.draw(service_calls(known_ids(service)), label="call")
    check(service, name, call)


@pytest.mark.slow
@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_hostile_service_calls_10k(service: ReplayService, data: st.DataObject) -> None:
    name, call = data.draw(service_calls(known_ids(service)), label="call")
    check(service, name, call)


def writer_calls() -> st.SearchStrategy[tuple[str, Callable[[Any], Any]]]:
    good = step(40)
    values = st.builds(
        lambda changes, drop: {**{k: v for k, v in good.items() if k not in drop}, **changes},
        st.dictionaries(st.sampled_from([*good, "nxt"]), hostile(), max_size=2),
        st.sets(st.sampled_from(list(good)), max_size=1),
    )
    add = st.builds(
        lambda v, kw: ("add", lambda w: w.add(**v, **kw)),
        values,
        st.fixed_dictionaries(
            {}, optional={"env_ids": st.one_of(st.just([0, 1]), hostile()), "timeout": hostile()}
        ),
    )
    flush = st.builds(lambda t: ("flush", lambda w: w.flush(timeout=t)), timeout(True))
    return st.one_of(add, flush)


@settings(
    max_examples=EXAMPLES * 3,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(call=writer_calls())
def test_hostile_writer_calls_are_answered_and_refusals_keep_its_steps(
    service: ReplayService, call: tuple[str, Callable[[Any], Any]]
) -> None:
    writer = service.writer(list(range(E)), flush_every=10**6)  # steps stay local
    writer.add(**step(50))
    what, fn = call
    before = (writer.pending, [(e, sorted(v)) for e, v in writer._steps])
    _, exc = run_bounded(lambda: fn(writer), what)
    if exc is not None:
        if not isinstance(exc, rr.ReplayError):
            raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(exc, rr.ReplayTimeout):  # (a timed-out flush sent what it could)
            assert (writer.pending, [(e, sorted(v)) for e, v in writer._steps]) == before, what
    writer._steps.clear()  # nothing of the hostile steps reaches the shards


@pytest.mark.parametrize("bad", BAD_TIMEOUTS, ids=repr)
def test_every_blocking_service_call_refuses_bad_timeouts_before_sending(
    service: ReplayService, bad: Any
) -> None:
    ids = known_ids(service)
    before = state(service)
    calls: list[Callable[[], Any]] = [
        lambda: service.sample(2, timeout=bad),
        lambda: service.iterate(2, timeout=bad),
        lambda: service.update_priorities(ids[:1], [1.0], timeout=bad),
        lambda: service.get_transitions(ids[:1], timeout=bad),
        lambda: service.stats(timeout=bad),
        lambda: service.writer([0]).flush(timeout=bad),
    ]
    for fn in calls:
        with pytest.raises(rr.ConfigError, match="timeout"):
            fn()
    assert state(service) == before


def test_infinite_service_timeouts_wait_for_ever(service: ReplayService) -> None:
    for forever in (None, math.inf, 1e300):
        assert service.sample(4, timeout=forever).obs.shape == (4, 2)


def test_service_sizes_beyond_the_budget_are_refused_before_the_draw(
    service: ReplayService,
) -> None:
    before = state(service)
    for fn in (lambda: service.sample(10**12), lambda: service.iterate(2**40, per_call=2**30)):
        with pytest.raises(rr.ConfigError, match="size budget"):
            fn()
    assert state(service) == before


def test_a_request_the_rate_limiter_could_never_grant_is_refused_here(ray_local: Any) -> None:
    limiter = rr.SampleToInsertRatio(1.0, 4, error_buffer=10.0)
    svc = ReplayService(2, 64, FIELDS, seed=3, num_envs=E, rate_limiter=limiter)
    rng = str(svc._rng.bit_generator.state)
    for fn in (lambda: svc.sample(20), lambda: svc.iterate(5, per_call=4)):
        with pytest.raises(rr.ConfigError, match="max_diff"):
            fn()
    assert str(svc._rng.bit_generator.state) == rng and svc._samples == 0
    svc.close()
