# Copyright 2020,2021 Sony Corporation.
# Copyright 2021 Sony Group Corporation.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
# Ported from nnabla-rl 0.9.0 (tests/replay_buffers/test_prioritized_replay_buffer.py) to rlreplay's front-end
# ``rlreplay.compat.nnabla_rl``: the imports are changed; the lines marked "0.16:" are adapted
# where nnabla-rl 0.16.0 (the version the front-end follows) changed the API. Left out: 0.9.0's
# ``TestSumTree`` (its ``SumTree`` was a buffer of experiences, 0.16.0's is a tree of numbers,
# tested in tests/compat/test_nnabla_rl_prioritized.py against 0.16.0's code) and
# ``test_random_indices`` (``_random_indices`` is a private helper of 0.16.0's base buffer).
# The upstream code is kept as written: no lint or formatting of rlreplay's applies.
# ruff: noqa
# fmt: off

import numpy as np
import pytest

from rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer import PrioritizedReplayBuffer

np.random.seed(0)  # rlreplay: the parametrize ids below draw from it; xdist workers must agree


class TestPrioritizedReplayBuffer(object):
    def setup_method(self, method):
        np.random.seed(0)

    def test_finite_capacity(self):
        requested_capacity = 100
        buffer = PrioritizedReplayBuffer(capacity=requested_capacity)
        assert buffer.capacity == requested_capacity

    def test_infine_capacity(self):
        with pytest.raises(ValueError):
            _ = PrioritizedReplayBuffer(capacity=None)

    def test_not_positive_capacity(self):
        with pytest.raises(ValueError):
            _ = PrioritizedReplayBuffer(capacity=-1)
        with pytest.raises(ValueError):
            _ = PrioritizedReplayBuffer(capacity=0)

    def test_append_with_capacity(self):
        capacity = 5
        append_num = 10
        buffer = PrioritizedReplayBuffer(capacity=capacity)
        for i in range(append_num):
            experience = self._generate_experience_mock()
            buffer.append(experience)
            if i < capacity:
                assert len(buffer) == i + 1
            else:
                assert len(buffer) == capacity
        assert len(buffer) == capacity

    @pytest.mark.parametrize(
        "beta",
        [np.random.randint(low=0.0, high=1.0) for _ in range(1, 10)])
    def test_sample_one_experience(self, beta):
        buffer = self._generate_buffer_with_experiences(experience_num=100,
                                                        beta=beta)
        experiences, info = buffer.sample()
        # rlreplay: == (not `is`): the columnar store hands out equal copies, not the stored objects
        indices = [next(i for i in range(len(buffer)) if buffer[i] == e) for e in experiences]  # 0.16: no _latest_indices
        assert len(experiences) == 1
        assert "weights" in info
        assert len(info["weights"]) == 1
        assert len(indices) == 1
        weights = info["weights"]
        for index, experience, weight in zip(indices, experiences, weights):
            priority = 1.0  # 0.16: no _get_priority; every priority is the initial 1.0
            assert experience == buffer[index]
            assert weight == (priority / 1.0) ** (-beta)  # 0.16: no _weights_from_priorities

    @pytest.mark.parametrize(
        "beta",
        [np.random.randint(low=0.0, high=1.0) for _ in range(1, 10)])
    def test_sample_multiple_experiences(self, beta):
        buffer = self._generate_buffer_with_experiences(experience_num=100,
                                                        beta=beta)
        num_samples = 10
        experiences, info = buffer.sample(num_samples=num_samples)
        # rlreplay: == (not `is`): the columnar store hands out equal copies, not the stored objects
        indices = [next(i for i in range(len(buffer)) if buffer[i] == e) for e in experiences]  # 0.16: no _latest_indices
        assert len(experiences) == num_samples
        assert "weights" in info
        assert len(info["weights"]) == num_samples
        assert len(indices) == num_samples
        weights = info["weights"]
        for index, experience, weight in zip(indices, experiences, weights):
            priority = 1.0  # 0.16: no _get_priority; every priority is the initial 1.0
            assert experience == buffer[index]
            assert weight == (priority / 1.0) ** (-beta)  # 0.16: no _weights_from_priorities

    def test_sample_from_insufficient_size_buffer(self):
        buffer = self._generate_buffer_with_experiences(experience_num=10)
        with pytest.raises(ValueError):
            buffer.sample(num_samples=100)

    @pytest.mark.parametrize(
        "beta",
        [np.random.randint(low=0.0, high=1.0) for _ in range(1, 10)])
    def test_sample_indices(self, beta):
        buffer = self._generate_buffer_with_experiences(experience_num=100,
                                                        beta=beta)
        indices = [1, 67, 50, 4, 99]

        experiences, info = buffer.sample_indices(indices)

        assert len(experiences) == len(indices)
        assert "weights" in info
        assert len(info["weights"]) == len(indices)
        weights = info["weights"]
        for index, experience, weight in zip(indices, experiences, weights):
            priority = 1.0  # 0.16: no _get_priority; every priority is the initial 1.0
            assert experience == buffer[index]
            assert weight == (priority / 1.0) ** (-beta)  # 0.16: no _weights_from_priorities

    def test_sample_from_empty_indices(self):
        buffer = self._generate_buffer_with_experiences(experience_num=100)
        with pytest.raises(ValueError):
            buffer.sample_indices([])

    def test_sample_from_wrong_indices(self):
        buffer = self._generate_buffer_with_experiences(experience_num=100)
        indices = [-99, 100, 101]
        with pytest.raises(IndexError):
            buffer.sample_indices(indices)

    def test_buffer_len(self):
        buffer = PrioritizedReplayBuffer(capacity=100)
        for _ in range(10):
            experience = self._generate_experience_mock()
            buffer.append(experience)

        assert len(buffer) == 10

    def _generate_experience_mock(self):
        state_shape = (5, )
        action_shape = (10, )

        state = np.empty(shape=state_shape)
        action = np.empty(shape=action_shape)
        reward = np.random.normal()
        non_terminal = 0.0 if np.random.choice([True, False], 1) else 1.0
        next_state = np.empty(shape=state_shape)
        next_action = np.empty(shape=action_shape)

        return (state, action, reward, non_terminal, next_state, next_action)

    def _generate_buffer_with_experiences(self, experience_num, beta=1.0):
        buffer = PrioritizedReplayBuffer(capacity=experience_num, beta=beta)
        for _ in range(experience_num):
            experience = self._generate_experience_mock()
            buffer.append(experience)
        return buffer


if __name__ == "__main__":
    pytest.main()
