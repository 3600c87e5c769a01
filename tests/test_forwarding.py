"""The façade's forwarded methods: the part's signature and docstring, the part's own bound
method in each buffer (no forwarding call), a subclass's override in charge, and calls on a
buffer no name holds (the buffer may be freed during the call)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np

import rlreplay as rr
from rlreplay.buffer.episodes import Queries
from rlreplay.buffer.fifo import Fifo
from rlreplay.buffer.replay import _FORWARDED
from rlreplay.buffer.state import BufferState

FIELDS = {"obs": rr.Field((2,), np.float32)}


def filled(cls: type[rr.ReplayBuffer] = rr.ReplayBuffer) -> rr.ReplayBuffer:
    buf = cls(16, FIELDS, seed=0)
    buf.extend(obs=np.ones((5, 2), np.float32), reward=np.zeros(5), terminated=[False] * 4 + [True],
               truncated=[False] * 5, next_obs=np.zeros((5, 2), np.float32))  # fmt: skip
    return buf


def test_a_forwarded_method_has_the_parts_signature_and_docstring() -> None:
    assert inspect.signature(rr.ReplayBuffer.dequeue) == inspect.signature(Fifo.dequeue)
    assert rr.ReplayBuffer.dequeue.__doc__ == Fifo.dequeue.__doc__
    assert rr.ReplayBuffer.dequeue.__qualname__ == "ReplayBuffer.dequeue"
    assert rr.ReplayBuffer.stored_range.__doc__ == Queries.stored_range.__doc__


def test_a_buffer_holds_its_parts_bound_methods() -> None:
    buf = filled()
    assert "save" not in _FORWARDED  # the state part needs its buffer alive through the call
    for name in _FORWARDED:
        method = getattr(buf, name)
        assert method.__self__ is not buf, name  # the part's method itself
    assert buf.stored_range.__self__ is buf._queries
    assert buf.save.__self__ is buf  # a forwarding method
    assert buf.stored_range().end.tolist() == [5]


def test_a_subclass_override_stays_in_charge() -> None:
    class Counting(rr.ReplayBuffer):
        calls = 0

        def dequeue(self, n: int, env_ids: Any = None, **kwargs: Any) -> rr.Batch:
            type(self).calls += 1
            return super().dequeue(n, env_ids, **kwargs)

    buf = filled(Counting)
    assert buf.dequeue(2).obs.shape == (1, 2, 2) and Counting.calls == 1


def test_calls_on_a_buffer_no_name_holds(tmp_path: Path) -> None:
    """``filled().save(path)``: the buffer has no other reference during the call."""
    filled().save(tmp_path / "a.ckpt")
    assert len(rr.load(tmp_path / "a.ckpt")) == 5
    assert filled().state_dict()["config"]["capacity"] == 16
    assert filled().stored_range().end.tolist() == [5]
    assert filled(rr.PrioritizedReplayBuffer).get_priorities([0]).shape == (1,)
    assert BufferState.save.__doc__ == rr.ReplayBuffer.save.__doc__
