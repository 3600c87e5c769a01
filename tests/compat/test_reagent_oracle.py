"""ReAgent front-end against reagent 0.1's source: ``_store``, validity, indices, horizon 0.

Expected values transcribed from running reagent 0.1's ``reagent/replay_memory`` code on the
same adds (``/tmp/orig/reagent-0.1``, a scratch driver side by side with this front-end).
"""

from __future__ import annotations

import numpy as np
import pytest

from rlreplay.compat.reagent import PrioritizedReplayBuffer, ReplayBuffer


def test_store_is_0_1s_rows_by_slot_and_reflects_load(tmp_path: object) -> None:
    buf = ReplayBuffer((2,), 2, 6, 2, observation_dtype=np.float32)
    for t in range(8):
        buf.add(np.full(2, t, np.float32), t, float(t), t == 3)
    # reagent 0.1 after the same adds: slot 0 padding, steps 0..3, padding, then 4..7 wrap
    # (slot 5, never rewritten since the second padding row, holds 0.1's padding zeros).
    store = buf._store
    assert store["observation"][:, 0].tolist() == [4, 5, 6, 7, 3, 0]
    assert store["action"].tolist() == [4, 5, 6, 7, 3, 0]
    assert store["reward"].tolist() == [4, 5, 6, 7, 3, 0]
    assert store["terminal"].tolist() == [0, 0, 0, 0, 1, 0]
    assert store["terminal"].dtype == np.uint8 and store["observation"].shape == (6, 2)
    store["action"][:] = 99  # a copy: the buffer is unchanged
    assert buf._store["action"].tolist() == [4, 5, 6, 7, 3, 0]
    buf.save(str(tmp_path), 1)
    other = ReplayBuffer((2,), 2, 6, 2, observation_dtype=np.float32)
    other.load(str(tmp_path), 1)
    for name, rows in buf._store.items():
        assert other._store[name].tolist() == rows.tolist()


def test_store_keeps_the_terminal_flag_as_stored() -> None:
    buf = ReplayBuffer((1,), 1, 4, 1)
    buf.add(np.zeros(1), 0, 0.0, 4)  # 0.1: _store["terminal"][cursor] = 4 (uint8)
    assert buf._store["terminal"].tolist() == [4, 0, 0, 0]
    assert buf.get_terminal_stack(0).tolist() == [4]


def test_is_valid_transition_is_0_1s_numpy_bool() -> None:
    buf = ReplayBuffer((1,), 1, 4, 1)
    buf.add(np.zeros(1), 0, 0.0, True)
    # 0.1: return self._is_index_valid[index], an element of a NumPy bool array
    assert type(buf.is_valid_transition(0)) is np.bool_ and buf.is_valid_transition(0)
    assert type(buf.is_valid_transition(-1)) is np.bool_ and not buf.is_valid_transition(-1)


def test_update_horizon_0_builds_and_fails_at_sampling() -> None:
    # 0.1: every written slot is valid; sample_index_batch draws; sample_transition_batch
    # raises IndexError("index -1 is out of bounds for axis 1 with size 0").
    buf = ReplayBuffer((2,), 1, 10, 4, update_horizon=0, seed=0)
    for _ in range(5):
        buf.add(np.zeros(2), 0, 0.0, False)
    assert buf.size == 5
    assert set(buf.sample_index_batch(8).tolist()) <= {0, 1, 2, 3, 4}
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 0"):
        buf.sample_transition_batch()
    with pytest.raises(IndexError):
        buf.sample_transition_batch(batch_size=1, indices=[0])


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_negative_indices_are_echoed_as_given(cls: type[ReplayBuffer]) -> None:
    buf = cls((2,), 2, 10, 4, update_horizon=2, observation_dtype=np.float32)
    for t in range(12):
        args = (np.full(2, t, np.float32), t, float(t), t % 5 == 4)
        buf.add(*args, float(t)) if cls is PrioritizedReplayBuffer else buf.add(*args)
    batch = buf.sample_transition_batch(batch_size=4, indices=np.array([-1, -3, 7, 0]))
    # reagent 0.1: indices [-1, -3, 7, 0] come back as given; the rest reads slots 9, 7, 7, 0
    assert batch.indices.reshape(-1).tolist() == [-1, -3, 7, 0]
    assert batch.action.reshape(-1).tolist() == [7, 5, 5, 8]
    assert batch.reward.reshape(-1).tolist() == pytest.approx(
        [7 + 0.99 * 8, 5 + 0.99 * 6, 5 + 0.99 * 6, 8 + 0.99 * 9]
    )
    if cls is PrioritizedReplayBuffer:
        # 0.1: get_priority(indices) reads the 16-leaf level from its end for -1 and -3
        # (padding leaves, 0); slots 7 and 0 hold steps 5 and 8.
        assert batch.sampling_probabilities.reshape(-1).tolist() == [0.0, 0.0, 5.0, 8.0]


def test_timeline_last_next_value_after_a_terminal_is_the_plain_one() -> None:
    kw = dict(update_horizon=3, observation_dtype=np.float32, seed=0)
    plain = ReplayBuffer((2,), 1, 20, 4, **kw)  # type: ignore[arg-type]
    timeline = ReplayBuffer((2,), 1, 20, 4, return_as_timeline_format=True, **kw)  # type: ignore[arg-type]
    for buf in (plain, timeline):
        for t in range(9):
            buf.add(np.full(2, t, np.float32), t, float(t), t == 4)
    idx = [3, 4, 0]  # windows ending on the terminal step 4 (slots 3, 4), and one that goes on
    a = plain.sample_transition_batch(batch_size=len(idx), indices=idx)
    b = timeline.sample_transition_batch(batch_size=len(idx), indices=idx)
    for i in range(3):
        for name in ("next_state", "next_action", "next_reward"):
            # Seed: next values after a terminal are undefined; both formats read the slot
            # after the window (the next episode's first step, 5) as 0.1 reads it.
            assert getattr(b, name)[i][-1].reshape(-1).tolist() == getattr(a, name)[i].tolist()
    assert b.next_state[0][:, 0].tolist() == [4, 5] and b.next_action[1].tolist() == [5]  # m = 1
