# Copyright 2020,2021 Sony Corporation.
# Copyright 2021,2022,2023,2024 Sony Group Corporation.
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

"""nnabla-rl 0.16.0's base, replacement-sampling and trajectory buffers, transcribed for tests.

Sources: ``nnabla_rl/replay_buffer.py``,
``nnabla_rl/replay_buffers/replacement_sampling_replay_buffer.py`` and
``nnabla_rl/replay_buffers/trajectory_replay_buffer.py`` of nnabla-rl 0.16.0 (the license
notice above is the original's). Changes, all mechanical: ``rl.random.drng`` is ``self._rng``,
a generator the tests pass in; ``RingBuffer`` comes from the prioritized transcription (a
verbatim copy); type annotations and docstrings are dropped. Everything else is the original
code, bugs included (the tests compare against it).
"""

# ruff: noqa
# mypy: ignore-errors

from collections import deque

import numpy as np

from tests.compat._nnabla_rl_reference import RingBuffer


class ReplayBuffer(object):
    def __init__(self, capacity=None, rng=None):
        assert capacity is None or capacity >= 0
        self._capacity = capacity
        self._rng = rng

        if capacity is None:
            self._buffer = deque(maxlen=capacity)
        else:
            self._buffer = RingBuffer(maxlen=capacity)

    def __getitem__(self, item):
        return self._buffer[item]

    @property
    def capacity(self):
        return self._capacity

    def append(self, experience):
        self._buffer.append(experience)

    def append_all(self, experiences):
        for experience in experiences:
            self.append(experience)

    def sample(self, num_samples=1, num_steps=1):
        max_index = len(self) - num_steps + 1
        if num_samples > max_index:
            raise ValueError(
                f"num_samples: {num_samples} is greater than the size of buffer: {max_index}"
            )
        indices = self._random_indices(num_samples=num_samples, max_index=max_index)
        return self.sample_indices(indices, num_steps=num_steps)

    def sample_indices(self, indices, num_steps=1):
        if len(indices) == 0:
            raise ValueError("Indices are empty")
        if num_steps < 1:
            raise ValueError(f"num_steps: {num_steps} should be greater than 0!")
        if num_steps == 1:
            experiences = [self.__getitem__(index) for index in indices]
        else:
            experiences = tuple(
                [self.__getitem__(index + i) for index in indices] for i in range(num_steps)
            )
        weights = np.ones([len(indices), 1])
        return experiences, dict(weights=weights)

    def update_priorities(self, errors):
        pass

    def __len__(self):
        return len(self._buffer)

    def _random_indices(self, num_samples, max_index=None):
        if max_index is None:
            max_index = len(self)
        indices = self._rng.choice(max_index, size=num_samples, replace=False)
        return indices


class ReplacementSamplingReplayBuffer(ReplayBuffer):
    def __init__(self, capacity=None, rng=None):
        super(ReplacementSamplingReplayBuffer, self).__init__(capacity, rng)

    def sample(self, num_samples=1, num_steps=1):
        max_index = len(self) - num_steps + 1
        indices = self._random_indices(num_samples=num_samples, max_index=max_index)
        return self.sample_indices(indices, num_steps=num_steps)

    def _random_indices(self, num_samples, max_index):
        return self._rng.choice(max_index, size=num_samples, replace=True)


class TrajectoryReplayBuffer(ReplayBuffer):
    def __init__(self, num_trajectories=None, rng=None):
        super(TrajectoryReplayBuffer, self).__init__(num_trajectories, rng)

        self._samples_per_trajectory = []
        self._num_experiences = 0
        self._cumsum_experiences = [0]

    def __len__(self):
        return self._num_experiences

    def __getitem__(self, item):
        return self._get_experience(item)

    def get_trajectory(self, trajectory_index):
        return self._buffer[trajectory_index]

    @property
    def trajectory_num(self):
        return len(self._samples_per_trajectory)

    def append(self, experience):
        raise NotImplementedError

    def append_all(self, experiences):
        raise NotImplementedError

    def append_trajectory(self, trajectory):
        self._buffer.append(trajectory)
        self._samples_per_trajectory.append(len(trajectory))
        num_experiences = 0
        cumsum_experiences = []
        for i in range(self.trajectory_num):
            num_experiences += self._samples_per_trajectory[i]
            cumsum_experiences.append(num_experiences)
        self._num_experiences = num_experiences
        self._cumsum_experiences = cumsum_experiences

    def sample_indices(self, indices, num_steps=1):
        if len(indices) == 0:
            raise ValueError("Indices are empty")
        if num_steps < 1:
            raise ValueError(f"num_steps: {num_steps} should be greater than 0!")
        if num_steps == 1:
            experiences = [self._get_experience(index) for index in indices]
        else:
            experiences = tuple(
                [self._get_experience(index + i) for index in indices] for i in range(num_steps)
            )
        weights = np.ones([len(indices), 1])
        return experiences, dict(weights=weights)

    def sample_trajectories(self, num_samples=1):
        max_index = self.trajectory_num
        if num_samples > max_index:
            raise ValueError(
                f"num_samples: {num_samples} is greater than the number of trajectories saved in buffer: {max_index}"
            )
        indices = self._random_trajectory_indices(num_samples=num_samples, max_index=max_index)
        return self.sample_indices_trajectory(indices)

    def sample_indices_trajectory(self, indices):
        if len(indices) == 0:
            raise ValueError("Indices are empty")
        if len(indices) == 1:
            trajectories = self.get_trajectory(indices[0])
        else:
            trajectories = tuple(self.get_trajectory(index) for index in indices)
        weights = np.ones([len(indices), 1])
        return trajectories, dict(weights=weights)

    def sample_trajectories_portion(self, num_samples=1, portion_length=1):
        max_index = self.trajectory_num
        p = np.asarray(self._samples_per_trajectory)
        p = p / np.sum(p)
        trajectory_indices = self._rng.choice(max_index, size=num_samples, replace=True, p=p)
        trajectories = [self.get_trajectory(index) for index in trajectory_indices]

        sliced_trajectories = []
        for trajectory in trajectories:
            max_index = len(trajectory) - portion_length
            if max_index < 0:
                raise RuntimeError(
                    f"Trajectory length is shorter than portion length: {portion_length}"
                )
            initial_index = self._rng.choice(max_index + 1, replace=False)
            sliced_trajectories.append(trajectory[initial_index : initial_index + portion_length])
        weights = np.ones([len(trajectories), 1])
        return tuple(sliced_trajectories), dict(weights=weights)

    def sample_indices_portion(self, indices, portion_length=1):
        if len(indices) == 0:
            raise ValueError("Indices are empty")
        if portion_length < 1:
            raise ValueError(f"portion_length: {portion_length} should be greater than 0!")

        sliced_trajectories = []
        for index in indices:
            trajectory_index = np.argwhere(np.asarray(self._cumsum_experiences) > index)[0][0]
            trajectory = self.get_trajectory(trajectory_index)
            if len(trajectory) < portion_length:
                raise RuntimeError(
                    f"Trajectory length is shorter than portion length: {portion_length}"
                )

            if 0 < trajectory_index:
                experience_index = index - self._cumsum_experiences[trajectory_index - 1]
            else:
                experience_index = index
            experience_index = min(experience_index, len(trajectory) - portion_length)
            sliced_trajectories.append(
                trajectory[experience_index : experience_index + portion_length]
            )

        weights = np.ones([len(indices), 1])
        return tuple(sliced_trajectories), dict(weights=weights)

    def _random_indices(self, num_samples, max_index=None):
        if max_index is None:
            max_index = self._num_experiences
        indices = self._rng.choice(max_index, size=num_samples, replace=False)
        return indices

    def _random_trajectory_indices(self, num_samples, max_index=None):
        if max_index is None:
            max_index = self.trajectory_num
        indices = self._rng.choice(max_index, size=num_samples, replace=False)
        return indices

    def _get_experience(self, experience_index):
        prev_cumsum = 0
        for trajectory_index, cumsum in enumerate(self._cumsum_experiences):
            if experience_index < cumsum:
                trajectory = self.get_trajectory(trajectory_index)
                experience = trajectory[experience_index - prev_cumsum]
                return experience
            prev_cumsum = cumsum
        raise ValueError(f"index {experience_index} is out of range")
