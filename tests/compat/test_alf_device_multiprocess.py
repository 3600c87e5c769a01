"""``allow_multiprocess=True`` on ALF's device-backed buffer, with torch's CPU device: as the
host-backed buffer's, a buffer handed to another process (forked, or pickled to it as a
``Process`` argument under spawn) is the same buffer, its calls run in the process that built
it (one thread per other process, each call under the buffer's lock), and what each process
adds the others draw. Every child is joined with a timeout, so no test can hang."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
import torch

import rlreplay as rr
from rlreplay.compat.alf import BatchInfo, StepType, TensorSpec
from tests.compat.test_alf_device import assert_same, device_rb, pair
from tests.compat.test_alf_multiprocess import FORK, JOIN, SPAWN, _report, _run

SPEC = {
    "step_type": TensorSpec((), torch.int32),
    "reward": TensorSpec(()),
    "x": TensorSpec((2,)),
}
KW: dict[str, Any] = dict(max_length=8, allow_multiprocess=True, record_episodic_return=True)


def _step(value: float, envs: list[int]) -> dict[str, torch.Tensor]:
    """One step of ``envs``: ``x`` of env ``e`` is ``[value, e]``; a LAST every 3rd value."""
    n = len(envs)
    kind = StepType.LAST if int(value) % 3 == 2 else StepType.MID
    return {
        "step_type": torch.full((n,), kind, dtype=torch.int32),
        "reward": torch.full((n,), value / 10),
        "x": torch.stack([torch.full((n,), float(value)), torch.tensor(envs).float()]).T,
    }


def _add(rb: Any, env: int, values: list[float], out: Any) -> None:
    def work() -> tuple[str, bool]:
        for v in values:
            rb.add_batch(_step(v, [env]), torch.tensor([env]))
        return type(rb).__name__, rb.__dict__.get("_remote") is not None

    _report(out, work)


def _everything(rb: Any, out: Any) -> None:
    """Spawned: the calls of a training process on a buffer passed as a Process argument."""

    def work() -> dict[str, Any]:
        rb.add_batch(_step(7.0, [1]), env_ids=torch.tensor([1]))
        batch, info = rb.get_batch(batch_size=4, batch_length=2)
        try:
            _ = rb.device_buffer
            local = "no error"
        except rr.ConfigError as exc:
            local = str(exc)
        try:
            rb.add_batch(_step(8.0, [0, 1]), blocking=True)
            blocking = "no error"
        except rr.ConfigError as exc:
            blocking = str(exc)
        return {
            "info": isinstance(info, BatchInfo) and info.replay_buffer is rb,
            "x": batch["x"][:, :, 0].tolist(),
            "returns": info.discounted_return.tolist(),
            "positions": info.positions.tolist(),
            "total": int(rb.total_size),
            "begin": rb.get_episode_begin_position(torch.tensor([0, 1]), torch.tensor(1)).tolist(),
            "local": local,
            "blocking": blocking,
        }

    _report(out, work)


def test_a_forked_childs_steps_land_in_the_owners_buffer() -> None:
    """The owner then draws what the host-backed buffer draws after the same steps."""
    host, dev = pair(SPEC, 2, 3, **KW)
    for rb in (host, dev):
        rb.add_batch(_step(0.0, [0, 1]))
    assert _run(FORK, _add, dev, 1, [1.0, 2.0, 3.0]) == ("DeviceReplayBuffer", True)
    for v in (1.0, 2.0, 3.0):
        host.add_batch(_step(v, [1]), torch.tensor([1]))
    assert int(dev.total_size) == 5
    for call, args in (("gather_all", ()), ("get_batch", (6, 1)), ("get_batch", (2, 1))):
        try:
            theirs = getattr(host, call)(*args)
        except AssertionError:
            with pytest.raises(AssertionError):
                getattr(dev, call)(*args)
            continue
        ours = getattr(dev, call)(*args)
        assert_same(ours[0], theirs[0])
        np.testing.assert_allclose(ours[1].discounted_return, theirs[1].discounted_return)
    assert dev.steps_to_episode_end(torch.tensor([0]), torch.tensor([1])).tolist() == [3]


def test_a_spawned_child_uses_the_owners_buffer() -> None:
    dev = device_rb(SPEC, 2, **KW)
    for v in range(4):
        dev.add_batch(_step(float(v), [0, 1]))
    got = _run(SPAWN, _everything, dev)
    assert got["info"] and got["total"] == 9
    for row, pos in zip(got["x"], got["positions"], strict=True):
        assert row[0] == pos  # env e's step pos holds x = pos (starts end before the 7)
    assert len(got["returns"]) == 4 and all(len(r) == 2 for r in got["returns"])
    assert got["begin"] == [0, 0]
    assert got["local"].startswith("device_buffer: the storage lives in the owner process")
    assert got["blocking"].startswith("blocking:")
    assert dev.dequeue(env_ids=torch.tensor([1]), n=5)["x"][0, :, 0].tolist() == [0, 1, 2, 3, 7]


def test_children_adding_at_once_and_the_owner_drawing() -> None:
    """Two forked children add to their own env while the owner draws: every call runs under
    the buffer's lock, so each env ends with its steps in order and the draws stay valid."""
    dev = device_rb(SPEC, 3, max_length=64, allow_multiprocess=True, keep_episodic_info=True)
    dev.add_batch(_step(0.0, [0, 1, 2]))
    outs, children = [], []
    for env in (0, 1):
        out = FORK.Queue()
        child = FORK.Process(target=_add, args=(dev, env, [float(v) for v in range(1, 41)], out))
        child.start()
        outs.append(out)
        children.append(child)
    for _ in range(30):
        dev.add_batch(_step(1.0, [2]), torch.tensor([2]))
        batch, info = dev.get_batch(6, 1)
        x = batch["x"][:, 0]
        assert torch.equal(x[:, 1], info.env_ids.float())
    for out, child in zip(outs, children, strict=True):
        assert out.get(timeout=JOIN) == ("DeviceReplayBuffer", True)
        child.join(JOIN)
    _, end = dev.device_buffer.stored_range()
    assert end.tolist() == [41, 41, 31]
    for env in (0, 1):
        got = dev.dequeue(env_ids=torch.tensor([env]), n=41)
        assert got["x"][0, :, 0].tolist() == [float(v) for v in range(41)]
    begins = dev.get_episode_begin_position(torch.arange(31), torch.tensor(2))
    assert begins.tolist() == [0] * 31


def test_pickling_gives_the_owner_in_its_own_process_and_a_handle_elsewhere() -> None:
    dev = device_rb(SPEC, 2, **KW)
    assert pickle.loads(pickle.dumps(dev)) is dev
    assert dev.__dict__.get("_call_lock") is not None
    plain = device_rb(SPEC, 2, max_length=4)
    assert plain.__dict__.get("_call_lock") is None
    host, _ = pair(SPEC, 2, 0, max_length=4)
    assert host.__dict__.get("_call_lock") is None
