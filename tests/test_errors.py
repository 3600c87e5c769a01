"""Bad input: every rejected call raises the right error, names the culprit, and changes nothing.

Each rejection is checked three ways: the exception is both the rlreplay class and the built-in
it derives from; its message names the field or argument (and what was expected / what came);
and the buffer's full state (``state_dict()`` arrays, meta and RNG) is exactly as before, so
later samples equal those of a twin buffer that never saw the bad call.

Buffers are "warmed up" with valid calls of several leading-axis lengths before the bad call,
as a real training loop would have done: a rejection must not depend on what was seen before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr

OBS_SHAPE = (4,)
E = 4  # envs of the multi-env buffers
CAPACITY = 64


def fields() -> dict[str, rr.Field]:
    return {"obs": rr.Field(OBS_SHAPE, np.float32), "action": rr.Field((), np.int64)}


def make(num_envs: int = 1, **kw: Any) -> rr.ReplayBuffer:
    return rr.ReplayBuffer(CAPACITY, fields(), num_envs=num_envs, n_step=2, seed=0, **kw)


def step(lead: tuple[int, ...] = (), end: bool = False, value: float = 0.0) -> dict[str, Any]:
    """A valid step with leading axes ``lead``; ``end`` terminates the (first) row's episode."""
    terminated = np.zeros(lead, np.bool_)
    if end:
        terminated[(0,) * len(lead)] = True
    return {
        "obs": np.full(lead + OBS_SHAPE, value, np.float32),
        "action": np.full(lead, int(value), np.int64),
        "reward": np.full(lead, value, np.float32),
        "next_obs": np.full(lead + OBS_SHAPE, value + 0.5, np.float32),
        "terminated": terminated,
        "truncated": np.zeros(lead, np.bool_),
    }


def with_(values: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``values`` with some entries replaced; a change to ``DROP`` removes the entry."""
    out = dict(values)
    for k, v in changes.items():
        if v is DROP:
            out.pop(k, None)
        else:
            out[k] = v
    return out


DROP = object()


def warm_single(buf: rr.ReplayBuffer) -> None:
    """Valid single-env traffic: plain adds, an episode end, extends of T=2 and T=3."""
    for i in range(3):
        buf.add(**step(value=float(i)))
    buf.add(**step(end=True, value=3.0))
    buf.extend(**step((2,), value=4.0))
    ext = step((3,), value=5.0)
    ext["terminated"][-1] = True
    buf.extend(**ext)
    buf.add(**step(value=6.0))


def warm_multi(buf: rr.ReplayBuffer) -> None:
    """Valid multi-env traffic: full-width adds, an episode end, adds with 2 and 3 env ids."""
    for i in range(3):
        buf.add(**step((E,), value=float(i)))
    buf.add(**step((E,), end=True, value=3.0))
    buf.add(env_ids=[1, 3], **step((2,), value=4.0))
    buf.add(env_ids=np.array([0, 2, 3]), **step((3,), end=True, value=5.0))
    buf.add(**step((E,), value=6.0))


def more_single(buf: rr.ReplayBuffer) -> None:
    for i in range(5):
        buf.add(**step(end=i == 4, value=10.0 + i))


def more_multi(buf: rr.ReplayBuffer) -> None:
    for i in range(5):
        buf.add(**step((E,), end=i == 4, value=10.0 + i))


def assert_same_state(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert after["class"] == before["class"]
    assert after["config"] == before["config"]
    assert after["meta"] == before["meta"]
    assert sorted(after["arrays"]) == sorted(before["arrays"])
    for name, arr in before["arrays"].items():
        got = after["arrays"][name]
        assert got.dtype == arr.dtype, name
        assert got.shape == arr.shape, name
        assert np.array_equal(got, arr), f"state array {name!r} changed"


def assert_same_samples(a: rr.ReplayBuffer, b: rr.ReplayBuffer, draws: int = 3) -> None:
    for _ in range(draws):
        sa, sb = a.sample(16), b.sample(16)
        assert sorted(sa) == sorted(sb)
        for k in sa:
            np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


def check_rejected(
    factory: Callable[[], rr.ReplayBuffer],
    warm: Callable[[rr.ReplayBuffer], None],
    more: Callable[[rr.ReplayBuffer], None],
    bad_call: Callable[[rr.ReplayBuffer], object],
    exc: type[BaseException] | tuple[type[BaseException], ...],
    builtin: type[BaseException] | tuple[type[BaseException], ...],
    names: tuple[str, ...],
) -> None:
    """Run ``bad_call`` on a warmed-up buffer and check type, message and untouched state."""
    buf = factory()
    warm(buf)
    before = buf.state_dict()
    with pytest.raises(exc) as info:
        bad_call(buf)
    assert isinstance(info.value, rr.ReplayError)
    assert isinstance(info.value, builtin)
    message = str(info.value)
    for name in names:
        assert name in message, f"{name!r} not named in: {message}"
    assert_same_state(before, buf.state_dict())
    # The rejected call left no trace: the same later traffic gives the same samples and state.
    twin = factory()
    warm(twin)
    more(buf)
    more(twin)
    assert_same_state(twin.state_dict(), buf.state_dict())
    assert_same_samples(buf, twin)


# --------------------------------------------------------------------------- single-env add
SINGLE_ADD_CASES: list[tuple[str, dict[str, Any], type[Exception], type[Exception], tuple]] = [
    # (id, changes to a valid step, rr class, builtin, substrings the message must contain)
    ("obs-too-long", {"obs": np.zeros(5, np.float32)}, rr.ShapeError, ValueError,
     ("obs", "(4,)", "(5,)")),
    ("obs-extra-axis", {"obs": np.zeros((1, 4), np.float32)}, rr.ShapeError, ValueError,
     ("obs", "(1, 4)")),
    ("obs-python-scalar", {"obs": 1.0}, rr.ShapeError, ValueError, ("obs",)),
    ("action-axis", {"action": np.zeros(1, np.int64)}, rr.ShapeError, ValueError, ("action",)),
    ("reward-vector", {"reward": np.zeros(2, np.float32)}, rr.ShapeError, ValueError,
     ("reward", "(2,)")),
    ("terminated-axis", {"terminated": np.zeros(1, np.bool_)}, rr.ShapeError, ValueError,
     ("terminated",)),
    ("obs-complex", {"obs": np.zeros(4, np.complex64)}, rr.DTypeError, TypeError,
     ("obs", "complex64", "float32")),
    ("obs-none", {"obs": None}, rr.DTypeError, TypeError, ("obs",)),
    ("obs-string", {"obs": np.array(["a", "b", "c", "d"])}, rr.DTypeError, TypeError, ("obs",)),
    ("action-float-array", {"action": np.array(1.0)}, rr.DTypeError, TypeError,
     ("action", "float64", "int64")),
    ("action-python-float", {"action": 1.5}, rr.DTypeError, TypeError, ("action", "1.5")),
    ("terminated-python-int", {"terminated": 1}, rr.DTypeError, TypeError, ("terminated",)),
    ("terminated-float-array", {"terminated": np.array(0.0)}, rr.DTypeError, TypeError,
     ("terminated", "float64", "bool")),
    ("truncated-int-array", {"truncated": np.array(0)}, rr.DTypeError, TypeError,
     ("truncated", "bool")),
    ("reward-string", {"reward": "1"}, rr.DTypeError, TypeError, ("reward",)),
    ("unknown-field", {"actoin": 1}, rr.FieldError, KeyError, ("actoin",)),
    ("unknown-next", {"next_action": 1}, rr.FieldError, KeyError, ("next_action",)),
    ("missing-action", {"action": DROP}, rr.FieldError, KeyError, ("action",)),
    ("missing-obs", {"obs": DROP}, rr.FieldError, KeyError, ("obs",)),
    ("missing-reward", {"reward": DROP}, rr.FieldError, KeyError, ("reward",)),
    ("missing-terminated", {"terminated": DROP}, rr.FieldError, KeyError, ("terminated",)),
    ("missing-truncated", {"truncated": DROP}, rr.FieldError, KeyError, ("truncated",)),
    ("terminated-no-next-obs", {"terminated": True, "next_obs": DROP}, rr.FieldError, KeyError,
     ("next_obs",)),
    ("truncated-no-next-obs", {"truncated": np.True_, "next_obs": DROP}, rr.FieldError,
     KeyError, ("next_obs",)),
    ("end-next-obs-shape", {"terminated": True, "next_obs": np.zeros(3, np.float32)},
     rr.ShapeError, ValueError, ("next_obs", "(4,)", "(3,)")),
    ("end-next-obs-dtype", {"truncated": True, "next_obs": np.zeros(4, np.complex128)},
     rr.DTypeError, TypeError, ("next_obs", "complex128")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "exc", "builtin", "names"),
    [pytest.param(*c[1:], id=c[0]) for c in SINGLE_ADD_CASES],
)
def test_single_env_add_rejects(
    changes: dict[str, Any], exc: type[Exception], builtin: type[Exception], names: tuple
) -> None:
    check_rejected(
        make, warm_single, more_single, lambda b: b.add(**with_(step(), **changes)),
        exc, builtin, names,
    )  # fmt: skip


# --------------------------------------------------------------------------- multi-env add
MULTI_ADD_CASES: list[tuple[str, dict[str, Any], type[Exception], type[Exception], tuple]] = [
    ("obs-lead-3", {"obs": np.zeros((3, 4), np.float32)}, rr.ShapeError, ValueError,
     ("obs", "(4, 4)", "(3, 4)")),
    ("obs-lead-5", {"obs": np.zeros((5, 4), np.float32)}, rr.ShapeError, ValueError,
     ("obs", "(5, 4)")),
    ("obs-no-lead", {"obs": np.zeros(4, np.float32)}, rr.ShapeError, ValueError, ("obs",)),
    ("action-lead-2", {"action": np.zeros(2, np.int64)}, rr.ShapeError, ValueError,
     ("action", "(4,)", "(2,)")),
    ("reward-python-scalar", {"reward": 1.0}, rr.ShapeError, ValueError, ("reward",)),
    ("terminated-scalar", {"terminated": np.False_}, rr.ShapeError, ValueError,
     ("terminated",)),
    ("truncated-lead-5", {"truncated": np.zeros(5, np.bool_)}, rr.ShapeError, ValueError,
     ("truncated",)),
    ("action-float", {"action": np.zeros(E)}, rr.DTypeError, TypeError, ("action", "float64")),
    ("terminated-int", {"terminated": np.zeros(E, np.int64)}, rr.DTypeError, TypeError,
     ("terminated",)),
    ("terminated-list-of-ints", {"terminated": [0, 1, 0, 0]}, rr.DTypeError, TypeError,
     ("terminated",)),
    ("unknown-field", {"info": np.zeros(E)}, rr.FieldError, KeyError, ("info",)),
    ("missing-obs", {"obs": DROP}, rr.FieldError, KeyError, ("obs",)),
    ("one-env-ends-no-next-obs", {"terminated": np.array([0, 0, 1, 0], np.bool_),
     "next_obs": DROP}, rr.FieldError, KeyError, ("next_obs",)),
    ("one-env-truncates-no-next-obs", {"truncated": np.array([1, 0, 0, 0], np.bool_),
     "next_obs": DROP}, rr.FieldError, KeyError, ("next_obs",)),
    ("end-next-obs-lead", {"terminated": np.array([0, 1, 0, 0], np.bool_),
     "next_obs": np.zeros((1, 4), np.float32)}, rr.ShapeError, ValueError,
     ("next_obs", "(4, 4)", "(1, 4)")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "exc", "builtin", "names"),
    [pytest.param(*c[1:], id=c[0]) for c in MULTI_ADD_CASES],
)
def test_multi_env_add_rejects(
    changes: dict[str, Any], exc: type[Exception], builtin: type[Exception], names: tuple
) -> None:
    check_rejected(
        lambda: make(E), warm_multi, more_multi,
        lambda b: b.add(**with_(step((E,)), **changes)),
        exc, builtin, names,
    )  # fmt: skip


# --------------------------------------------------------------------------- add with env_ids
ENV_ID_ERRORS = (rr.InvalidIdError, rr.ShapeError, rr.DTypeError)
ANY_BUILTIN = (ValueError, TypeError)  # where either built-in fits the mistake
ENV_IDS_CASES: list[tuple[str, Any, dict[str, Any], Any, type[Exception], tuple]] = [
    # (id, env_ids, changes, rr class(es), builtin, names)
    ("out-of-range", [0, E], {}, rr.InvalidIdError, ValueError, ("env_ids", str(E))),
    ("negative", np.array([-1, 2]), {}, rr.InvalidIdError, ValueError, ("env_ids", "-1")),
    ("duplicates", [1, 1], {}, rr.InvalidIdError, ValueError, ("env_ids",)),
    ("float", [0.0, 1.0], {}, ENV_ID_ERRORS, ANY_BUILTIN, ("env_ids",)),
    ("bool-mask", np.array([True, False, True, False]), {}, ENV_ID_ERRORS, ANY_BUILTIN,
     ("env_ids",)),
    ("two-d", np.array([[0, 1]]), {}, ENV_ID_ERRORS, ANY_BUILTIN, ("env_ids",)),
    ("scalar", np.int64(1), {}, ENV_ID_ERRORS, ANY_BUILTIN, ("env_ids",)),
    ("too-many", list(range(E + 1)), {}, rr.InvalidIdError, ValueError, ("env_ids",)),
    ("obs-full-width", [0, 2], {"obs": np.zeros((E, 4), np.float32)}, rr.ShapeError,
     ValueError, ("obs", "(2, 4)", "(4, 4)")),
    ("reward-lead-3", [0, 2], {"reward": np.zeros(3, np.float32)}, rr.ShapeError, ValueError,
     ("reward", "(2,)", "(3,)")),
    ("terminated-full-width", [0, 2], {"terminated": np.zeros(E, np.bool_)}, rr.ShapeError,
     ValueError, ("terminated",)),
    ("end-no-next-obs", [1, 3], {"truncated": np.array([0, 1], np.bool_), "next_obs": DROP},
     rr.FieldError, KeyError, ("next_obs",)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("env_ids", "changes", "exc", "builtin", "names"),
    [pytest.param(*c[1:], id=c[0]) for c in ENV_IDS_CASES],
)
def test_add_with_env_ids_rejects(
    env_ids: Any,
    changes: dict[str, Any],
    exc: type[Exception] | tuple[type[Exception], ...],
    builtin: type[Exception] | tuple[type[Exception], ...],
    names: tuple,
) -> None:
    rows = np.asarray(env_ids).size if np.ndim(env_ids) == 1 else 2
    values = with_(step((rows,)), **changes)
    check_rejected(
        lambda: make(E), warm_multi, more_multi, lambda b: b.add(env_ids=env_ids, **values),
        exc, builtin, names,
    )  # fmt: skip


# --------------------------------------------------------------------------- extend
def ext(T: int = 3, end: bool = True, **changes: Any) -> dict[str, Any]:
    values = step((T,))
    if T:
        values["terminated"][-1] = end
    return with_(values, **changes)


EXTEND_CASES: list[tuple[str, dict[str, Any], Any, type[Exception], tuple]] = [
    # (id, extend kwargs, rr class(es), builtin, names)
    ("terminated-scalar", ext(terminated=np.False_), rr.ShapeError, ValueError,
     ("terminated", "(T,)")),
    ("terminated-python-bool", ext(terminated=False), rr.ShapeError, ValueError,
     ("terminated",)),
    ("terminated-2d", ext(terminated=np.zeros((3, 1), np.bool_)), rr.ShapeError, ValueError,
     ("terminated",)),
    ("obs-T-2-of-3", ext(obs=np.zeros((2, 4), np.float32)), rr.ShapeError, ValueError,
     ("obs", "(3, 4)", "(2, 4)")),
    ("obs-no-T-axis", ext(obs=np.zeros(4, np.float32), end=False), rr.ShapeError, ValueError,
     ("obs", "(3, 4)")),
    ("reward-T-4-of-3", ext(reward=np.zeros(4, np.float32)), rr.ShapeError, ValueError,
     ("reward", "(3,)", "(4,)")),
    ("reward-T-2-of-3", ext(reward=np.zeros(2, np.float32)), rr.ShapeError, ValueError,
     ("reward", "(3,)", "(2,)")),
    ("truncated-T-2-of-3", ext(truncated=np.zeros(2, np.bool_)), rr.ShapeError, ValueError,
     ("truncated",)),
    ("action-float", ext(action=np.zeros(3)), rr.DTypeError, TypeError, ("action",)),
    ("end-no-next-obs", ext(next_obs=DROP), rr.FieldError, KeyError, ("next_obs",)),
    ("end-next-obs-T-1", ext(next_obs=np.zeros((1, 4), np.float32)), rr.ShapeError,
     ValueError, ("next_obs", "(3, 4)", "(1, 4)")),
    ("missing-terminated", ext(terminated=DROP), rr.FieldError, KeyError, ("terminated",)),
    ("missing-action", ext(action=DROP), rr.FieldError, KeyError, ("action",)),
    ("unknown-field", ext(value=np.zeros(3)), rr.FieldError, KeyError, ("value",)),
    ("env-id-out-of-range", {"env_id": 1, **ext()}, rr.InvalidIdError, ValueError,
     ("env_id", "1")),
    ("env-id-negative", {"env_id": -1, **ext()}, rr.InvalidIdError, ValueError,
     ("env_id", "-1")),
    ("env-id-float", {"env_id": 0.0, **ext()}, ENV_ID_ERRORS, ANY_BUILTIN, ("env_id",)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "exc", "builtin", "names"),
    [pytest.param(*c[1:], id=c[0]) for c in EXTEND_CASES],
)
def test_extend_rejects(
    kwargs: dict[str, Any],
    exc: type[Exception] | tuple[type[Exception], ...],
    builtin: type[Exception] | tuple[type[Exception], ...],
    names: tuple,
) -> None:
    check_rejected(
        make, warm_single, more_single, lambda b: b.extend(**kwargs), exc, builtin, names
    )


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        pytest.param({"env_id": E, **ext()}, ("env_id", str(E)), id="env-id-out-of-range"),
        pytest.param({"env_id": 1, **ext(obs=np.zeros((3, 5), np.float32))}, ("obs",), id="obs"),
        pytest.param({"env_id": 1, **ext(T=E, reward=np.zeros(2, np.float32))}, ("reward",),
                     id="reward-T-2-of-4"),
    ],
)  # fmt: skip
def test_extend_multi_env_rejects(kwargs: dict[str, Any], names: tuple) -> None:
    check_rejected(
        lambda: make(E), warm_multi, more_multi, lambda b: b.extend(**kwargs),
        (rr.InvalidIdError, rr.ShapeError), ValueError, names,
    )  # fmt: skip


def test_extend_with_zero_steps_is_a_no_op() -> None:
    buf, twin = make(), make()
    warm_single(buf)
    warm_single(twin)
    ids = buf.extend(**ext(T=0, end=False))
    assert ids.shape == (0,)
    assert_same_state(twin.state_dict(), buf.state_dict())


# --------------------------------------------------------------------------- validation cache
# A value's shape may be right for one call and wrong for the next (another leading axis): a
# rejection must never depend on what earlier, valid calls looked like.
def test_wrong_env_ids_width_rejected_after_a_full_width_add() -> None:
    def bad(b: rr.ReplayBuffer) -> object:
        return b.add(env_ids=[0, 2], **with_(step((2,)), obs=np.zeros((E, 4), np.float32)))

    check_rejected(
        lambda: make(E), lambda b: b.add(**step((E,))), more_multi, bad,
        rr.ShapeError, ValueError, ("obs", "(2, 4)", "(4, 4)"),
    )  # fmt: skip


def test_mismatched_extend_rejected_after_an_extend_of_that_length() -> None:
    check_rejected(
        make, lambda b: b.extend(**ext(T=3)), more_single,
        lambda b: b.extend(**ext(T=5, reward=np.zeros(3, np.float32))),
        rr.ShapeError, ValueError, ("reward", "(5,)", "(3,)"),
    )  # fmt: skip


def test_extend_without_time_axis_rejected_after_a_single_add() -> None:
    # obs of shape (4,) is right for add() and wrong for extend() with T=4: it must not be
    # broadcast over the 4 steps.
    check_rejected(
        make, lambda b: b.add(**step()), more_single,
        lambda b: b.extend(**ext(T=4, obs=np.zeros(4, np.float32))),
        rr.ShapeError, ValueError, ("obs", "(4, 4)"),
    )  # fmt: skip


# --------------------------------------------------------------------------- constructor
def good_kwargs() -> dict[str, Any]:
    return {"capacity": 64, "fields": fields()}


CONSTRUCTOR_CASES: list[tuple[str, dict[str, Any], str]] = [
    # (id, changes to valid constructor kwargs, name the message must contain)
    ("capacity-zero", {"capacity": 0}, "capacity"),
    ("capacity-negative", {"capacity": -5}, "capacity"),
    ("capacity-float", {"capacity": 64.0}, "capacity"),
    ("capacity-str", {"capacity": "64"}, "capacity"),
    ("capacity-bool", {"capacity": True}, "capacity"),
    ("capacity-none", {"capacity": None}, "capacity"),
    ("capacity-below-envs-times-window", {"capacity": 4 * (3 + 2) - 1, "num_envs": 4,
     "n_step": 3, "frame_stack": 2}, "capacity"),
    ("capacity-below-window", {"capacity": 4, "n_step": 3, "frame_stack": 2}, "capacity"),
    ("num-envs-zero", {"num_envs": 0}, "num_envs"),
    ("num-envs-negative", {"num_envs": -1}, "num_envs"),
    ("num-envs-float", {"num_envs": 2.0}, "num_envs"),
    ("n-step-zero", {"n_step": 0}, "n_step"),
    ("n-step-negative", {"n_step": -3}, "n_step"),
    ("n-step-float", {"n_step": 1.5}, "n_step"),
    ("gamma-negative", {"gamma": -0.01}, "gamma"),
    ("gamma-above-one", {"gamma": 1.01}, "gamma"),
    ("gamma-nan", {"gamma": float("nan")}, "gamma"),
    ("gamma-inf", {"gamma": float("inf")}, "gamma"),
    ("gamma-none", {"gamma": None}, "gamma"),
    ("gamma-str", {"gamma": "0.5"}, "gamma"),
    ("frame-stack-zero", {"frame_stack": 0}, "frame_stack"),
    ("frame-stack-float", {"frame_stack": 2.0}, "frame_stack"),
    ("frame-stack-without-obs", {"fields": {"pixels": rr.Field((2, 2), np.uint8,
     observation=True)}, "frame_stack": 4}, "frame_stack"),
    ("stack-pad-unknown", {"stack_pad": "edge"}, "stack_pad"),
    ("stack-pad-none", {"stack_pad": None}, "stack_pad"),
    ("seed-float", {"seed": 1.5}, "seed"),
    ("seed-str", {"seed": "0"}, "seed"),
    ("seed-negative", {"seed": -1}, "seed"),
    ("seed-bool", {"seed": True}, "seed"),
    ("storage-unknown", {"storage": "disk"}, "storage"),
    ("storage-memory-with-path", {"path": "/tmp/never-used-by-rlreplay-tests"}, "path"),
    ("storage-memmap-without-path", {"storage": "memmap"}, "path"),
    ("fields-not-mapping", {"fields": [("obs", rr.Field(4, np.float32))]}, "fields"),
    ("fields-empty", {"fields": {}}, "fields"),
    ("no-observation-field", {"fields": {"state": rr.Field(4, np.float32),
     "action": rr.Field((), np.int64)}}, "observation"),
    ("field-name-not-identifier", {"fields": {**fields(), "my-field": ((), np.float32)}},
     "my-field"),
    ("field-name-keyword", {"fields": {**fields(), "class": ((), np.float32)}}, "class"),
    ("field-name-not-str", {"fields": {**fields(), 3: ((), np.float32)}}, "3"),
    ("field-name-underscore", {"fields": {**fields(), "_x": ((), np.float32)}}, "_x"),
    ("field-name-next", {"fields": {**fields(), "next_state": ((), np.float32)}},
     "next_state"),
    ("field-name-next-obs", {"fields": {**fields(), "next_obs": ((4,), np.float32)}},
     "next_obs"),
    ("reserved-discount", {"fields": {**fields(), "discount": ((), np.float32)}}, "discount"),
    ("reserved-weights", {"fields": {**fields(), "weights": ((), np.float32)}}, "weights"),
    ("reserved-ids", {"fields": {**fields(), "ids": ((), np.int64)}}, "ids"),
    ("reserved-env-ids", {"fields": {**fields(), "env_ids": ((), np.int64)}}, "env_ids"),
    ("reserved-steps", {"fields": {**fields(), "steps": ((), np.int64)}}, "steps"),
    ("terminated-not-bool", {"fields": {**fields(), "terminated": ((), np.float32)}},
     "terminated"),
    ("truncated-vector", {"fields": {**fields(), "truncated": ((2,), np.bool_)}},
     "truncated"),
    ("reward-as-observation", {"fields": {**fields(), "reward": rr.Field((), np.float32,
     observation=True)}}, "reward"),
    ("field-not-a-field", {"fields": {**fields(), "x": (4,)}}, "x"),
    ("field-three-tuple", {"fields": {**fields(), "x": ((4,), np.float32, True)}}, "x"),
    ("field-dtype-object", {"fields": {**fields(), "x": ((), object)}}, "dtype"),
    ("field-dtype-str", {"fields": {**fields(), "x": ((), "U3")}}, "dtype"),
    ("field-dtype-unknown", {"fields": {**fields(), "x": ((), "not_a_dtype")}}, "dtype"),
    ("field-shape-negative", {"fields": {**fields(), "x": ((-1,), np.float32)}}, "shape"),
    ("field-shape-float", {"fields": {**fields(), "x": ((2.5,), np.float32)}}, "shape"),
    ("field-shape-str", {"fields": {**fields(), "x": ("ab", np.float32)}}, "shape"),
    ("field-shape-none", {"fields": {**fields(), "x": (None, np.float32)}}, "shape"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "name"), [pytest.param(*c[1:], id=c[0]) for c in CONSTRUCTOR_CASES]
)
def test_constructor_rejects(changes: dict[str, Any], name: str) -> None:
    kwargs = {**good_kwargs(), **changes}
    capacity, fields_ = kwargs.pop("capacity"), kwargs.pop("fields")
    with pytest.raises(rr.ConfigError) as info:
        rr.ReplayBuffer(capacity, fields_, **kwargs)
    assert isinstance(info.value, ValueError)
    assert name in str(info.value), str(info.value)


def test_constructor_accepts_the_boundary_values() -> None:
    # capacity == num_envs * (n_step + frame_stack), gamma at both ends, tuples for fields.
    for gamma in (0.0, 1.0):
        buf = rr.ReplayBuffer(
            4 * (3 + 2),
            {"obs": ((2, 2), np.uint8), "action": ((), np.int64)},
            num_envs=4,
            n_step=3,
            frame_stack=2,
            gamma=gamma,
        )
        assert buf.env_capacity == 5


def test_memmap_path_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    file = tmp_path / "a-file"
    file.write_bytes(b"x")
    with pytest.raises(rr.ConfigError) as info:
        rr.ReplayBuffer(64, fields(), storage="memmap", path=file)
    assert isinstance(info.value, ValueError)
    assert "path" in str(info.value)
    assert file.read_bytes() == b"x"


def test_rejected_memmap_constructor_creates_no_files(tmp_path: Path) -> None:
    target = tmp_path / "store"
    with pytest.raises(rr.ConfigError, match="gamma"):
        rr.ReplayBuffer(64, fields(), gamma=2.0, storage="memmap", path=target)
    assert not target.exists() or not any(target.iterdir())


# --------------------------------------------------------------------------- get_transitions
def filled(capacity: int = 16, num_envs: int = 1) -> rr.ReplayBuffer:
    """n_step=2; env steps 0..19 (episode ends at 5 and 12); steps 18, 19 of the running
    episode are not sampleable yet; with capacity 16 steps 0..3 are overwritten."""
    buf = rr.ReplayBuffer(capacity, fields(), num_envs=num_envs, n_step=2, seed=0)
    lead = () if num_envs == 1 else (num_envs,)
    for t in range(20):
        s = step(lead, value=float(t))
        s["terminated"] = np.full(lead, t in (5, 12), np.bool_)
        buf.add(**s)
    return buf


ID_CASES: list[tuple[str, Callable[[rr.ReplayBuffer], Any], int, tuple]] = [
    # (id, ids from a filled single-env buffer, num_envs, message substrings)
    ("never-issued-next", lambda b: [20], 1, ("ids", "20", "never issued")),
    ("never-issued-far", lambda b: [5, 10**9], 1, ("ids", str(10**9))),
    ("negative", lambda b: np.array([-1]), 1, ("ids", "-1")),
    ("overwritten", lambda b: [0], 1, ("ids", "[0]")),
    ("overwritten-among-good", lambda b: [10, 3, 11], 1, ("ids", "[3]")),
    ("not-yet-sampleable-last", lambda b: [19], 1, ("ids", "19")),
    ("not-yet-sampleable-window", lambda b: [18], 1, ("ids", "18")),
    ("float-ids", lambda b: np.array([5.0]), 1, ("ids", "float64")),
    ("two-d", lambda b: np.array([[5, 6]]), 1, ("ids",)),
    ("multi-env-never-issued", lambda b: [20 * E + 1], E, ("ids",)),
    ("multi-env-not-yet", lambda b: [19 * E + 2], E, ("ids",)),
    ("multi-env-overwritten", lambda b: [1 * E + 3], E, ("ids",)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("ids_of", "num_envs", "names"), [pytest.param(*c[1:], id=c[0]) for c in ID_CASES]
)
def test_get_transitions_rejects(
    ids_of: Callable[[rr.ReplayBuffer], Any], num_envs: int, names: tuple
) -> None:
    capacity = 16 * num_envs
    buf = filled(capacity, num_envs)
    before = buf.state_dict()
    with pytest.raises(rr.InvalidIdError) as info:
        buf.get_transitions(ids_of(buf))
    assert isinstance(info.value, ValueError)
    for name in names:
        assert name in str(info.value), str(info.value)
    assert_same_state(before, buf.state_dict())
    assert_same_samples(buf, filled(capacity, num_envs))


def test_get_transitions_rejects_ids_after_clear() -> None:
    buf = filled(capacity=64)
    ids = buf.sampleable_ids()
    assert ids.size == 18
    buf.clear()
    with pytest.raises(rr.InvalidIdError, match="ids"):
        buf.get_transitions(ids[:1])
    # Ids keep counting after clear(): a new step gets a fresh id.
    assert int(buf.add(**step(end=True))[0]) == 20


def test_get_transitions_accepts_exactly_the_sampleable_ids() -> None:
    buf = filled()
    ids = buf.sampleable_ids()
    # steps 4..17 are stored and know their window (16 slots hold steps 4..19).
    assert ids.tolist() == list(range(4, 18))
    batch = buf.get_transitions(ids)
    np.testing.assert_array_equal(batch.ids, ids)
    np.testing.assert_array_equal(batch.obs[:, 0], ids.astype(np.float32))


# --------------------------------------------------------------------------- sample
def test_sample_on_empty_buffer_raises_empty_buffer_error() -> None:
    buf = make()
    with pytest.raises(rr.EmptyBufferError) as info:
        buf.sample(4)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, rr.ReplayError)


def test_sample_when_nothing_is_sampleable_yet_leaves_state_unchanged() -> None:
    # n_step=2: two steps of a running episode make nothing sampleable
    check_rejected(
        make, lambda b: [b.add(**step()) for _ in range(2)], more_single,
        lambda b: b.sample(4), rr.EmptyBufferError, ValueError, ("sample",),
    )  # fmt: skip


def test_sample_after_clear_raises_empty_buffer_error() -> None:
    check_rejected(
        make, lambda b: (warm_single(b), b.clear()), more_single,
        lambda b: b.sample(4), rr.EmptyBufferError, ValueError, ("sample",),
    )  # fmt: skip


@pytest.mark.parametrize("batch_size", [0, -1, 2.0, None])
def test_sample_rejects_bad_batch_size(batch_size: Any) -> None:
    check_rejected(
        make, warm_single, more_single, lambda b: b.sample(batch_size),
        rr.ConfigError, ValueError, ("batch_size",),
    )  # fmt: skip


# --------------------------------------------------------------------------- casting rules
def rules_fields() -> dict[str, rr.Field]:
    return {
        "obs": rr.Field((3,), np.float32),
        "u8": rr.Field((), np.uint8),
        "i64": rr.Field((), np.int64),
        "i8v": rr.Field((3,), np.int8),
        "i32v": rr.Field((3,), np.int32),
        "flag": rr.Field((), np.bool_),
    }


def rules_step(**changes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "obs": np.zeros(3, np.float32),
        "u8": np.uint8(0),
        "i64": np.int64(0),
        "i8v": np.zeros(3, np.int8),
        "i32v": np.zeros(3, np.int32),
        "flag": np.False_,
        "reward": np.float32(0),
        "next_obs": np.zeros(3, np.float32),
        "terminated": np.True_,
        "truncated": np.False_,
    }
    values.update(changes)
    return values


REJECTED_VALUES: list[tuple[str, str, Any, tuple]] = [
    # (id, field, value, message substrings)
    ("300-into-uint8", "u8", 300, ("u8", "300", "uint8")),
    ("minus-1-into-uint8", "u8", -1, ("u8", "-1", "uint8")),
    ("1.5-into-int", "i64", 1.5, ("i64", "1.5", "int64")),
    ("1.0-into-int", "i64", 1.0, ("i64", "int64")),
    ("1-into-bool", "flag", 1, ("flag", "bool")),
    ("0-into-bool", "flag", 0, ("flag", "bool")),
    ("float-into-bool", "flag", 1.0, ("flag", "bool")),
    ("complex-into-float", "reward", 1j, ("reward",)),
    ("1e300-into-float32", "reward", 1e300, ("reward", "float32")),
    ("10**40-into-float32", "reward", 10**40, ("reward", "float32")),
    ("float-array-into-int", "i32v", np.array([1.0, 2.0, 3.0]), ("i32v", "float64", "int32")),
    ("float32-array-into-int", "i32v", np.zeros(3, np.float32), ("i32v", "float32")),
    ("int64-out-of-int8-range", "i8v", np.array([1, 200, 3]), ("i8v", "int8", "200")),
    ("int64-below-int8-range", "i8v", np.array([-129, 0, 0]), ("i8v", "int8", "-129")),
    ("uint64-huge-into-int8", "i8v", np.array([0, 0, 2**63], np.uint64), ("i8v", "int8")),
    ("list-out-of-int8-range", "i8v", [1, 2, 300], ("i8v", "int8", "300")),
    ("list-of-floats-into-int", "i8v", [1.0, 2.0, 3.0], ("i8v",)),
    ("int-array-into-bool", "flag", np.array(1), ("flag", "bool")),
    ("complex-array-into-float", "obs", np.zeros(3, np.complex128), ("obs", "complex128")),
    ("ragged-list", "obs", [[1.0], [2.0, 3.0]], ("obs",)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "names"), [pytest.param(*c[1:], id=c[0]) for c in REJECTED_VALUES]
)
def test_unsafe_values_are_rejected(name: str, value: Any, names: tuple) -> None:
    def factory() -> rr.ReplayBuffer:
        return rr.ReplayBuffer(32, rules_fields(), seed=0)

    def warm(b: rr.ReplayBuffer) -> None:
        for _ in range(3):
            b.add(**rules_step())

    def more(b: rr.ReplayBuffer) -> None:
        b.add(**rules_step())

    check_rejected(
        factory, warm, more, lambda b: b.add(**rules_step(**{name: value})),
        (rr.DTypeError, rr.ShapeError), ANY_BUILTIN, names,
    )  # fmt: skip


ACCEPTED_VALUES: list[tuple[str, str, Any, Any]] = [
    # (id, field, value, what is stored)
    ("3-into-uint8", "u8", 3, np.uint8(3)),
    ("255-into-uint8", "u8", 255, np.uint8(255)),
    ("true-into-bool", "flag", True, np.True_),
    ("np-true-into-bool", "flag", np.True_, np.True_),
    ("big-int-into-int64", "i64", 2**40, np.int64(2**40)),
    ("int-into-float", "reward", 2, np.float32(2)),
    ("float-into-float32", "reward", 0.25, np.float32(0.25)),
    ("np-float64-into-float32", "reward", np.float64(0.5), np.float32(0.5)),
    ("float64-array-into-float32", "obs", np.array([0.5, 1.5, 2.5]),
     np.array([0.5, 1.5, 2.5], np.float32)),
    ("int-array-into-float32", "obs", np.array([1, 2, 3]), np.array([1, 2, 3], np.float32)),
    ("int64-array-in-int8-range", "i8v", np.array([-128, 0, 127]),
     np.array([-128, 0, 127], np.int8)),
    ("int16-array-into-int32", "i32v", np.array([1, 2, 3], np.int16),
     np.array([1, 2, 3], np.int32)),
    ("list-into-int8", "i8v", [1, 2, 3], np.array([1, 2, 3], np.int8)),
    ("list-into-int32", "i32v", [-1, 0, 7], np.array([-1, 0, 7], np.int32)),
    ("list-into-float32", "obs", [0.5, 1.0, 2.0], np.array([0.5, 1.0, 2.0], np.float32)),
    ("tuple-into-float32", "obs", (1.0, 2, 3), np.array([1.0, 2.0, 3.0], np.float32)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "stored"), [pytest.param(*c[1:], id=c[0]) for c in ACCEPTED_VALUES]
)
def test_safe_values_are_accepted_and_stored_exactly(name: str, value: Any, stored: Any) -> None:
    buf = rr.ReplayBuffer(32, rules_fields(), seed=0)
    ids = buf.add(**rules_step(**{name: value}))
    batch = buf.get_transitions(ids.reshape(-1))
    got = batch[name][0]
    expected = np.asarray(stored)
    assert got.dtype == rules_fields().get(name, rr.Field((), np.float32)).dtype
    np.testing.assert_array_equal(got, expected)


def test_float64_array_beyond_float32_range_never_half_writes() -> None:
    # float64 -> float32 is a same_kind cast, so storing inf would be acceptable; raising a
    # DTypeError up front too. Failing in the middle of the write (an overflow warning turned
    # into an error, as under this project's pytest settings) is not.
    buf = rr.ReplayBuffer(32, rules_fields(), seed=0)
    buf.add(**rules_step(terminated=np.False_))
    before = buf.state_dict()
    try:
        ids = buf.add(**rules_step(obs=np.array([1e300, 0.0, -1e300])))
    except rr.DTypeError as exc:
        assert "obs" in str(exc)
        assert_same_state(before, buf.state_dict())
    else:
        stored = buf.get_transitions(ids).obs[0]
        np.testing.assert_array_equal(stored, np.array([np.inf, 0.0, -np.inf], np.float32))


def test_python_bool_list_into_bool_vector_field() -> None:
    buf = rr.ReplayBuffer(
        32, {"obs": rr.Field((2,), np.float32), "legal": rr.Field((3,), np.bool_)}, seed=0
    )
    ids = buf.add(
        obs=[0.0, 1.0], legal=[True, False, True], reward=1, next_obs=[1.0, 2.0],
        terminated=True, truncated=False,
    )  # fmt: skip
    np.testing.assert_array_equal(buf.get_transitions(ids).legal[0], [True, False, True])
    with pytest.raises(rr.DTypeError, match="legal"):
        buf.add(obs=[0.0, 1.0], legal=[1, 0, 1], reward=1, terminated=False, truncated=False)


def test_python_scalars_with_a_leading_axis_are_rejected_in_multi_env_add() -> None:
    check_rejected(
        lambda: make(E), warm_multi, more_multi,
        lambda b: b.add(**with_(step((E,)), action=1)),
        rr.ShapeError, ValueError, ("action", "(4,)"),
    )  # fmt: skip
