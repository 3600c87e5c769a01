"""ALF's ``allow_multiprocess=True``: the same buffer in every process it reaches.

ALF (seed ``001``: "allow_multiprocess (bool) - whether multiprocessing is supported") keeps
the buffer in shared memory under a multiprocessing lock, so a buffer handed to a child
process (forked, or passed as a ``Process`` argument under spawn) *is* the parent's buffer:
the child's ``add_batch`` / ``dequeue`` / ``update_priority`` change what the parent sees and
the other way round, and ALF's own tests release a blocked ``enqueue`` in the parent by a
``dequeue`` in a child. Every child here is joined with a timeout and every blocking call has
one, so no test can hang.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import signal
import threading
import time
from typing import Any

import pytest
import torch

import rlreplay as rr
from rlreplay.compat.alf import BatchInfo, StepType, TensorSpec
from rlreplay.compat.alf._multiprocess import SERVING
from rlreplay.compat.alf.replay_buffer import ReplayBuffer

JOIN = 20.0  # seconds: a child or call still running after this is deadlocked
SPEC = {"step_type": TensorSpec((), torch.int32), "x": TensorSpec((2,))}
FORK = multiprocessing.get_context("fork")
SPAWN = multiprocessing.get_context("spawn")


def _buffer(**kwargs: Any) -> ReplayBuffer:
    kwargs.setdefault("num_environments", 2)
    kwargs.setdefault("max_length", 8)
    return ReplayBuffer(SPEC, allow_multiprocess=True, **kwargs)


def _step(value: float, envs: int = 2) -> dict[str, torch.Tensor]:
    """One step of every env: ``x`` of env ``e`` is ``[value, e]``."""
    x = torch.stack([torch.full((envs,), float(value)), torch.arange(envs, dtype=torch.float32)])
    return {"step_type": torch.full((envs,), StepType.MID, dtype=torch.int32), "x": x.T}


def _run(ctx: Any, target: Any, *args: Any) -> Any:
    """Run ``target(*args, out)`` in a child; its report (re-raised if an exception)."""
    out = ctx.Queue()
    child = ctx.Process(target=target, args=(*args, out))
    child.start()
    try:
        got = out.get(timeout=JOIN)
    finally:
        child.join(JOIN)
        if child.is_alive():  # pragma: no cover - only on a deadlock
            child.kill()
    if isinstance(got, BaseException):
        raise got
    return got


def _report(out: Any, work: Any) -> None:
    try:
        out.put(work())
    except Exception as exc:  # the parent re-raises it
        out.put(exc)


def _serving(process: Any) -> bool:
    """Whether a thread of this process's buffer servers serves ``process``."""
    return any(t.name == f"{SERVING} {process.name}" for t in threading.enumerate())


def _wait_until(condition: Any) -> None:
    deadline = time.monotonic() + JOIN
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert condition()


# ----------------------------------------------------------------------------- child bodies
def _add_steps(rb: ReplayBuffer, values: list[float], out: Any) -> None:
    def work() -> tuple[bool, int]:
        for v in values:
            rb.add_batch(_step(v))
        return isinstance(rb, ReplayBuffer), int(rb.total_size)

    _report(out, work)


def _dequeue(rb: ReplayBuffer, n: int, blocking: bool, delay: float, out: Any) -> None:
    def work() -> Any:
        time.sleep(delay)  # lets the parent block first (the outcome does not depend on it)
        got = rb.dequeue(n=n, blocking=blocking, timeout=JOIN)
        return None if got is None else got["x"].tolist()  # tensors would share memory

    _report(out, work)


def _dequeue_for_ever(rb: ReplayBuffer) -> None:
    rb.dequeue(n=1, blocking=True)  # no timeout: the parent kills this child


def _update_priority(rb: ReplayBuffer, keep_env: int, keep_pos: int, out: Any) -> None:
    def work() -> list[float]:
        _, info = rb.gather_all()
        envs = torch.arange(2).repeat_interleave(4)
        pos = torch.arange(4).repeat(2)
        prio = ((envs == keep_env) & (pos == keep_pos)).float() * 5.0
        rb.update_priority(envs, pos, prio)
        assert info.replay_buffer is rb  # the result names the child's own buffer object
        return rb.initial_priority.tolist()

    _report(out, work)


def _everything(rb: ReplayBuffer, out: Any) -> None:
    """Spawned: every kind of call on a buffer passed as a Process argument."""

    def work() -> dict[str, Any]:
        rb.add_batch(_step(7.0, envs=1), env_ids=torch.tensor([1]))
        batch, info = rb.get_batch(batch_size=4, batch_length=1)
        got = rb.dequeue(env_ids=torch.tensor([0]), n=1)
        return {
            "is_buffer": isinstance(rb, ReplayBuffer) and isinstance(rb, torch.nn.Module),
            "sizes": (rb.num_environments, rb.max_length, rb.name),
            "batch_x": batch["x"][:, 0, 0].tolist(),
            "info": isinstance(info, BatchInfo) and info.replay_buffer is rb,
            "dequeued": got["x"].tolist(),
            "total": int(rb.total_size),
        }

    _report(out, work)


def _stopped_calls(rb: ReplayBuffer, out: Any) -> None:
    def work() -> tuple[Any, Any, int]:
        added = rb.add_batch(_step(9.0), blocking=True, timeout=JOIN)
        taken = rb.dequeue(n=5, blocking=True, timeout=JOIN)
        return added, taken, int(rb.total_size)

    _report(out, work)


def _call_after_delete(rb: ReplayBuffer, go: Any, out: Any) -> None:
    def work() -> str:
        go.wait(JOIN)
        try:
            rb.add_batch(_step(1.0))
        except rr.ReplayClosed as exc:
            return str(exc)
        return "no error"

    _report(out, work)


def _own_and_exit(out: Any) -> None:
    """Build a buffer, hand a pickled handle to the parent, exit (the owner goes)."""
    rb = _buffer()
    rb.add_batch(_step(3.0))
    out.put(pickle.dumps(rb))


# ----------------------------------------------------------------------------- tests
def test_forked_child_add_batch_lands_in_the_parents_buffer() -> None:
    """ALF: the buffer is shared, so the parent's ``gather_all`` sees exactly the child's steps,
    after the parent's own."""
    rb = _buffer()
    rb.add_batch(_step(0.0))
    assert _run(FORK, _add_steps, rb, [1.0, 2.0, 3.0]) == (True, 8)
    batch, info = rb.gather_all()
    assert batch["x"][:, :, 0].tolist() == [[0.0, 1.0, 2.0, 3.0]] * 2
    assert batch["x"][:, :, 1].tolist() == [[0.0] * 4, [1.0] * 4]
    assert info.positions.tolist() == [0, 0]


def test_spawned_child_reads_writes_and_dequeues() -> None:
    """The same under spawn: the buffer passed as a ``Process`` argument (pickled)."""
    rb = _buffer(name="shared")
    rb.add_batch(_step(5.0))
    rb.add_batch(_step(6.0, envs=1), env_ids=torch.tensor([0]))
    got = _run(SPAWN, _everything, rb)
    assert got["is_buffer"] and got["info"]
    assert got["sizes"] == (2, 8, "shared")
    assert len(got["batch_x"]) == 4 and set(got["batch_x"]) <= {5.0, 6.0, 7.0}
    assert got["dequeued"] == [[[5.0, 0.0]]]  # env 0's earliest step
    assert got["total"] == 3
    assert rb.dequeue(n=1, env_ids=torch.tensor([0]))["x"][0, :, 0].tolist() == [6.0]
    assert rb.dequeue(n=2, env_ids=torch.tensor([1]))["x"][0, :, 0].tolist() == [5.0, 7.0]


def test_child_dequeue_removes_from_the_parents_buffer() -> None:
    rb = _buffer()
    for v in range(3):
        rb.add_batch(_step(float(v)))
    taken = _run(FORK, _dequeue, rb, 2, False, 0.0)
    assert [[x[0] for x in env] for env in taken] == [[0.0, 1.0], [0.0, 1.0]]
    assert int(rb.total_size) == 2
    assert rb.gather_all()[1].positions.tolist() == [2, 2]
    with pytest.raises(AssertionError):  # ALF asserts on too little data, in the child too
        _run(FORK, _dequeue, rb, 2, False, 0.0)


@pytest.mark.parametrize("max_length", [1, 2])
def test_blocked_add_in_parent_released_by_a_childs_dequeue(max_length: int) -> None:
    """ALF's test: a full buffer blocks ``add_batch(blocking=True)`` in the parent until a
    child's delayed ``dequeue`` makes room."""
    rb = _buffer(max_length=max_length)
    for v in range(max_length):
        rb.add_batch(_step(float(v)))
    out = FORK.Queue()
    child = FORK.Process(target=_dequeue, args=(rb, 1, False, 0.2, out))
    child.start()
    rb.add_batch(_step(10.0), blocking=True, timeout=JOIN)
    child.join(JOIN)
    assert out.get(timeout=JOIN) == [[[0.0, 0.0]], [[0.0, 1.0]]]  # the oldest steps
    x = rb.gather_all()[0]["x"][:, :, 0]
    assert x.tolist() == [[*range(1, max_length), 10.0]] * 2


def test_childs_blocking_dequeue_does_not_block_other_processes() -> None:
    """Each remote caller is served by its own thread: while one child waits in a blocking
    ``dequeue``, another child's calls and the parent's go through."""
    rb = _buffer()
    out = FORK.Queue()
    waiter = FORK.Process(target=_dequeue, args=(rb, 3, True, 0.0, out))
    waiter.start()
    assert _run(FORK, _add_steps, rb, [1.0]) == (True, 2)  # would time out if serialised
    rb.add_batch(_step(2.0))
    rb.add_batch(_step(3.0))
    got = out.get(timeout=JOIN)
    waiter.join(JOIN)
    assert [[x[0] for x in env] for env in got] == [[1.0, 2.0, 3.0]] * 2
    assert int(rb.total_size) == 0


def test_childs_update_priority_steers_the_parents_draws() -> None:
    rb = _buffer(max_length=4, prioritized_sampling=True)
    for v in range(4):
        rb.add_batch(_step(float(v)))
    assert _run(FORK, _update_priority, rb, 1, 2) == 5.0  # ALF: max(initial, largest)
    _, info = rb.get_batch(batch_size=16, batch_length=1)
    assert set(info.env_ids.tolist()) == {1} and set(info.positions.tolist()) == {2}


def test_stop_in_the_owner_ends_a_childs_blocking_calls() -> None:
    """ALF's ``stop``: blocking calls return at once (adding nothing) until ``revive``,
    whichever process makes them; a child's ``stop`` stops the parent's buffer."""
    rb = _buffer(max_length=1)
    rb.add_batch(_step(0.0))
    rb.stop()
    assert _run(FORK, _stopped_calls, rb) == (None, None, 2)
    rb.revive()
    out = FORK.Queue()
    child = FORK.Process(target=_report, args=(out, rb.stop))
    child.start()
    assert out.get(timeout=JOIN) is None
    child.join(JOIN)
    assert rb.dequeue(n=5, blocking=True, timeout=JOIN) is None


def test_child_call_after_the_owners_buffer_is_deleted() -> None:
    rb = _buffer()
    go = FORK.Event()
    out = FORK.Queue()
    child = FORK.Process(target=_call_after_delete, args=(rb, go, out))
    child.start()
    del rb
    gc.collect()
    go.set()
    got = out.get(timeout=JOIN)
    child.join(JOIN)
    assert "gone" in got or "deleted" in got


def test_handle_of_a_gone_owner_process_raises_replay_closed() -> None:
    data = _run(FORK, _own_and_exit)
    handle = pickle.loads(data)
    assert isinstance(handle, ReplayBuffer)
    with pytest.raises(rr.ReplayClosed, match="gone"):
        handle.add_batch(_step(1.0))
    with pytest.raises(rr.ReplayClosed):
        _ = handle.total_size
    assert "gone" in repr(handle)


def test_owner_dying_during_a_blocked_remote_call_raises_replay_closed() -> None:
    out = FORK.Queue()
    go = FORK.Event()

    def own() -> None:
        rb = _buffer()
        out.put(pickle.dumps(rb))
        go.wait(JOIN)

    owner = FORK.Process(target=own)
    owner.start()
    handle = pickle.loads(out.get(timeout=JOIN))
    got: list[BaseException] = []

    def blocked() -> None:
        try:
            handle.dequeue(n=1, blocking=True, timeout=JOIN)
        except BaseException as exc:
            got.append(exc)

    th = threading.Thread(target=blocked)
    th.start()
    time.sleep(0.2)  # let the call reach the owner (it fails the same way if not yet)
    owner.kill()
    owner.join(JOIN)
    th.join(JOIN)
    assert not th.is_alive() and len(got) == 1 and isinstance(got[0], rr.ReplayClosed)


def _owner_forks_then_dies(out: Any, release: Any) -> None:
    """Own a buffer, fork a blocked caller and then a bystander, and die (SIGKILL)."""
    rb = _buffer()
    caller = FORK.Process(target=_dequeue, args=(rb, 1, True, 0.0, out))
    caller.start()
    _wait_until(lambda: _serving(caller))
    bystander = FORK.Process(target=release.wait, args=(2 * JOIN,))
    bystander.start()  # inherits the owner's sockets unless they are closed after the fork
    os.kill(os.getpid(), signal.SIGKILL)


def test_owner_death_reaches_a_blocked_caller_despite_its_other_children() -> None:
    """A child forked by the owner later must not keep the owner's server sockets open: the
    blocked caller sees the owner die at once instead of waiting for that child to end."""
    out, release = FORK.Queue(), FORK.Event()
    owner = FORK.Process(target=_owner_forks_then_dies, args=(out, release))
    owner.start()
    try:
        got = out.get(timeout=JOIN)
    finally:
        release.set()
        owner.join(JOIN)
    assert isinstance(got, rr.ReplayClosed), got


def test_killed_blocked_caller_takes_no_steps() -> None:
    """A child killed while blocked in ``dequeue`` must not take the parent's next steps."""
    rb = _buffer()
    child = FORK.Process(target=_dequeue_for_ever, args=(rb,))
    child.start()
    _wait_until(lambda: _serving(child))  # connected; its call follows at once
    time.sleep(0.1)  # (if it had not arrived yet, the test would pass without checking)
    child.kill()
    child.join(JOIN)
    _wait_until(lambda: not _serving(child))  # the dead caller's thread ends within a slice
    rb.add_batch(_step(4.0))
    assert int(rb.total_size) == 2


def test_pickling_round_trip_and_handles() -> None:
    """Pickling an ``allow_multiprocess`` buffer never makes an unshared copy: in its own
    process it unpickles as itself, and ``core`` is refused on a handle of another process."""
    rb = _buffer()
    rb.add_batch(_step(1.0))
    assert pickle.loads(pickle.dumps(rb)) is rb
    _, info = rb.gather_all()
    assert pickle.loads(pickle.dumps(info)).replay_buffer is rb
    data = _run(FORK, _own_and_exit)
    with pytest.raises(rr.ConfigError, match="core"):
        _ = pickle.loads(data).core
