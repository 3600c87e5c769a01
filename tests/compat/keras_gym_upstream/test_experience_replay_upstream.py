# ruff: noqa  (upstream test code kept as written)
# Ported from keras-gym 0.2.17 (keras_gym/caching/test_experience_replay.py). The front-end
# follows the seed's version of experience_replay.py, whose sample draws j =
# randint(num_transitions): the expected rows of test_sample and test_shape are that version's
# draws (each adaptation commented). Otherwise only the imports changed: `import gym` ->
# gymnasium (gym is not installed; Discrete is the same space), and the buffer comes from
# rlreplay.compat.keras_gym. The test reads keras-gym's private ring
# arrays (_a, _d, _e), which the front-end exposes as read-only copies in keras-gym's layout.
#
# MIT License
#
# Copyright (c) 2019 Kristian Holsheimer
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
# in the Software without restriction, including without limitation the rights
# to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
# copies of the Software, and to permit persons to whom the Software is
# furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in all
# copies or substantial portions of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
# IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
# FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
# LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
# OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
# SOFTWARE.
import gymnasium as gym  # rlreplay: was `import gym`
import numpy as np

from rlreplay.compat.keras_gym.caching.experience_replay import ExperienceReplayBuffer


class MockEnv:
    action_space = gym.spaces.Discrete(7)

    def __init__(self, num_frames):
        self.num_frames = num_frames


class TestExperienceReplayBuffer:
    N = 7
    S = np.expand_dims(np.arange(N), axis=1)
    A = S[:, 0] % 100
    R = S[:, 0]
    D = np.zeros(N, dtype="bool")
    D[-1] = True
    EPISODE = list(zip(S, A, R, D))

    def test_add(self):
        buffer = ExperienceReplayBuffer(MockEnv(1), capacity=17)
        for i, (s, a, r, done) in enumerate(self.EPISODE, 1):
            buffer.add(s + 100, a, r + 100, done, episode_id=1)
            assert len(buffer) == max(0, i - buffer.bootstrap_n)

        np.testing.assert_array_equal(buffer._e[:7], [1, 1, 1, 1, 1, 1, 1])
        np.testing.assert_array_equal(buffer._d[:7].astype("int"), [0, 0, 0, 0, 0, 0, 1])

        for i, (s, a, r, done) in enumerate(self.EPISODE, i + 1):
            buffer.add(s + 200, a, r + 200, done, episode_id=2)
            assert len(buffer) == max(0, i - buffer.bootstrap_n)

        np.testing.assert_array_equal(buffer._e[:14], [1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2])
        np.testing.assert_array_equal(
            buffer._d[:14].astype("int"), [0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1]
        )

        for i, (s, a, r, done) in enumerate(self.EPISODE, i + 1):
            buffer.add(s + 300, a, r + 300, done, episode_id=3)
            assert len(buffer) == np.clip(i - buffer.bootstrap_n, 0, 17)

        # buffer wraps around and overwrites oldest transitions
        np.testing.assert_array_equal(
            buffer._e, [3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3]
        )
        np.testing.assert_array_equal(
            buffer._d.astype("int"), [0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
        )
        np.testing.assert_array_equal(
            buffer._a,
            [
                [0, 0, 0, 0, 1, 0, 0],  # a=4
                [0, 0, 0, 0, 0, 1, 0],  # a=5
                [0, 0, 0, 0, 0, 0, 1],  # a=6
                [0, 0, 0, 1, 0, 0, 0],  # a=3
                [0, 0, 0, 0, 1, 0, 0],  # a=4
                [0, 0, 0, 0, 0, 1, 0],  # a=5
                [0, 0, 0, 0, 0, 0, 1],  # a=6
                [1, 0, 0, 0, 0, 0, 0],  # a=0
                [0, 1, 0, 0, 0, 0, 0],  # a=1
                [0, 0, 1, 0, 0, 0, 0],  # a=2
                [0, 0, 0, 1, 0, 0, 0],  # a=3
                [0, 0, 0, 0, 1, 0, 0],  # a=4
                [0, 0, 0, 0, 0, 1, 0],  # a=5
                [0, 0, 0, 0, 0, 0, 1],  # a=6
                [1, 0, 0, 0, 0, 0, 0],  # a=0
                [0, 1, 0, 0, 0, 0, 0],  # a=1
                [0, 0, 1, 0, 0, 0, 0],  # a=2
                [0, 0, 0, 1, 0, 0, 0],  # a=3
            ],
        )

    def test_sample(self):
        buffer = ExperienceReplayBuffer(
            env=MockEnv(num_frames=3), capacity=17, random_seed=13, batch_size=16, bootstrap_n=2
        )

        for ep in (1, 2, 3):
            for s, a, r, done in self.EPISODE:
                buffer.add(s[[0, 0, 0]] + ep * 100, a, r + ep * 100, done, episode_id=ep)

        # quickly check content, just to be safe
        np.testing.assert_array_equal(
            buffer._a,
            [
                [0, 0, 0, 0, 0, 1, 0],  # a=5
                [0, 0, 0, 0, 0, 0, 1],  # a=6
                [0, 0, 1, 0, 0, 0, 0],  # a=2
                [0, 0, 0, 1, 0, 0, 0],  # a=3
                [0, 0, 0, 0, 1, 0, 0],  # a=4
                [0, 0, 0, 0, 0, 1, 0],  # a=5
                [0, 0, 0, 0, 0, 0, 1],  # a=6
                [1, 0, 0, 0, 0, 0, 0],  # a=0
                [0, 1, 0, 0, 0, 0, 0],  # a=1
                [0, 0, 1, 0, 0, 0, 0],  # a=2
                [0, 0, 0, 1, 0, 0, 0],  # a=3
                [0, 0, 0, 0, 1, 0, 0],  # a=4
                [0, 0, 0, 0, 0, 1, 0],  # a=5
                [0, 0, 0, 0, 0, 0, 1],  # a=6
                [1, 0, 0, 0, 0, 0, 0],  # a=0
                [0, 1, 0, 0, 0, 0, 0],  # a=1
                [0, 0, 1, 0, 0, 0, 0],  # a=2
                [0, 0, 0, 1, 0, 0, 0],  # a=3
                [0, 0, 0, 0, 1, 0, 0],  # a=4
            ],
        )

        # rlreplay: seed version draws j = randint(num_transitions) (0.2.17 draws
        # js = randint(len - num_frames) + arange(num_frames)), so the batch of random_seed=13
        # is the seed version's. Two done rows (marked) have S_next at steps not added yet: the
        # seed version reads the ring slots they wrap to (the oldest steps, padded by episode
        # id), and so does the front-end.
        transitions = [
            [[302, 303, 304], 0.9801, [304, 305, 306]],  # bootstrap
            [[300, 301, 302], 0.9801, [302, 303, 304]],  # bootstrap
            [[201, 202, 203], 0.9801, [203, 204, 205]],  # bootstrap
            [[300, 301, 302], 0.9801, [302, 303, 304]],  # bootstrap
            [[104, 105, 106], 0.0000, [106, 200, 201]],
            [[203, 204, 205], 0.0000, [205, 206, 300]],
            [[300, 300, 300], 0.9801, [300, 301, 302]],  # bootstrap
            [[103, 104, 105], 0.0000, [105, 106, 200]],
            [[204, 205, 206], 0.0000, [206, 300, 301]],
            [[201, 202, 203], 0.9801, [203, 204, 205]],  # bootstrap
            [[200, 201, 202], 0.9801, [202, 203, 204]],  # bootstrap
            [[202, 203, 204], 0.9801, [204, 205, 206]],  # bootstrap
            [[303, 304, 305], 0.0000, [305, 306, 102]],  # rlreplay: step 102 wrapped
            [[202, 203, 204], 0.9801, [204, 205, 206]],  # bootstrap
            [[202, 203, 204], 0.9801, [204, 205, 206]],  # bootstrap
            [[304, 305, 306], 0.0000, [306, 103, 103]],  # rlreplay: 103 wrapped, padded
        ]

        S, A, Rn, In, S_next, A_next = buffer.sample()
        np.testing.assert_array_equal(In, [tr[1] for tr in transitions])
        np.testing.assert_array_equal(S[:, 0, :], [tr[0] for tr in transitions])
        np.testing.assert_array_equal(S_next[:, 0, :], [tr[2] for tr in transitions])

        # check if actions are separate by bootstrap_n steps
        for a, i_next, a_next in zip(A, In, A_next):
            if i_next != 0:
                assert np.argmax(a_next) - np.argmax(a) == buffer.bootstrap_n

        # check if states and actions are aligned
        np.testing.assert_array_equal(S[:, 0, -1] % 100, np.argmax(A, axis=1))
        np.testing.assert_array_equal(S_next[:, 0, -1] % 100, np.argmax(A_next, axis=1))

    def test_shape(self):
        buffer = ExperienceReplayBuffer(
            env=MockEnv(num_frames=3), capacity=17, batch_size=5, random_seed=13
        )

        for ep in (1, 2, 3):
            for i, (_, a, r, done) in enumerate(self.EPISODE):
                s = 100 * ep + i * np.ones((11, 13, 3), dtype="int")
                buffer.add(s, a, r, done, ep)

        S, A, Rn, In, S_next, A_next = buffer.sample()
        assert S.shape == (5, 11, 13, 3)

        # check if all frames come from the same episode
        np.testing.assert_array_equal(
            S[:, 0, 0, :],  # look at upper-left pixel only
            # rlreplay: seed version draws j = randint(num_transitions), so random_seed=13
            # gives the seed version's rows (0.2.17's were [304, 305, 306], [203, 204, 205],
            # [304, 305, 306], [200, 200, 201] (first frame repeated), [104, 105, 106])
            [
                [300, 301, 302],
                [201, 202, 203],
                [300, 301, 302],
                [104, 105, 106],
                [304, 305, 306],
            ],
        )
