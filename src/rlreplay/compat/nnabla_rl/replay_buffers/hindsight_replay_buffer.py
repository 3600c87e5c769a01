"""Stand-in for ``nnabla_rl.replay_buffers.hindsight_replay_buffer`` over the rlreplay core.

Goal-conditioned experiences have the state ``(observation, desired_goal, achieved_goal)``,
stored as the core's observation fields ``obs_0``, ``obs_1`` and ``obs_2``. Relabelling is the
core's :class:`rlreplay.HindsightRelabel` with the ``"future"`` strategy, nnabla-rl's: with
probability ``hindsight_prob`` a sampled experience at step ``t`` of an episode ending at step
``d`` gets the goal ``g = achieved_goal of s_next at a step drawn uniformly from [t, d]``, both
its desired goals (in ``s`` and ``s_next``) become ``g`` and its reward becomes
``reward_function(s_next[2], g, info)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlreplay.batch import Batch
from rlreplay.buffer import ReplayBuffer as CoreBuffer
from rlreplay.compat.nnabla_rl.replay_buffer import (
    Experience,
    Indices,
    ReplayBuffer,
    as_indices,
    check_count,
)
from rlreplay.errors import ShapeError
from rlreplay.spec import Field
from rlreplay.transforms import HindsightRelabel

__all__ = ["HindsightReplayBuffer"]

Array = np.ndarray[Any, Any]
RewardFunction = Callable[[Array, Array, dict[str, Any]], Any]

# Core field names of the goal-conditioned state's elements.
_DESIRED_GOAL, _ACHIEVED_GOAL = "obs_1", "obs_2"


class HindsightReplayBuffer(ReplayBuffer):
    """nnabla-rl's hindsight experience replay (HER, "future" goals) on rlreplay.

    Sampling is the base buffer's (distinct indices, uniformly); each returned experience of a
    *finished* episode is then relabelled with probability ``hindsight_prob``::

        g        = s_next[2] of the experience at a step drawn uniformly from [t, episode end]
        s'       = (s[0], g, s[2]);   s_next' = (s_next[0], g, s_next[2])
        r'       = reward_function(s_next[2], g, info)
        experience' = (s', a, r', non_terminal, s_next', info)

    The goal always comes from the same episode (the core's episode index), never from an
    overwritten step. Experiences of the running episode are returned as stored (the core does
    not know where that episode ends yet). Stored data is never changed.

    Args:
        reward_function: ``(achieved_goal, desired_goal, info) -> reward`` for one experience
            (``info`` is the experience's own ``info`` dict).
        hindsight_prob: Probability in ``[0, 1]`` of relabelling an experience.
        capacity: Most experiences kept, or None for no limit.
        seed: Seed of the random generators (an rlreplay addition).

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.nnabla_rl.replay_buffers import HindsightReplayBuffer
        >>> def reward(achieved, goal, info):
        ...     return -float(np.linalg.norm(achieved - goal) > 0.05)
        >>> buffer = HindsightReplayBuffer(reward, hindsight_prob=1.0, seed=0)
        >>> goal = np.full(2, 9.0)
        >>> for t in range(5):
        ...     s = (np.full(3, t), goal, np.full(2, float(t)))
        ...     s_next = (np.full(3, t + 1), goal, np.full(2, t + 1.0))
        ...     buffer.append((s, np.zeros(1), -1.0, float(t < 4), s_next, {}))
        >>> experiences, info = buffer.sample(num_samples=3)
        >>> all(e[0][1][0] > e[0][2][0] for e in experiences)  # goals from the future
        True
    """

    _objects_allowed = False  # relabelling is the core's (goals from its episode index)

    def __init__(
        self,
        reward_function: RewardFunction,
        hindsight_prob: float = 0.8,
        capacity: int | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        super().__init__(capacity=capacity, seed=seed)
        if not callable(reward_function):
            raise TypeError(f"reward_function: expected a callable, got {reward_function!r}")
        self._reward_function = reward_function
        self._hindsight_prob = hindsight_prob
        self._relabel = self._new_relabel()  # checks hindsight_prob now
        self._reward_shape: tuple[int, ...] = ()

    def _new_relabel(self) -> HindsightRelabel:
        """One relabelling transform per core (a transform binds to one buffer)."""
        return HindsightRelabel(
            self._relabel_reward,
            strategy="future",
            relabel_prob=self._hindsight_prob,
            achieved_goal=_ACHIEVED_GOAL,
            desired_goal=_DESIRED_GOAL,
        )

    def _build_core(self, capacity: int, fields: dict[str, Field], seed: int | None) -> CoreBuffer:
        self._relabel = self._new_relabel()
        self._reward_shape = fields["reward"].shape
        return CoreBuffer(
            capacity,
            fields,
            n_step=1,
            gamma=1.0,
            stack_pad="first",
            seed=seed,
            transforms=[self._relabel],
        )

    def append(self, experience: Experience) -> None:
        """Add new experience to the replay buffer.

        Raises:
            RuntimeError: The state is not a tuple ``(observation, desired_goal,
                achieved_goal)`` (as nnabla-rl).
            ValueError: ``info`` is not a dict (as nnabla-rl), or as the base buffer's.
        """
        if not isinstance(experience, tuple | list) or len(experience) < 6:
            super().append(experience)  # raises the base buffer's ValueError
            return
        if not isinstance(experience[0], tuple):
            raise RuntimeError("Hindsight replay only supports tuple observation environment")
        if not len(experience[0]) == 3:
            raise RuntimeError(
                "Observation is not a tuple of 3 elements: (observation, desired_goal, "
                "achieved_goal)"
            )
        if not isinstance(experience[5], dict):
            raise ValueError(f"info: expected a dict, got {type(experience[5]).__name__}")
        super().append(experience)

    def sample_indices(
        self, indices: Indices, num_steps: int = 1
    ) -> tuple[list[Experience] | tuple[list[Experience], ...], dict[str, Any]]:
        """Sample experiences for given indices, each relabelled with ``hindsight_prob``.

        Raises:
            ValueError: If indices are empty or num_steps is 0 or negative.
            NotImplementedError: ``num_steps > 1`` (n-step learning is not supported, as in
                nnabla-rl).
        """
        idx = as_indices(indices)
        if check_count("num_steps", num_steps) > 1:
            raise NotImplementedError("HindsightReplayBuffer: n-step learning is not supported")
        experiences = self._steps_at(self._check_range(idx, 1), 1)
        return experiences, {"weights": np.ones((idx.shape[0], 1))}

    def _transitions(self, ids: Array) -> Batch:
        return self._relabel(super()._transitions(ids))

    def _relabel_reward(self, achieved: Array, goal: Array, info: Mapping[str, Array]) -> Array:
        """The core's vectorised ``reward_fn`` from nnabla-rl's per-experience one."""
        infos = self._extras_of(np.asarray(info["ids"]))
        rewards = [
            self._reward_function(achieved[i], goal[i], extra[0] if extra else {})
            for i, extra in enumerate(infos)
        ]
        out = np.asarray(rewards)
        expected = (achieved.shape[0], *self._reward_shape)
        if out.shape != expected:
            if out.size != int(np.prod(expected)):
                raise ShapeError(
                    f"reward_function: expected a reward of shape {self._reward_shape} (as the "
                    f"appended r) per experience, got {out.shape[1:]}"
                )
            out = out.reshape(expected)
        return out
