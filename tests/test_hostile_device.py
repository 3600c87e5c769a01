"""Hostile arguments to the torch device buffers (``storage="torch"``): answered, never hung,
and a refusal changes nothing.

The contract of :mod:`tests.test_hostile`, for :class:`rlreplay.torch.DeviceReplayBuffer` and
:class:`~rlreplay.torch.DevicePrioritizedReplayBuffer` (two envs, 2-step windows, stacks of 2):
each call of a public method with arguments Hypothesis makes hostile (huge and negative ints,
NaN and infinite floats, NumPy scalars, odd arrays *and tensors* of every dtype and shape,
``None``, objects), within :data:`~tests.test_hostile.BOUND` seconds, returns or raises an
rlreplay error; after a refusal the buffer equals a twin that got nothing: its contents
(converted to the core, every array), its torch generator and ``beta`` step, and its next
samples. Tensor priorities with invalid values are ignored by design (checking them would
wait for the device): such calls return, and are not compared.

The default run is short; ``-m slow`` runs 10^4 examples per method.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import rlreplay as rr  # noqa: E402
import rlreplay.torch as rrt  # noqa: E402
from tests.test_hostile import (  # noqa: E402
    FIELDS,
    TEST_BUDGET,
    budget,
    count,
    flags,
    hostile,
    ints,
    maybe,
    odd_arrays,
    run_bounded,
    steps,
)

EXAMPLES = 15  # per method and kind in the default run (CI); -m slow: 10^4
KINDS = ("device", "device_prio")


def build(kind: str) -> Any:
    kw: dict[str, Any] = dict(num_envs=2, n_step=2, frame_stack=2, seed=7, device="cpu")
    buf: Any = (
        rrt.DevicePrioritizedReplayBuffer(32, FIELDS, beta_steps=10, **kw)
        if kind == "device_prio"
        else rrt.DeviceReplayBuffer(32, FIELDS, **kw)
    )
    for values in steps(20, 2):
        values.setdefault("next_obs", np.zeros((2, 2), np.float32))  # given every add here
        buf.add(**values)
    if kind == "device_prio":
        ids = buf.sampleable_ids()
        buf.update_priorities(ids.numpy(), np.linspace(0.5, 3.0, ids.shape[0]))
    return buf


def snapshot(buf: Any) -> dict[str, Any]:
    """Everything a refused call must leave as it was."""
    state = buf.to_replay_buffer(seed=0).state_dict()
    out = {"arrays": state["arrays"], "gen": buf._gen.get_state().clone()}
    if hasattr(buf, "beta_step"):
        out["beta_step"] = buf.beta_step
    return out


def next_samples(buf: Any) -> list[dict[str, Any]]:
    return [dict(buf.sample(4)), dict(buf.sample_sequences(2, 3))]


class Twin:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.state = snapshot(build(kind))
        self.next = next_samples(build(kind))

    def assert_untouched(self, buf: Any, what: str) -> None:
        got = snapshot(buf)
        assert torch.equal(got["gen"], self.state["gen"]), f"{what}: the generator moved"
        assert got.get("beta_step") == self.state.get("beta_step"), f"{what}: beta moved"
        assert sorted(got["arrays"]) == sorted(self.state["arrays"]), what
        for name, arr in self.state["arrays"].items():
            other = got["arrays"][name]
            assert other.shape == arr.shape, f"{what}: {name}"
            assert np.array_equal(other, arr, equal_nan=arr.dtype.kind == "f"), f"{what}: {name}"
        for mine, theirs in zip(next_samples(buf), self.next, strict=True):
            assert sorted(mine) == sorted(theirs), what
            for key in mine:
                assert torch.equal(mine[key], theirs[key]), f"{what}: {key}"


_TWINS: dict[str, Twin] = {}


def twin_of(kind: str) -> Twin:
    if kind not in _TWINS:
        _TWINS[kind] = Twin(kind)
    return _TWINS[kind]


def _tensor(arr: np.ndarray[Any, Any]) -> Any:
    try:
        return torch.from_numpy(np.ascontiguousarray(arr))
    except (TypeError, ValueError, RuntimeError):  # a dtype torch lacks: the array itself
        return arr


def anything() -> st.SearchStrategy[Any]:
    """:func:`tests.test_hostile.hostile` plus tensors of odd dtypes and shapes."""
    return st.one_of(hostile(), odd_arrays().map(_tensor))


def id_args(kind: str) -> st.SearchStrategy[Any]:
    valid = build(kind).sampleable_ids().tolist()
    return st.one_of(
        st.lists(st.sampled_from(valid), min_size=1, max_size=4),
        st.lists(st.sampled_from(valid), min_size=1, max_size=4).map(torch.tensor),
        st.lists(st.one_of(st.sampled_from(valid), ints()), max_size=4).map(np.asarray),
        anything(),
    )


def step_values() -> st.SearchStrategy[dict[str, Any]]:
    good = steps(1, 2, start=44)[0]
    good["next_obs"] = np.ones((2, 2), np.float32)
    names = [*good, "nxt"]
    as_tensors = st.booleans()
    return st.builds(
        lambda changes, drop, tensors: {
            **{
                k: (_tensor(np.asarray(v)) if tensors else v)
                for k, v in good.items()
                if k not in drop
            },
            **changes,
        },
        st.dictionaries(st.sampled_from(names), anything(), max_size=2),
        st.sets(st.sampled_from(list(good)), max_size=1),
        as_tensors,
    )


Call = Callable[[Any], Any]


def call_of(name: str, *args: Any, **kwargs: Any) -> Call:
    def call(buf: Any) -> Any:
        return getattr(buf, name)(*args, **kwargs)

    call.__name__ = f"{name}(*{args!r:.200}, **{kwargs!r:.200})"
    return call


def calls(kind: str, method: str) -> st.SearchStrategy[Call]:
    def call(
        *args: st.SearchStrategy[Any], **options: st.SearchStrategy[Any]
    ) -> st.SearchStrategy[Call]:
        return st.builds(
            lambda a, kw: call_of(method, *a, **kw), st.tuples(*args), maybe(**options)
        )

    if method == "sample":
        if kind == "device_prio":
            return call(count(), beta=anything(), check=flags(), timeout=anything())
        return call(count(), recent_ratio=anything() | st.floats(0, 1), recent_steps=count(),
                    replacement=flags(), check=flags(), timeout=anything())  # fmt: skip
    if method == "abandon_episode":
        return call(st.one_of(st.integers(-3, 3), anything()))
    if method == "sample_sequences":
        return call(count(), count(), within_episode=flags(), pad=flags(),
                    balance_envs=flags())  # fmt: skip
    if method == "get_sequences":
        return call(id_args(kind), count(), within_episode=flags())
    if method in ("get_transitions", "sampleable", "get_priorities"):
        return call(id_args(kind))
    if method == "can_sample":
        return call(count())
    if method == "add":
        return step_values().map(lambda v: call_of("add", **v))
    if method == "update_priorities":
        priorities = st.one_of(
            anything(), st.lists(st.floats(), min_size=1, max_size=4).map(np.asarray)
        )
        return call(id_args(kind), priorities)
    raise AssertionError(method)


METHODS = ["sample", "sample_sequences", "get_sequences", "get_transitions", "sampleable",
           "can_sample", "add", "abandon_episode"]  # fmt: skip
PRIORITIZED = ["update_priorities", "get_priorities"]
CASES = [(k, m) for k in KINDS for m in METHODS] + [("device_prio", m) for m in PRIORITIZED]


def tensor_priorities(call: Call) -> bool:
    """An ``update_priorities`` given tensors: invalid values are ignored, not refused."""
    return "update_priorities" in call.__name__ and "tensor(" in call.__name__


def check_call(kind: str, call: Call) -> None:
    twin = twin_of(kind)
    buf = build(kind)
    with budget(TEST_BUDGET):
        _, exc = run_bounded(lambda: call(buf), call.__name__)
    if exc is None:
        return
    if not isinstance(exc, rr.ReplayError):
        raise AssertionError(
            f"{call.__name__} raised {type(exc).__name__}, not an rlreplay error: {exc}"
        ) from exc
    if not tensor_priorities(call):
        twin.assert_untouched(buf, f"{call.__name__} -> {type(exc).__name__}: {exc}")


@pytest.mark.parametrize(("kind", "method"), CASES)
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(data=st.data())
def test_hostile_device_calls(kind: str, method: str, data: st.DataObject) -> None:
    check_call(kind, data.draw(calls(kind, method), label="call"))


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS + PRIORITIZED)
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_hostile_device_calls_10k(method: str, data: st.DataObject) -> None:
    """10^4 examples per method (the ``slow`` profile), over the kinds that have it."""
    kind = data.draw(st.sampled_from([k for k, m in CASES if m == method]), label="kind")
    check_call(kind, data.draw(calls(kind, method), label="call"))
