"""Stand-in for ``nnabla_rl.replay_buffers.hindsight_replay_buffer``.

Goal-conditioned experiences have the state ``(observation, desired_goal, achieved_goal)``.
The experiences are stored by the front-end's base :class:`ReplayBuffer` (whatever it stores,
it gives back as appended: the columnar store or the object store, chosen as there), and the
relabelling is nnabla-rl's "future" strategy, done here at sample time as nnabla-rl does it:

* ``append`` writes ``index_in_episode`` (0 for an episode's first experience) and
  ``episode_end_index`` (the ``index_in_episode`` of the episode's last experience; for the
  running episode, of its newest one so far) into the experience's ``info`` dict, in place;
* each sampled experience at step ``t`` of its episode is relabelled with probability
  ``hindsight_prob``: a future experience is drawn uniformly from the steps ``[t,
  episode_end_index]`` of the same episode (the running episode included, with the steps
  appended so far), its ``s_next[2]`` (achieved goal) becomes the goal ``g``, and the
  experience comes back as ``((s[0], g, s[2]), a, reward_function(s_next[2], g, info),
  non_terminal, (s_next[0], g, s_next[2]), info)``, the reward exactly as ``reward_function``
  returns it.

Episode bookkeeping is the front-end's own (one start id per experience and one end id per
finished episode, in rings aligned with the store's ids), so a relabelling never reads a goal
from another episode, whatever the ``info`` dicts hold.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlreplay.compat.nnabla_rl._codec import is_timelimit
from rlreplay.compat.nnabla_rl.replay_buffer import (
    Experience,
    Indices,
    ReplayBuffer,
    as_indices,
)

__all__ = ["HindsightReplayBuffer"]

Array = np.ndarray[Any, Any]
RewardFunction = Callable[[Array, Array, dict[str, Any]], Any]

#: Ring room of an unbounded buffer's episode bookkeeping before its first doubling.
_INITIAL_ROOM = 1024


class _EpisodeIds:
    """Per stored experience id: the id of its episode's first and last experience.

    A ring of ``room`` slots (``id % room``) for a bounded buffer; an unbounded one doubles
    its room as it fills. ``end == -1`` marks the running episode (its end is the newest id).
    """

    def __init__(self, capacity: int | None) -> None:
        self._bounded = capacity is not None
        room = max(1, capacity) if capacity is not None else _INITIAL_ROOM
        self.start = np.zeros(room, np.int64)
        self.end = np.full(room, -1, np.int64)

    def put(self, i: int, start: int) -> None:
        room = self.start.shape[0]
        if not self._bounded and i >= room:
            grown = 2 * room
            while grown <= i:
                grown *= 2
            self.start = np.concatenate([self.start, np.zeros(grown - room, np.int64)])
            self.end = np.concatenate([self.end, np.full(grown - room, -1, np.int64)])
            room = grown
        self.start[i % room] = start
        self.end[i % room] = -1

    def close(self, first: int, last: int) -> None:
        """The episode of ids ``[first, last]`` (those still stored) ended at ``last``."""
        room = self.start.shape[0]
        ids = np.arange(max(first, last - room + 1), last + 1)
        self.end[ids % room] = last

    def bounds(self, ids: Array, newest: int) -> tuple[Array, Array]:
        """First and last id of the episode of each stored id (the running one: ``newest``)."""
        slots = ids % self.start.shape[0]
        end = self.end[slots]
        return self.start[slots], np.where(end < 0, newest, end)


class HindsightReplayBuffer(ReplayBuffer):
    """nnabla-rl's hindsight experience replay (HER, "future" goals).

    Sampling is the base buffer's (distinct indices, uniformly); each returned experience is
    then relabelled with probability ``hindsight_prob``::

        g        = s_next[2] of the experience at a step drawn uniformly from [t, episode end]
        s'       = (s[0], g, s[2]);   s_next' = (s_next[0], g, s_next[2])
        r'       = reward_function(s_next[2], g, info)
        experience' = (s', a, r', non_terminal, s_next', info)

    An episode ends at ``non_terminal == 0`` (as in nnabla-rl) or at a true
    ``info["TimeLimit.truncated"]``; the running episode's end is its newest experience. The
    goal always comes from the same episode. Stored data is never changed (only the
    ``index_in_episode`` and ``episode_end_index`` keys of the appended ``info`` dicts, as
    nnabla-rl writes them). Random numbers come from nnabla-rl's global ``random.drng``
    unless ``seed`` is given.

    Cost: :meth:`append` O(1) amortised (plus an O(episode length) pass when an episode
    ends); a sample of ``B`` is the base buffer's plus one ``reward_function`` call per
    relabelled experience.

    Args:
        reward_function: ``(achieved_goal, desired_goal, info) -> reward`` for one experience
            (``info`` is the experience's own ``info`` dict).
        hindsight_prob: Probability of relabelling a sampled experience (not checked, as in
            nnabla-rl: ``>= 1`` always relabels, ``<= 0`` never).
        capacity: Most experiences kept, or None for no limit.
        seed: Seed of a random generator of the buffer's own (an rlreplay addition).

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
        >>> buffer[1][5]
        {'index_in_episode': 1, 'episode_end_index': array([4])}
    """

    def __init__(
        self,
        reward_function: RewardFunction,
        hindsight_prob: float = 0.8,
        capacity: int | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        super().__init__(capacity=capacity, seed=seed)
        self._reward_function = reward_function
        self._hindsight_prob = hindsight_prob
        self._episodes = _EpisodeIds(self._capacity)
        self._episode_start = 0  # id of the running episode's first experience
        self._end_index = np.array([0])  # the running episode's shared episode_end_index

    def append(self, experience: Experience) -> None:
        """Add new experience to the replay buffer.

        Writes ``index_in_episode`` and ``episode_end_index`` into the experience's ``info``
        (its element 5, whatever follows it), as nnabla-rl does.

        Raises:
            RuntimeError: The state is not a tuple ``(observation, desired_goal,
                achieved_goal)`` (as nnabla-rl).
            ValueError: ``info`` is not a dict (as nnabla-rl).
        """
        s = experience[0]
        if not isinstance(s, tuple):
            raise RuntimeError("Hindsight replay only supports tuple observation environment")
        if not len(s) == 3:
            raise RuntimeError(
                "Observation is not a tuple of 3 elements: (observation, desired_goal, "
                "achieved_goal)"
            )
        info = experience[5]  # nnabla-rl's index, whatever follows it
        if not isinstance(info, dict):
            raise ValueError(f"info: expected a dict, got {type(info).__name__}")
        non_terminal = experience[3]
        i = self._next_id
        index_in_episode = i - self._episode_start
        # nnabla-rl shares one np.array([end]) among an episode's infos, updated in place
        self._end_index[0] = index_in_episode
        info.update({"index_in_episode": index_in_episode, "episode_end_index": self._end_index})
        super().append(experience)  # raises before any bookkeeping if nothing is stored
        self._episodes.put(i, self._episode_start)
        if non_terminal == 0 or is_timelimit(info):
            self._episodes.close(self._episode_start, i)
            self._end_index = np.array([0])
            self._episode_start = i + 1

    def sample_indices(
        self, indices: Indices, num_steps: int = 1
    ) -> tuple[list[Experience] | tuple[list[Experience], ...], dict[str, Any]]:
        """Sample experiences for given indices, each relabelled with ``hindsight_prob``.

        Raises:
            ValueError: If indices are empty (``num_steps <= 0`` reads one step, as nnabla-rl).
            NotImplementedError: ``num_steps > 1`` (n-step learning is not supported, as in
                nnabla-rl).
            KeyError: Bounded buffer: an index outside ``[0, len)``.
            IndexError: Unbounded buffer: an index outside ``[-len, len)``.
        """
        # nnabla-rl's order: n-step first, then empty indices; num_steps <= 0 reads one step
        if num_steps > 1:
            raise NotImplementedError("HindsightReplayBuffer: n-step learning is not supported")
        idx = as_indices(indices)
        n = len(self)
        bad = (idx < (0 if self._bounded() else -n)) | (idx >= n)
        if bad.any():
            # nnabla-rl draws drng.random() for an index before it reads it: the indices
            # before the first bad one are drawn (and relabelled) as usual, then the bad
            # one's draw is made and its read raises
            j = int(np.flatnonzero(bad)[0])
            if j:
                self.sample_indices(idx[:j])
            self._rng.random()
            self._positions(idx[j : j + 1])
        ids = self._first_id() + self._positions(idx)
        experiences = self._experiences(ids)
        # nnabla-rl's draws, per index in order: drng.random(), then (relabelled when it is
        # <= hindsight_prob) drng.integers(t, end + 1): interleaved, so drawn one by one
        rng, prob = self._rng, self._hindsight_prob
        _, last = self._episodes.bounds(ids, self._next_id - 1)
        relabelled: list[int] = []
        future: list[int] = []
        for j, (t, end) in enumerate(zip(ids.tolist(), last.tolist(), strict=True)):
            if not rng.random() > prob:
                relabelled.append(j)
                future.append(int(rng.integers(t, end + 1)))
                if len(experiences[j]) != 6:  # nnabla-rl unpacks six, after this draw
                    raise ValueError(
                        f"too many values to unpack (expected 6, got {len(experiences[j])})"
                    )
        if relabelled:
            goals = self._experiences(np.array(future, np.int64))
            first = self._first_id()
            for j, g, f in zip(relabelled, goals, future, strict=True):
                experiences[j] = self._hindsight(experiences[j], g[4][2])
                info = experiences[j][-1]
                if isinstance(info, dict):  # nnabla-rl notes the goal's position ("for test")
                    info["future_index"] = np.int64(f - first)
        return experiences, {"weights": np.ones((idx.shape[0], 1))}

    def _hindsight(self, experience: Experience, goal: Any) -> Experience:
        """The experience with desired goal ``goal`` and its reward for that goal."""
        s, a, _, non_terminal, s_next, info = experience
        reward = self._reward_function(s_next[2], goal, info)
        return ((s[0], goal, s[2]), a, reward, non_terminal, (s_next[0], goal, s_next[2]), info)
