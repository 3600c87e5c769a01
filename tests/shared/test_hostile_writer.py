"""Hostile arguments to shared-memory writers (``rr.attach``, ``SharedWriter``): answered, never
hung, and a refused call leaves the shared buffer and the writer as they were.

The strategies are :mod:`tests.test_hostile`'s. One owner and one attached writer (in this
process) serve all the examples of a test: before each call the owner's ``state_dict()`` and
the writer's next steps are taken; after a refusal (an rlreplay error) both must be unchanged,
and the owner's next samples equal those of a copy of its state that saw nothing.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from tests.test_hostile import (
    BAD_TIMEOUTS,
    EXAMPLES,
    TEST_BUDGET,
    budget,
    hostile,
    run_bounded,
    states_equal,
)

FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}
E = 2


def step(lead: tuple[int, ...], t: int, end: bool = False) -> dict[str, Any]:
    values: dict[str, Any] = {
        "obs": np.full((*lead, 2), t, np.float32),
        "action": np.full(lead, t % 3, np.int64),
        "reward": np.full(lead, 0.5, np.float32),
        "terminated": np.full(lead, end),
        "truncated": np.zeros(lead, bool),
    }
    if end:
        values["next_obs"] = np.full((*lead, 2), -t, np.float32)
    return values


class Rig:
    """A shared buffer of two envs, a writer of both, and their snapshots."""

    def __init__(self) -> None:
        self.buf = rr.ReplayBuffer(32, FIELDS, num_envs=E, seed=5, n_step=2, storage="shared")
        self.handle = self.buf.share()
        self.writer = rr.attach(self.handle)
        for t in range(12):
            self.writer.add(**step((E,), t, end=t % 5 == 4))

    def snapshot(self) -> tuple[dict[str, Any], list[int]]:
        steps = [self.writer.next_step(e) for e in range(E)]
        return self.buf.state_dict(), steps

    def close(self) -> None:
        self.writer.close()
        self.buf.close()


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    r.close()


def step_values(lead: tuple[int, ...] = (E,)) -> st.SearchStrategy[dict[str, Any]]:
    """A valid step (leading axis ``lead``) with some values made hostile, or names added."""
    good = step(lead, 40)
    names = [*good, "next_obs", "nxt"]
    return st.builds(
        lambda changes, drop: {**{k: v for k, v in good.items() if k not in drop}, **changes},
        st.dictionaries(st.sampled_from(names), hostile(), max_size=2),
        st.sets(st.sampled_from(list(good)), max_size=1),
    )


Call = Callable[[rr.SharedWriter], Any]


def writer_calls() -> st.SearchStrategy[tuple[str, Call]]:
    env = st.one_of(st.sampled_from([0, 1]), hostile())
    add = st.builds(
        lambda v, kw: ("add", lambda w: w.add(**v, **kw)),
        step_values(),
        st.fixed_dictionaries({}, optional={"env_ids": st.one_of(st.just([0, 1]), hostile())}),
    )
    extend = st.builds(
        lambda v, e: ("extend", lambda w: w.extend(env_id=e, **v)),
        step_values((1,)),
        env,
    )
    end = st.builds(
        lambda e, kw: ("end_episode", lambda w: w.end_episode(e, **kw)),
        env,
        st.dictionaries(st.sampled_from(["next_obs", "obs"]), hostile(), max_size=2),
    )
    nxt = st.builds(lambda e: ("next_step", lambda w: w.next_step(e)), env)
    return st.one_of(add, extend, end, nxt)


def check(rig: Rig, what: str, call: Callable[[], Any]) -> None:
    before, steps = rig.snapshot()
    with budget(TEST_BUDGET):
        _, exc = run_bounded(call, what)
    if exc is None:
        return
    if not isinstance(exc, rr.ReplayError):
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}") from exc
    after, steps_after = rig.snapshot()
    assert steps_after == steps, what
    assert states_equal(after, before), what


@settings(
    max_examples=EXAMPLES * 4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(call=writer_calls())
def test_hostile_writer_calls_are_answered_and_refusals_change_nothing(
    rig: Rig, call: tuple[str, Call]
) -> None:
    check(rig, call[0], lambda: call[1](rig.writer))


@pytest.mark.slow
@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(call=writer_calls())
def test_hostile_writer_calls_10k(rig: Rig, call: tuple[str, Call]) -> None:
    check(rig, call[0], lambda: call[1](rig.writer))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(handle=hostile(), timeout=st.one_of(st.sampled_from(BAD_TIMEOUTS), st.floats(0, 0.01)))
def test_hostile_attach_is_answered(rig: Rig, handle: Any, timeout: Any) -> None:
    """``attach`` with anything: an rlreplay error, or (the rig's envs being taken) a refusal."""
    for h in (handle, rig.handle):

        def attach(h: Any = h) -> Any:
            return rr.attach(h, timeout=timeout)

        _, exc = run_bounded(attach, "attach")
        assert isinstance(exc, rr.ReplayError), exc


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS, ids=repr)
def test_attach_refuses_bad_timeouts_before_it_maps_anything(rig: Rig, timeout: Any) -> None:
    with pytest.raises(rr.ConfigError, match="timeout"):
        rr.attach(rig.handle, timeout=timeout)


@pytest.mark.parametrize("timeout", [None, math.inf, 1e300])
def test_attach_with_an_infinite_timeout_waits_for_the_env(timeout: Any) -> None:
    buf = rr.ReplayBuffer(16, FIELDS, seed=0, storage="shared")
    handle = buf.share()
    first = rr.attach(handle)
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(rr.attach(handle, timeout=timeout)))
    # (the same process holds env 0 through `first`: attach waits until it is closed)
    thread.start()
    thread.join(0.2)
    assert thread.is_alive() and not got
    first.close()
    thread.join(10)
    assert not thread.is_alive() and isinstance(got[0], rr.SharedWriter)
    got[0].close()
    buf.close()
