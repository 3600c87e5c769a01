"""``next_*`` after a terminal: the slots after the window as reagent 0.1 reads them.

reagent 0.1 (``sample_transition_batch``) reads ``next_state`` as the stack at
``next_indices = (index + step) % replay_capacity`` and ``next_<x>`` as ``_store[x]`` there
(a stack of them with ``return_everything_as_stack``), whatever the slots hold after a
terminal. With ``stack_size=2`` an episode ``s0 s1 s2*`` followed by ``n0 n1`` fills slots
``[pad, s0, s1, s2*, pad, n0, n1, n2]`` (a zero padding row before each episode).
"""

from __future__ import annotations

import numpy as np

from rlreplay.compat.reagent.circular_replay_buffer import ReplayBuffer


def filled(stack_all: bool, horizon: int = 2) -> ReplayBuffer:
    buf = ReplayBuffer(
        observation_shape=(1,),
        stack_size=2,
        replay_capacity=10,
        batch_size=1,
        update_horizon=horizon,
        gamma=1.0,
        observation_dtype=np.float32,
        return_everything_as_stack=stack_all,
    )
    for t, (obs, terminal) in enumerate([(1, 0), (2, 0), (3, 1), (11, 0), (12, 0), (13, 0)]):
        buf.add(np.array([obs], np.float32), t + 1, 10.0 * (t + 1), terminal)
    return buf


def test_next_values_after_a_terminal_are_the_slots_as_reagent_reads_them() -> None:
    batch = filled(False).sample_transition_batch(batch_size=2, indices=np.array([2, 3]))
    # slot 2 (s1): window s1, s2* (step 2); slot 3 (s2*): step 1. Both end at slot 4, the
    # padding row of the next episode: next_state is the stack of slots 3, 4.
    np.testing.assert_array_equal(batch.terminal.numpy().reshape(-1), [True, True])
    np.testing.assert_array_equal(batch.step.numpy().reshape(-1), [2, 1])
    np.testing.assert_array_equal(batch.next_state.numpy(), [[[3.0, 0.0]], [[3.0, 0.0]]])
    np.testing.assert_array_equal(batch.next_action.numpy().reshape(-1), [0, 0])
    np.testing.assert_array_equal(batch.next_reward.numpy().reshape(-1), [0.0, 0.0])
    # a window that ends at slot 5 (n0) reads n0's values, as ReAgent does
    later = filled(False).sample_transition_batch(batch_size=1, indices=np.array([5]))
    assert not later.terminal.item()
    np.testing.assert_array_equal(later.next_state.numpy(), [[[12.0, 13.0]]])


def test_stacked_next_values_after_a_terminal() -> None:
    # update_horizon 1 (0.1 stacks no reward over a longer window: NotImplementedError)
    batch = filled(True, horizon=1).sample_transition_batch(batch_size=1, indices=np.array([3]))
    # stacks of slots 3, 4: s2*'s action and reward, then the padding row's zeros
    np.testing.assert_array_equal(batch.next_state.numpy(), [[[3.0, 0.0]]])
    np.testing.assert_array_equal(batch.next_action.numpy(), [[3, 0]])
    np.testing.assert_array_equal(batch.next_reward.numpy(), [[30.0, 0.0]])
