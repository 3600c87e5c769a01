"""What the columnar store hands out: one tuple per experience, read-only copies inside.

nnabla-rl keeps the appended object and hands it back, the same object at every read
(``buffer[i] is buffer[i]``). The front-end copies the arrays at ``append`` (deliberate
difference 1) and hands back one tuple per experience made then: the same object at every
read too, its arrays read-only views of the copies. What the user appended, and later
rewrites in place, never reaches what is stored; writing into what was handed out raises
instead of changing the buffer behind its back.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest

from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers import (
    DecorableReplayBuffer,
    ProportionalPrioritizedReplayBuffer,
    RankBasedPrioritizedReplayBuffer,
)


def chained(n: int, shape: tuple[int, ...] = (3,)) -> list[tuple[Any, ...]]:
    """``n`` experiences of one episode, each ``s`` the previous ``s_next`` (the same array)."""
    out: list[tuple[Any, ...]] = []
    s = np.zeros(shape, np.float32)
    for t in range(n):
        s_next = np.full(shape, t + 1, np.float32)
        out.append((s, np.array([t % 4]), float(t), 1.0, s_next, {"t": t}))
        s = s_next
    return out


@pytest.mark.parametrize(
    "make",
    [
        lambda: ReplayBuffer(capacity=8),
        lambda: DecorableReplayBuffer(8, lambda e: e),
        lambda: RankBasedPrioritizedReplayBuffer(8, seed=0),
        lambda: ProportionalPrioritizedReplayBuffer(8, seed=0),
    ],
)
def test_the_same_tuple_at_every_read(make: Any) -> None:
    buffer = make()
    experiences = chained(11)  # wraps the ring of 8
    buffer.append_all(experiences)
    assert buffer[0] is buffer[0] and buffer[7] is buffer[7]
    sampled, _ = buffer.sample(8)
    assert sorted(map(id, sampled)) == sorted(id(buffer[i]) for i in range(8))
    buffer.update_priorities(np.ones(8))
    assert [e[5]["t"] for e in (buffer[i] for i in range(8))] == list(range(3, 11))
    assert all(buffer[i] == experiences[3 + i] for i in range(8))


def test_arrays_are_read_only_copies() -> None:
    buffer = ReplayBuffer(capacity=10)
    experiences = chained(5, (2, 3))
    buffer.append_all(experiences)
    experiences[2][0][...] = -1  # an environment that rewrites its array in place
    s, a, r, non_terminal, s_next, info = buffer[2]
    assert np.array_equal(s, np.full((2, 3), 2, np.float32)) and s.shape == (2, 3)
    for array in (s, a, s_next):
        assert not array.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            array[...] = 0
    assert np.array_equal(buffer[2][0], np.full((2, 3), 2, np.float32))
    assert info is experiences[2][5] and r == 2.0 and non_terminal == 1.0
    # s is the previous s_next: one stored array for both, as nnabla-rl's chained objects
    assert buffer[3][0] is buffer[2][4]


def test_read_only_again_after_pickle_and_deepcopy() -> None:
    buffer = ReplayBuffer(capacity=10)
    buffer.append_all(chained(6))
    for twin in (pickle.loads(pickle.dumps(buffer)), copy.deepcopy(buffer)):
        e = twin[4]
        assert twin[4] is e and e == buffer[4]
        assert not e[0].flags.writeable and not e[4].flags.writeable
        assert twin[5][0] is e[4]


def test_experiences_the_core_holds_come_back_equal() -> None:
    """Reads that cannot use the tuples made at append (an experience stored one by one, a
    position the tuples do not cover) give equal experiences from the core."""
    buffer, model = ReplayBuffer(capacity=6), []
    for e in chained(4):
        buffer.append(e)
        model.append(e)
    odd = (np.ones(3, np.float32), np.array([1]), 2.0, np.float32(1.0), np.ones(3, np.float32),
           {"odd": True}, "extra")  # fmt: skip
    buffer.append(odd)  # a 7-tuple with a NumPy non_terminal: staged by the general push
    model.append(odd)
    experiences, _ = buffer.sample_indices([0, 1, 2, 3, 4])
    assert all(a == b for a, b in zip(experiences, model, strict=True))
    assert experiences[4][6] == "extra" and experiences[4][3] is odd[3]
    # an experience without a tuple made at append (as one stored one by one) is read from
    # the core, as a new tuple at each read; the others in the same read are those tuples
    buffer._core_size()  # every experience reaches the core (as before any read of it)
    handed = buffer._handed
    assert handed is not None
    kept = handed[3]
    handed[3] = None
    again, _ = buffer.sample_indices([3, 0, 4])
    assert again[1] is experiences[0] and again[2] is experiences[4]
    assert again[0] == model[3] and again[0] is not kept and again[0] is not buffer[3]
    buffer.append(7)  # any object: the buffer moves to its object store, tuples and all
    assert buffer._objects is not None and buffer[5] == 7
    assert all(buffer[i] == model[i] for i in range(5)) and not buffer[0][0].flags.writeable
