"""``next_<obs>=None`` means "not given", on every path of ``add`` (and in ``extend``).

A step that does not end its episode ignores its next observations, so ``None`` there is
accepted by the per-step fast path, the lockstep kernel path and the general path alike, and
leaves exactly the state of a call that left the name out. At an episode end ``None`` raises the
same :class:`rlreplay.FieldError` as a missing name, and the buffer is left as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.writing import lockstep
from tests.test_fast_path import assert_same_state, kernel_soon

C = 8
TWO_OBS = {
    "obs": rr.Field((2,), np.float32),
    "pos": rr.Field((3,), np.int16, observation=True),
    "action": rr.Field((), np.int64),
}


def make(num_envs: int) -> rr.ReplayBuffer:
    return rr.ReplayBuffer(C * num_envs, TWO_OBS, num_envs=num_envs, seed=0)


def values(t: int, envs: int, exact: bool, end: bool = False) -> dict[str, Any]:
    """One step: ``exact`` values have their fields' dtypes (fast-path eligible), else lists."""
    lead = () if envs == 1 else (envs,)
    obs = np.full((*lead, 2), t, np.float32)
    pos = np.full((*lead, 3), t, np.int16)
    action = np.full(lead, t, np.int64)
    flags = np.full(lead, end, bool)
    out: dict[str, Any] = {
        "obs": obs, "pos": pos, "action": action if lead else int(t),
        "reward": np.full(lead, 0.5, np.float32) if lead else 0.5,
        "terminated": flags if lead else end, "truncated": np.zeros(lead, bool) if lead else False,
    }  # fmt: skip
    if not exact:
        out["obs"], out["pos"] = obs.tolist(), pos.tolist()
    return out


def finals(t: int, envs: int) -> dict[str, Any]:
    lead = () if envs == 1 else (envs,)
    return {
        "next_obs": np.full((*lead, 2), -t, np.float32),
        "next_pos": np.full((*lead, 3), -t, np.int16),
    }


NONES: list[dict[str, Any]] = [
    {"next_obs": None, "next_pos": None},
    {"next_obs": None},
    {"next_pos": None},
]


def spy_general(buf: rr.ReplayBuffer) -> list[int]:
    """Counts the calls that reach the general path (``StepWriter.prepare_step``)."""
    calls: list[int] = []
    original: Callable[..., Any] = buf._writer.prepare_step

    def prepare_step(*args: Any) -> Any:
        calls.append(1)
        return original(*args)

    buf._writer.prepare_step = prepare_step  # type: ignore[method-assign]
    return calls


def feed(buf: rr.ReplayBuffer, envs: int, exact: bool, extra: dict[str, Any], steps: int) -> None:
    """``steps`` steps, every fifth ending its episode (with its finals), ``extra`` elsewhere."""
    for t in range(steps):
        if t % 5 == 4:
            buf.add(**values(t, envs, exact, end=True), **finals(t, envs))
        else:
            buf.add(**values(t, envs, exact), **extra)


@pytest.mark.parametrize("nones", NONES, ids=["both", "obs", "pos"])
@pytest.mark.parametrize(
    ("envs", "exact", "kernel"),
    [(1, True, False), (1, False, False), (3, True, False), (3, True, True), (3, False, False)],
    ids=["fast-1", "general-1", "fast-3", "lockstep-3", "general-3"],
)
def test_none_on_a_non_ending_step_is_not_given(
    nones: dict[str, Any], envs: int, exact: bool, kernel: bool
) -> None:
    with_none, without = make(envs), make(envs)
    if kernel:
        kernel_soon(with_none)
        kernel_soon(without)
    general = spy_general(with_none)
    feed(with_none, envs, exact, nones, 23)
    feed(without, envs, exact, {}, 23)
    assert_same_state(with_none, without)
    np.testing.assert_array_equal(with_none.sample(16).obs, without.sample(16).obs)
    writer = with_none._writer
    if kernel:  # compiled, and never sent back to the Python path by a None
        assert writer.lockstep_kernel is not None
        assert writer.add_plain is not writer._add_plain_python
        assert writer._backoff == lockstep.ACTIVATE_AFTER
    if exact and len(nones) == 2:  # every next_<obs> None: as plain a step as none given
        assert not general, "plain steps with next_<obs>=None left the fast path"


@pytest.mark.parametrize("nones", NONES, ids=["both", "obs", "pos"])
@pytest.mark.parametrize(("envs", "exact"), [(1, True), (1, False), (3, True), (3, False)])
@pytest.mark.parametrize("kernel", [False, True])
def test_none_at_an_episode_end_is_missing(
    nones: dict[str, Any], envs: int, exact: bool, kernel: bool
) -> None:
    buf = make(envs)
    if kernel:
        kernel_soon(buf)
    feed(buf, envs, exact, {}, 7)
    before = buf.state_dict()
    given = {**finals(9, envs), **nones}
    with pytest.raises(rr.FieldError) as with_none:
        buf.add(**values(9, envs, exact, end=True), **given)
    absent = {k: v for k, v in given.items() if v is not None}
    with pytest.raises(rr.FieldError) as missing:
        buf.add(**values(9, envs, exact, end=True), **absent)
    assert str(with_none.value) == str(missing.value)
    assert "next_" in str(with_none.value)
    after = buf.state_dict()
    for k in before["arrays"]:
        np.testing.assert_array_equal(before["arrays"][k], after["arrays"][k], err_msg=k)
    buf.add(**values(9, envs, exact, end=True), **finals(9, envs))  # and the buffer goes on


def test_extend_accepts_none_when_no_step_ends() -> None:
    a, b = make(1), make(1)
    t = 6
    block = {
        "obs": np.zeros((t, 2), np.float32), "pos": np.ones((t, 3), np.int16),
        "action": np.arange(t), "reward": np.ones(t, np.float32),
        "terminated": np.zeros(t, bool), "truncated": np.zeros(t, bool),
    }  # fmt: skip
    a.extend(**block, next_obs=None, next_pos=None)
    b.extend(**block)
    assert_same_state(a, b)
    ending = {**block, "terminated": np.arange(t) == t - 1}
    with pytest.raises(rr.FieldError, match="next_"):
        a.extend(**ending, next_obs=None, next_pos=np.zeros((t, 3), np.int16))
    assert_same_state(a, b)


def test_end_episode_with_none_is_missing() -> None:
    buf = make(1)
    buf.add(**values(0, 1, True))
    with pytest.raises(rr.FieldError, match="next_obs"):
        buf.end_episode(0, next_obs=None, next_pos=np.zeros(3, np.int16))
    buf.end_episode(0, **finals(0, 1))
