"""ReAgent buffers: ``save`` then ``load`` gives back exactly the buffer saved.

Random add sequences (``stack_size`` 1..3, rings that wrap, terminals, steps whose values are
all zero like a padding row, validity set by hand), saved and loaded into a fresh buffer:
every slot holds what it held (a padding row stays padding, a step stays a step, validity as
saved), and adding on behaves the same in both buffers.

A ReAgent checkpoint has neither the validity file nor the padding file
(docs/migrating/reagent.md, difference 1). Then the padding rows after a terminal and at the
start are still exact (reagent 0.1's ``add`` writes ``stack_size - 1`` zero rows there and
nowhere else); the oldest rows of a wrapped ring are read as the doc says: its leading
all-zero rows, at most ``stack_size - 1``, are padding.
"""

from __future__ import annotations

import gzip
import os
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlreplay.compat.reagent import PrioritizedReplayBuffer, ReplayBuffer
from rlreplay.compat.reagent._checkpoint import padding_slots
from rlreplay.compat.reagent.circular_replay_buffer import ReplayElement
from rlreplay.errors import CheckpointError

LOG_PROB = ReplayElement("log_prob", (), np.float32)
# One op: ("ep", length, terminal, first step all zeros) or ("valid", slot, flag).
EPISODE = st.tuples(st.just("ep"), st.integers(1, 5), st.booleans(), st.booleans())
VALID = st.tuples(st.just("valid"), st.integers(0, 40), st.booleans(), st.just(False))


def make(cls: Any, k: int, n: int, cap: int) -> Any:
    return cls(observation_shape=(2,), stack_size=k, replay_capacity=cap, batch_size=2,
               update_horizon=n, gamma=0.5, observation_dtype=np.float32,
               extra_storage_types=[LOG_PROB], seed=0)  # fmt: skip


def run(buf: Any, ops: list[tuple[str, int, bool, bool]], start: int = 0) -> None:
    """Apply ``ops``; step ``g`` is ``(g, -g)`` with action ``g % 3`` unless made all zero."""
    g = start
    prioritized = isinstance(buf, PrioritizedReplayBuffer)
    for op, a, flag, zero in ops:
        if op == "valid":
            buf.set_index_valid_status(a % buf._replay_capacity, flag)
            continue
        for t in range(a):
            g += 1
            blank = zero and t == 0  # every value zero (priority too): a padding row's values
            obs = np.zeros(2, np.float32) if blank else np.array([g, -g], np.float32)
            extra = [0.0] if blank else [0.25 * g]
            p = ([0.0] if blank else [1.0 + g % 3]) if prioritized else []
            buf.add(obs, 0 if blank else g % 3, 0.0 if blank else 1.0, flag and t == a - 1,
                    *extra, *p)  # fmt: skip


def held(buf: Any) -> list[Any]:
    """Per slot: ``None`` where the slot holds no step (padding, never written), else the
    transition read there (reagent 0.1's read of the slots, whatever they hold)."""
    out: list[Any] = []
    for s in range(buf._replay_capacity):
        if buf._slot_id[s] < 0:
            out.append(None)
            continue
        batch = buf.sample_transition_batch(batch_size=1, indices=[s])
        out.append({name: getattr(batch, name).numpy().tolist() for name in batch._fields})
    return out


def assert_same(a: Any, b: Any) -> None:
    cap = a._replay_capacity
    assert (a.add_count, a.cursor(), a.size) == (b.add_count, b.cursor(), b.size)
    assert [a.is_valid_transition(i) for i in range(cap)] == [
        b.is_valid_transition(i) for i in range(cap)
    ]
    for name, rows in a._store.items():
        np.testing.assert_array_equal(rows, b._store[name], err_msg=name)
    np.testing.assert_array_equal(padding_slots(a), padding_slots(b))  # padding stays padding
    ha, hb = held(a), held(b)
    for s in stale_slots(a):
        # A step among the oldest stack_size - 1 slots, whose stack reaches rows overwritten
        # (never valid unless set by hand; 0.1 reads newer rows there): the saved buffer
        # stacks the frames its core still holds, or cannot assemble it (difference 3); the
        # loaded one starts the cut episode there and pads its stack with zeros.
        ha[s] = hb[s] = "stale"
    assert ha == hb
    if isinstance(a, PrioritizedReplayBuffer):
        leaves = np.arange(cap, dtype=np.int32)
        np.testing.assert_array_equal(a.get_priority(leaves), b.get_priority(leaves))


def stale_slots(buf: Any) -> list[int]:
    """The oldest ``stack_size - 1`` slots of a wrapped ring that hold a step."""
    cap, k = buf._replay_capacity, buf._stack_size
    if buf.add_count <= cap:
        return []
    oldest = [(buf.cursor() + i) % cap for i in range(k - 1)]
    return [s for s in oldest if not padding_slots(buf)[s]]


def reload(buf: Any, cls: Any, k: int, n: int, cap: int, reagent: bool) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        buf.save(tmp, 0)
        if reagent:  # what ReAgent writes: no validity, no padding file
            os.remove(os.path.join(tmp, "_is_valid_ckpt.0.gz"))
            os.remove(os.path.join(tmp, "_is_padding_ckpt.0.gz"))
        loaded = make(cls, k, n, cap)
        loaded.load(tmp, 0)
    return loaded


@settings(max_examples=40, deadline=None)
@given(
    prioritized=st.booleans(),
    k=st.integers(2, 3),
    n=st.integers(1, 2),
    spare=st.integers(0, 5),
    ops=st.lists(EPISODE | VALID, min_size=1, max_size=8),
    more=st.lists(EPISODE, min_size=1, max_size=2),
)
def test_save_load_keeps_every_slot(
    prioritized: bool, k: int, n: int, spare: int, ops: list[Any], more: list[Any]
) -> None:
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    cap = k + n + spare
    buf = make(cls, k, n, cap)
    run(buf, ops)
    loaded = reload(buf, cls, k, n, cap, reagent=False)
    assert_same(buf, loaded)
    run(buf, more, start=100)
    run(loaded, more, start=100)
    assert_same(buf, loaded)


@settings(max_examples=40, deadline=None)
@given(
    prioritized=st.booleans(),
    k=st.integers(2, 3),
    n=st.integers(1, 2),
    spare=st.integers(0, 5),
    ops=st.lists(EPISODE.map(lambda op: (*op[:3], False)), min_size=1, max_size=8),
)
def test_reagent_checkpoint_keeps_padding_rows(
    prioritized: bool, k: int, n: int, spare: int, ops: list[Any]
) -> None:
    """Without the padding file, steps with a non-zero value and padding rows come back as such.

    Validity is then the marks ``add`` makes (difference 1), which is what the saved buffer
    holds here: no validity was set by hand.
    """
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    cap = k + n + spare
    buf = make(cls, k, n, cap)
    run(buf, ops)
    assert_same(buf, reload(buf, cls, k, n, cap, reagent=True))


def test_reagent_checkpoint_reads_leading_zero_rows_as_padding(tmp_path: Any) -> None:
    """The doc's rule for a ReAgent checkpoint: a zero step first after the cut is padding.

    stack_size 3, capacity 5: padding in slots 0, 1, a zero step in 2, steps in 3, 4, then a
    step in 0. The oldest rows, from slot 1: padding, the zero step, two steps, the newest.
    """
    buf = make(ReplayBuffer, 3, 1, 5)
    run(buf, [("ep", 4, False, True)])
    assert [x is None for x in held(buf)][1:3] == [True, False]
    buf.save(tmp_path, 0)
    os.remove(tmp_path / "_is_padding_ckpt.0.gz")
    guessed = make(ReplayBuffer, 3, 1, 5)
    guessed.load(tmp_path, 0)
    assert [x is None for x in held(guessed)][1:3] == [True, True]  # two zero rows, k - 1 = 2
    exact = make(ReplayBuffer, 3, 1, 5)
    buf.save(tmp_path, 1)
    exact.load(tmp_path, 1)
    assert_same(buf, exact)


def test_padding_file_that_add_cannot_write_is_refused(tmp_path: Any) -> None:
    buf = make(ReplayBuffer, 2, 1, 4)
    run(buf, [("ep", 2, True, False), ("ep", 3, False, False)])
    buf.save(tmp_path, 0)
    # Ring from the cursor: slot 3 padding, then steps in 0, 1, 2; slot 1 claimed as padding.
    wrong = np.array([False, True, False, True])
    with gzip.open(tmp_path / "_is_padding_ckpt.0.gz", "wb") as f:
        np.save(f, wrong, allow_pickle=False)
    fresh = make(ReplayBuffer, 2, 1, 4)
    with pytest.raises(CheckpointError, match="_is_padding"):
        fresh.load(tmp_path, 0)
    assert fresh.add_count == 0  # a refused load changes nothing
