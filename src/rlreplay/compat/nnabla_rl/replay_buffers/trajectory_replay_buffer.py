"""Stand-in for ``nnabla_rl.replay_buffers.trajectory_replay_buffer`` over the rlreplay core.

A trajectory is one episode of the core: its experiences are stored steps, its end is the
core's episode end (``terminated`` when the last ``non_terminal == 0``, else ``truncated``), and
which trajectory an experience belongs to comes from the core's episode index
(:meth:`rlreplay.ReplayBuffer.episode_begin`, :meth:`~rlreplay.ReplayBuffer.steps_to_episode_end`).
The adapter keeps only the lengths of the stored trajectories, oldest first, to number them
and to drop the oldest one (:meth:`rlreplay.ReplayBuffer.dequeue`) past ``num_trajectories``.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlreplay.compat.nnabla_rl.replay_buffer import (
    Experience,
    Indices,
    ReplayBuffer,
    as_indices,
    check_capacity,
    check_count,
    distinct_draw,
)
from rlreplay.sampling.uniform import draw_uniform

__all__ = ["Trajectory", "TrajectoryReplayBuffer"]

Array = np.ndarray[Any, Any]
#: A trajectory: its experiences in time order.
Trajectory = tuple[Experience, ...]


class TrajectoryReplayBuffer(ReplayBuffer):
    """TrajectoryReplayBuffer.

    Enables appending/sampling not just an experience from the buffer but also a trajectory.
    In order to append/sample trajectory, the environment must be finite horizon setting.

    Experience ``i`` is the ``i``-th experience of the stored trajectories laid end to end
    (index 0: the first experience of the oldest trajectory). :meth:`sample` and
    :meth:`sample_indices` work on experiences exactly as the base buffer's do;
    :meth:`sample_trajectories` draws whole trajectories, :meth:`sample_trajectories_portion`
    and :meth:`sample_indices_portion` windows of ``portion_length`` experiences inside one
    trajectory.

    Invariants: the core's stored steps are the stored trajectories, oldest first, followed by
    the steps of a trajectory still being appended with :meth:`append` (not visible until it
    ends); ``len(self)`` is the sum of the stored trajectories' lengths.

    Args:
        num_trajectories: Most trajectories kept (the oldest is dropped), or None for no limit.
        seed: Seed of the random generator (an rlreplay addition).

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.nnabla_rl.replay_buffers import TrajectoryReplayBuffer
        >>> def trajectory(n, start):
        ...     return [(np.full(2, start + t), np.zeros(1), 1.0, float(t < n - 1),
        ...              np.full(2, start + t + 1), {}) for t in range(n)]
        >>> buffer = TrajectoryReplayBuffer(num_trajectories=10, seed=0)
        >>> buffer.append_trajectory(trajectory(3, 0))
        >>> buffer.append_trajectory(trajectory(5, 100))
        >>> len(buffer), buffer.trajectory_num
        (8, 2)
        >>> portions, info = buffer.sample_trajectories_portion(num_samples=2, portion_length=2)
        >>> [len(p) for p in portions]
        [2, 2]
    """

    def __init__(self, num_trajectories: int | None = None, *, seed: int | None = None) -> None:
        super().__init__(capacity=None, seed=seed)
        self._num_trajectories = check_capacity(
            "num_trajectories", num_trajectories, allow_none=True
        )
        self._lengths: deque[int] = deque()  # stored trajectories, oldest first
        self._visible = 0  # sum of self._lengths
        self._running = 0  # core steps of the trajectory still being appended

    # ------------------------------------------------------------------ sizes
    @property
    def capacity(self) -> int | None:
        """Most trajectories kept (``num_trajectories``), as nnabla-rl's property returns."""
        return self._num_trajectories

    @property
    def trajectory_num(self) -> int:
        """Number of stored trajectories."""
        return len(self._lengths)

    def __len__(self) -> int:
        return self._visible

    def _core_visible(self) -> int:
        return self._visible

    def _first_id(self) -> int:
        # The oldest stored step is the first step of the oldest trajectory.
        return self._next_id - (0 if self._core is None else len(self._core))

    # ------------------------------------------------------------------ writing
    def append(self, experience: Experience) -> None:
        """Add one experience to the trajectory being built.

        The trajectory ends (and becomes visible) with an experience whose ``non_terminal``
        is 0 or whose ``info["TimeLimit.truncated"]`` is true, or when the next experience's
        ``s`` differs from its ``s_next``. nnabla-rl raises ``NotImplementedError`` here.
        """
        super().append(experience)

    def append_trajectory(self, trajectory: Sequence[Experience]) -> None:
        """Add one trajectory (a sequence of experiences in time order).

        Its last experience ends it (terminated if its ``non_terminal`` is 0, else
        truncated). A trajectory still being built with :meth:`append` ends first.

        Raises:
            ValueError: An empty trajectory, an experience other than the last one with
                ``non_terminal == 0``, or an ``s`` that differs from the previous experience's
                ``s_next`` (a trajectory is one episode: its observations are stored once).
            As :meth:`append` for a malformed experience; nothing is stored then.
        """
        experiences = list(trajectory)
        if not experiences:
            raise ValueError("trajectory: expected at least one experience, got none")
        rows = [self._encode(e) for e in experiences]
        for i in range(len(rows) - 1):
            if rows[i].terminal:
                raise ValueError(
                    f"trajectory: experience {i} has non_terminal == 0 but is not the last one"
                )
            if not self._continues(rows[i], rows[i + 1]):
                raise ValueError(
                    f"trajectory: the s of experience {i + 1} differs from the s_next of "
                    f"experience {i}; split it into trajectories where the episode restarts"
                )
        self._release_held(False)
        for row in rows[:-1]:
            self._write(row, None)
        self._write(rows[-1], "terminated" if rows[-1].terminal else "truncated")

    def append_all(self, experiences: Sequence[Experience]) -> None:
        """Add experiences one by one (as :meth:`append`)."""
        super().append_all(experiences)

    def _on_written(self, ended: bool) -> None:
        self._running += 1
        if not ended:
            return
        self._lengths.append(self._running)
        self._visible += self._running
        self._running = 0
        if self._num_trajectories is not None:
            while len(self._lengths) > self._num_trajectories:
                n = self._lengths.popleft()
                self._visible -= n
                assert self._core is not None
                self._core.dequeue(n)

    # ------------------------------------------------------------------ trajectories
    def _starts(self) -> Array:
        """Core id of the first step of every stored trajectory."""
        lengths = np.fromiter(self._lengths, np.int64, len(self._lengths))
        return self._first_id() + np.cumsum(lengths) - lengths

    def _runs(self, starts: Array, lengths: Array) -> list[Trajectory]:
        """The experiences of runs of consecutive steps (one core gather for all)."""
        ends = np.cumsum(lengths)
        ids = np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]))
        flat = self._experiences(ids)
        return [
            tuple(flat[e - n : e]) for e, n in zip(ends.tolist(), lengths.tolist(), strict=True)
        ]

    def get_trajectory(self, trajectory_index: int) -> Trajectory:
        """The stored trajectory number ``trajectory_index`` (0: the oldest).

        Raises:
            IndexError: No such trajectory.
        """
        i = operator.index(trajectory_index)
        n = self.trajectory_num
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"trajectory_index {i} is out of range for {n} trajectories")
        return self._runs(self._starts()[j : j + 1], np.array([self._lengths[j]]))[0]

    def sample_trajectories(
        self, num_samples: int = 1
    ) -> tuple[Trajectory | tuple[Trajectory, ...], dict[str, Any]]:
        """Randomly sample num_samples distinct trajectories from the replay buffer.

        Returns:
            ``(trajectories, info)``: one trajectory when ``num_samples == 1``, else a tuple
            of them; ``info["weights"]`` is ``np.ones((num_samples, 1))``.

        Raises:
            ValueError: num_samples exceeds the maximum possible trajectories or is 0 or
                negative.
        """
        num_samples = check_count("num_samples", num_samples)
        if num_samples > self.trajectory_num:
            raise ValueError(
                f"num_samples: {num_samples} is greater than the number of trajectories saved "
                f"in buffer: {self.trajectory_num}"
            )
        return self.sample_indices_trajectory(
            distinct_draw(self.trajectory_num, num_samples, self._rng)
        )

    def sample_indices_trajectory(
        self, indices: Indices
    ) -> tuple[Trajectory | tuple[Trajectory, ...], dict[str, Any]]:
        """The trajectories with the given numbers (one trajectory if one index is given).

        Raises:
            ValueError: If indices are empty.
            IndexError: No such trajectory.
        """
        idx = as_indices(indices)
        n = self.trajectory_num
        idx = np.where(idx < 0, idx + n, idx)
        if ((idx < 0) | (idx >= n)).any():
            raise IndexError(f"trajectory indices {idx.tolist()[:5]} out of range for {n}")
        lengths = np.fromiter(self._lengths, np.int64, n)
        runs = self._runs(self._starts()[idx], lengths[idx])
        weights = np.ones((idx.shape[0], 1))
        return (runs[0] if len(runs) == 1 else tuple(runs)), {"weights": weights}

    def _episodes_of(self, ids: Array) -> tuple[Array, Array]:
        """``(first id, length)`` of the trajectory (core episode) holding each id."""
        assert self._core is not None
        start = self._core.episode_begin(ids)
        length = ids - start + self._core.steps_to_episode_end(ids) + 1
        return start, length

    def sample_trajectories_portion(
        self, num_samples: int = 1, portion_length: int = 1
    ) -> tuple[tuple[Trajectory, ...], dict[str, Any]]:
        """Randomly sample num_samples trajectories with length portion_length.

        First, a trajectory is sampled with probability proportional to its length (it is
        the trajectory of an experience drawn uniformly). Then, a random initial index between
        0 and ``len(trajectory) - portion_length`` is drawn uniformly, and the
        ``portion_length`` experiences from it are returned.

        Returns:
            ``(trajectories, info)``: a tuple of ``num_samples`` portions (tuples of
            experiences); ``info["weights"]`` is ``np.ones((num_samples, 1))``.

        Raises:
            ValueError: num_samples exceeds the maximum possible trajectories, or num_samples
                or portion_length is 0 or negative.
            RuntimeError: Trajectory's length is below portion_length.
        """
        num_samples = check_count("num_samples", num_samples)
        portion_length = check_count("portion_length", portion_length)
        if num_samples > self.trajectory_num:
            raise ValueError(
                f"num_samples: {num_samples} is greater than the number of trajectories saved "
                f"in buffer: {self.trajectory_num}"
            )
        sizes = np.array([len(self)], np.int64)
        _, pos = draw_uniform(np.zeros(1, np.int64), sizes, num_samples, self._rng)
        start, length = self._episodes_of(self._first_id() + pos)
        short = length < portion_length
        if short.any():
            raise RuntimeError(
                f"Trajectory length is shorter than portion length: {portion_length} "
                f"(a trajectory of {int(length[short][0])} experiences was drawn)"
            )
        offset = self._rng.integers(0, length - portion_length + 1)
        return self._portions(start + offset, portion_length)

    def sample_indices_portion(
        self, indices: Indices, portion_length: int = 1
    ) -> tuple[tuple[Trajectory, ...], dict[str, Any]]:
        """Sample the trajectory portions that start at the given experience indices.

        The portion of index ``i`` holds the experiences ``i .. i + portion_length - 1`` of the
        trajectory holding experience ``i``; if that runs past the trajectory's end, the
        portion is its last ``portion_length`` experiences instead.

        Raises:
            ValueError: If indices are empty or portion_length is 0 or negative.
            IndexError: An index beyond the stored experiences.
            RuntimeError: Trajectory's length is below portion_length.
        """
        idx = as_indices(indices)
        portion_length = check_count("portion_length", portion_length)
        ids = self._first_id() + self._check_range(idx, 1)
        start, length = self._episodes_of(ids)
        if (length < portion_length).any():
            raise RuntimeError(
                f"Trajectory length is shorter than portion length: {portion_length}"
            )
        return self._portions(np.minimum(ids, start + length - portion_length), portion_length)

    def _portions(
        self, starts: Array, portion_length: int
    ) -> tuple[tuple[Trajectory, ...], dict[str, Any]]:
        runs = self._runs(starts, np.full(starts.shape[0], portion_length, np.int64))
        return tuple(runs), {"weights": np.ones((starts.shape[0], 1))}
