"""ReAgent's own tests, run the way later ReAgent versions build and call the buffers.

In the style of ReAgent's ``reagent/test/replay_memory`` tests (``unittest.TestCase``, Dopamine's
constants and helpers): the prioritized tests ported in
``test_prioritized_replay_buffer_upstream.py`` rerun on a buffer built as later versions build
it (no observation shape, values by name, ``priority=`` by name), and the documented version's
shapes with ``stack_size=1`` checked in every ``return_everything_as_stack`` / timeline
combination.
"""

import unittest

import numpy as np
import numpy.testing as npt
import torch

from rlreplay.compat.reagent import circular_replay_buffer, prioritized_replay_buffer
from rlreplay.compat.reagent.circular_replay_buffer import ReplayElement

from . import test_prioritized_replay_buffer_upstream as upstream

# The module's own constants (a TestCase imported by name would be collected twice).
SCREEN_SIZE, STACK_SIZE = upstream.SCREEN_SIZE, upstream.STACK_SIZE
BATCH_SIZE, REPLAY_CAPACITY = upstream.BATCH_SIZE, upstream.REPLAY_CAPACITY


class LaterPrioritizedReplayBufferTest(upstream.PrioritizedReplayBufferTest):
    """The ported prioritized tests on the later constructor: shapes inferred at the first add."""

    def create_default_memory(self, max_sample_attempts=10):
        return prioritized_replay_buffer.PrioritizedReplayBuffer(
            stack_size=STACK_SIZE,
            replay_capacity=REPLAY_CAPACITY,
            batch_size=BATCH_SIZE,
            max_sample_attempts=max_sample_attempts,
        )

    def add_blank(self, memory, action=0, reward=0.0, terminal=0, priority=1.0):
        dummy = np.zeros(SCREEN_SIZE)
        memory.add(
            observation=dummy, action=action, reward=reward, terminal=terminal, priority=priority
        )
        index = (memory.cursor() - 1) % REPLAY_CAPACITY
        return index

    def testAddWithAndWithoutPriority(self):
        # The later add takes priority by name; left out, it is the maximum recorded so far.
        memory = self.create_default_memory()
        self.assertEqual(memory.cursor(), 0)
        index = self.add_blank(memory, priority=3.0)
        self.assertEqual(memory.cursor(), STACK_SIZE)
        self.assertEqual(memory.add_count, STACK_SIZE)
        memory.add(observation=np.zeros(SCREEN_SIZE), action=0, reward=0.0, terminal=0)
        self.assertEqual(memory.sum_tree.max_recorded_priority, 3.0)
        npt.assert_array_equal(
            memory.get_priority(np.array([index, index + 1], dtype=np.int32)), [3.0, 3.0]
        )

    def testSampleIndexBatch(self):
        memory = self.create_default_memory(max_sample_attempts=REPLAY_CAPACITY)
        # This will ensure we end up with cursor == 1.
        for _ in range(REPLAY_CAPACITY - STACK_SIZE + 2):
            self.add_blank(memory)
        self.assertEqual(memory.cursor(), 1)
        samples = memory.sample_index_batch(REPLAY_CAPACITY)
        for sample in samples:
            self.assertGreaterEqual(sample, STACK_SIZE)
            self.assertLessEqual(sample, REPLAY_CAPACITY - 1)

    def testMaxRecordedPriority(self):
        memory = self.create_default_memory()
        self.assertEqual(memory.sum_tree.max_recorded_priority, 1.0)
        index = self.add_blank(memory, priority=2.5)
        self.assertEqual(memory.sum_tree.max_recorded_priority, 2.5)
        self.assertEqual(memory.sum_tree.get(index), 2.5)
        memory.set_priority(np.array([index], dtype=np.int32), np.array([7.0]))
        self.assertEqual(memory.sum_tree.max_recorded_priority, 7.0)
        self.assertEqual(memory.sum_tree.get(index), 7.0)


class PriorityIndicesTest(unittest.TestCase):
    """The documented version's assertion on index dtypes: ``np.array`` of ``int32``."""

    def setUp(self):
        self.memory = prioritized_replay_buffer.PrioritizedReplayBuffer(
            SCREEN_SIZE, STACK_SIZE, REPLAY_CAPACITY, BATCH_SIZE
        )
        self.memory.add(np.zeros(SCREEN_SIZE), 0, 0.0, 0, 1.0)
        self.index = (self.memory.cursor() - 1) % REPLAY_CAPACITY

    def testGetPriorityRefusesInt64(self):
        with self.assertRaisesRegex(AssertionError, "^Indices must be int32s, given: int64$"):
            self.memory.get_priority(np.array([self.index]))
        with self.assertRaisesRegex(AssertionError, "^Indices must be int32s, given: uint8$"):
            self.memory.get_priority(np.array([self.index], dtype=np.uint8))

    def testSetPriorityRefusesInt64(self):
        with self.assertRaisesRegex(AssertionError, "^Indices must be integers, given: int64$"):
            self.memory.set_priority(np.array([self.index]), np.array([2.0]))
        # Nothing was written.
        self.assertEqual(self.memory.sum_tree.get(self.index), 1.0)

    def testSampledIndicesFeedBack(self):
        # sample_transition_batch returns the indices as an int64 tensor: they go back as is.
        for _ in range(4):
            self.memory.add(np.zeros(SCREEN_SIZE), 0, 0.0, 0, 1.0)
        batch = self.memory.sample_transition_batch(batch_size=2)
        self.assertEqual(batch.indices.dtype, torch.int64)
        self.memory.set_priority(batch.indices, np.array([3.0, 3.0]))
        npt.assert_array_equal(self.memory.get_priority(batch.indices), [3.0, 3.0])


class LaterObservationShapeTest(unittest.TestCase):
    def testIntObservationShape(self):
        memory = circular_replay_buffer.ReplayBuffer(
            observation_shape=3, stack_size=1, replay_capacity=10, batch_size=2
        )
        self.assertEqual(
            memory.get_storage_signature()[0], ReplayElement("observation", (3,), np.uint8)
        )
        memory.add(np.ones(3), 0, 0.0, 1)
        self.assertEqual(memory.sample_transition_batch().state.shape, (2, 3))
        memory = prioritized_replay_buffer.PrioritizedReplayBuffer(
            np.int64(4), 2, 10, 2, observation_dtype=np.float32
        )
        self.assertEqual(memory.get_storage_signature()[0].shape, (4,))


class StackSizeOneShapesTest(unittest.TestCase):
    """With stack_size=1 a state has no stack axis where ReAgent squeezes it: ``state`` is
    2-D for vector observations (``t.squeeze(2)``) and keeps ``(B, h, w, 1)`` for frames;
    every timeline entry has the shape of the plain element for a batch of its ``m`` steps."""

    def fill(self, observation_shape, **kwargs):
        memory = circular_replay_buffer.ReplayBuffer(
            observation_shape=observation_shape,
            stack_size=1,
            replay_capacity=20,
            batch_size=3,
            update_horizon=kwargs.pop("update_horizon", 2),
            observation_dtype=np.float32,
            extra_storage_types=[ReplayElement("x", (2,), np.float32)],
            **kwargs,
        )
        for i in range(12):
            memory.add(np.full(observation_shape, i), i, 1.0, i % 5 == 4, np.full(2, i))
        return memory

    def testPlainFormat(self):
        for shape, state in (((3,), (3,)), ((4, 4), (4, 4, 1)), ((), (1,))):
            for stack in (False, True):
                memory = self.fill(shape, return_everything_as_stack=stack, update_horizon=1)
                batch = memory.sample_transition_batch(indices=np.array([1, 2, 3]))
                self.assertEqual(batch.state.shape, (3, *state))
                self.assertEqual(batch.next_state.shape, (3, *state))
                self.assertEqual(batch.action.shape, (3, 1))
                self.assertEqual(batch.x.shape, (3, 2, 1) if stack else (3, 2))
                self.assertEqual(batch.next_x.shape, batch.x.shape)

    def testTimelineFormat(self):
        for shape, state in (((3,), (3,)), ((4, 4), (4, 4, 1)), ((), (1,))):
            for stack in (False, True):
                memory = self.fill(
                    shape, return_everything_as_stack=stack, return_as_timeline_format=True
                )
                # Slot 4 ends its episode (window 1); slot 2 has a window of 2.
                batch = memory.sample_transition_batch(indices=np.array([2, 4, 6]))
                self.assertEqual(batch.state.shape, (3, *state))
                steps = batch.step.reshape(-1).tolist()
                self.assertEqual(steps, [2, 1, 2])
                for m, next_state, next_x, reward, next_action in zip(
                    steps,
                    batch.next_state,
                    batch.next_x,
                    batch.reward,
                    batch.next_action,
                    strict=True,
                ):
                    self.assertEqual(next_state.shape, (m, *state))
                    self.assertEqual(next_x.shape, (m, 2, 1) if stack else (m, 2))
                    self.assertEqual(reward.shape, (m, 1) if stack else (m,))
                    self.assertEqual(next_action.shape, (m, 1) if stack else (m,))
                # Slot 2 holds step 2: its next states are steps 3 and 4.
                expected = [np.full(shape, 3.0), np.full(shape, 4.0)]
                npt.assert_array_equal(batch.next_state[0].reshape(2, *shape), expected)

    def testSetValidSlotReadsKeepTheShapes(self):
        # A slot made valid by hand is read from the ring: the same shapes.
        memory = self.fill((4, 4), return_as_timeline_format=True)
        memory.set_index_valid_status(15, True)
        batch = memory.sample_transition_batch(batch_size=2, indices=np.array([15, 2]))
        self.assertEqual(batch.state.shape, (2, 4, 4, 1))
        self.assertEqual([t.shape for t in batch.next_state], [(2, 4, 4, 1), (2, 4, 4, 1)])


if __name__ == "__main__":
    unittest.main()
