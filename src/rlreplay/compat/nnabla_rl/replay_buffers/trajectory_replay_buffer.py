"""Stand-in for ``nnabla_rl.replay_buffers.trajectory_replay_buffer`` over the rlreplay core.

A trajectory is whatever sequence of experiences the caller hands to
:meth:`~TrajectoryReplayBuffer.append_trajectory`: it is stored as given, whatever its
``non_terminal`` flags and whether each ``s`` equals the previous ``s_next``, and sampling by
trajectory or by portion uses exactly that grouping. The adapter keeps the lengths of the
stored trajectories, oldest first, to number them, to find the trajectory of an experience and
to drop the oldest one (:meth:`rlreplay.ReplayBuffer.dequeue`) past ``num_trajectories``.

In the columnar store the experiences are core steps; the core's episodes only serve to store
each observation once, so a trajectory is one core episode or several (a new one where ``s``
differs from the previous ``s_next`` or after ``non_terminal == 0``). Experiences that do not
fit the columnar layout move the buffer to its object store, as the base buffer does.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlreplay.compat.nnabla_rl._checks import (
    ExperienceRangeError,
    PositionError,
    PositionKeyError,
    ZeroCapacityError,
)
from rlreplay.compat.nnabla_rl._codec import Row
from rlreplay.compat.nnabla_rl.replay_buffer import (
    Experience,
    Indices,
    ReplayBuffer,
    as_indices,
    check_capacity,
)

__all__ = ["Trajectory", "TrajectoryReplayBuffer"]

Array = np.ndarray[Any, Any]
#: A trajectory: its experiences in time order (a list if it was appended as a list).
Trajectory = Sequence[Experience]


class TrajectoryReplayBuffer(ReplayBuffer):
    """TrajectoryReplayBuffer.

    Enables appending/sampling not just an experience from the buffer but also a trajectory.
    In order to append/sample trajectory, the environment must be finite horizon setting.

    Experience ``i`` is the ``i``-th experience of the stored trajectories laid end to end
    (index 0: the first experience of the oldest trajectory). :meth:`sample` and
    :meth:`sample_indices` work on experiences exactly as the base buffer's do;
    :meth:`sample_trajectories` draws whole trajectories, :meth:`sample_trajectories_portion`
    and :meth:`sample_indices_portion` windows of ``portion_length`` experiences inside one
    trajectory. Trajectories come back as lists if they were appended as lists, else as
    tuples.

    Invariants: the store's experiences are the stored trajectories, oldest first, followed by
    the steps of a trajectory still being built with :meth:`append` (not visible until it
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

    #: Whether a trajectory in the object store comes back as the very object appended.
    _keep_originals = True
    #: Whether portions are lists whatever the trajectory's type (the Atari buffer's).
    _portions_are_lists = False

    def __init__(self, num_trajectories: int | None = None, *, seed: int | None = None) -> None:
        super().__init__(capacity=None, seed=seed)
        self._num_trajectories = check_capacity(
            "num_trajectories", num_trajectories, allow_none=True
        )
        self._lengths: deque[int] = deque()  # stored trajectories, oldest first
        self._as_list: deque[bool] = deque()  # whether each was appended as a list
        # the sequence object appended, for a trajectory stored in the object store (nnabla-rl
        # gives that very object back); None for one in the columnar store (copied, fix 1)
        self._originals: deque[Any] = deque()
        self._visible = 0  # sum of self._lengths
        self._running = 0  # steps of the trajectory still being built with append
        self._grouping = False  # append_trajectory is writing: it closes the trajectory

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

    def _stored_count(self) -> int:
        if self._objects is not None:
            return len(self._objects)
        return self._core_size()

    def _object_capacity(self) -> int | None:
        return None  # whole trajectories are dropped by _close_trajectory

    def _bounded(self) -> bool:
        return self._num_trajectories is not None

    # ------------------------------------------------------------------ writing
    def append(self, experience: Experience) -> None:
        """Add one experience to the trajectory being built (an rlreplay addition).

        The trajectory ends (and becomes visible) with an experience whose ``non_terminal``
        is 0 or whose ``info["TimeLimit.truncated"]`` is true, or when the next experience's
        ``s`` differs from its ``s_next``.

        Raises:
            NotImplementedError: As nnabla-rl, for an experience that does not fit the
                columnar layout or once the buffer uses its object store (use
                :meth:`append_trajectory`).
        """
        row = self._encode(experience)
        if row is None:
            raise NotImplementedError(
                "TrajectoryReplayBuffer.append: this experience can only be stored with "
                "append_trajectory (as in nnabla-rl)"
            )
        self._append_row(row)

    def append_trajectory(self, trajectory: Sequence[Experience]) -> None:
        """Add one trajectory: a sequence of experiences, stored and grouped as given.

        A trajectory still being built with :meth:`append` ends first.

        Raises:
            ZeroDivisionError: ``num_trajectories`` is 0 (as nnabla-rl's ring).
        """
        if self._num_trajectories == 0:
            raise ZeroCapacityError(
                "append_trajectory: num_trajectories is 0 (nnabla-rl's ring divides by it)"
            )
        experiences = list(trajectory)
        as_list = isinstance(trajectory, list)
        if self._newest is not None:
            self._cut()  # closes the trajectory built with append
        rows: list[Row] = []
        fits = True
        for e in experiences:
            row = self._encode(e)
            if row is None:  # does not fit the columnar layout: the object store takes all
                fits = False
                break
            rows.append(row)
        self._grouping = True
        try:
            if not fits:
                for e in experiences:
                    self._append_object(e)
            else:
                for i, row in enumerate(rows):
                    end = self._end_of(row)
                    last = i == len(rows) - 1
                    if end is None and (last or not self._continues(row, rows[i + 1])):
                        end = "truncated"  # a new core episode where the observations jump
                    self._write(row, end)
        finally:
            self._grouping = False
        original = trajectory if not fits and self._keep_originals else None
        self._close_trajectory(len(experiences), as_list, original)

    def append_all(self, experiences: Sequence[Experience]) -> None:
        """Add experiences one by one (as :meth:`append`)."""
        super().append_all(experiences)

    def _on_written(self, ended: bool) -> None:
        self._running += 1
        if ended and not self._grouping:
            self._close_trajectory(self._running, False)

    def _on_cut(self) -> None:
        if not self._grouping and self._running:
            self._close_trajectory(self._running, False)

    def _append_object(self, experience: Any) -> None:
        super()._append_object(experience)
        self._running += 1

    def _close_trajectory(self, n: int, as_list: bool, original: Any = None) -> None:
        """The last ``n`` stored steps become the newest trajectory; drop the oldest ones."""
        self._lengths.append(n)
        self._as_list.append(as_list)
        self._originals.append(original)
        self._visible += n
        self._running = 0
        if self._num_trajectories is None:
            return
        while len(self._lengths) > self._num_trajectories:
            m = self._lengths.popleft()
            self._as_list.popleft()
            self._originals.popleft()
            self._visible -= m
            if m and self._objects is not None:
                self._objects.drop_oldest(m)
            elif m:
                assert self._core is not None
                self._core.dequeue(m)
                self._core_changed()

    # ------------------------------------------------------------------ experiences
    def __getitem__(self, item: int) -> Experience:
        pos = self._positions(np.array([operator.index(item)], np.int64))
        return self._experiences(self._first_id() + pos)[0]

    def _positions(self, pos: Array) -> Array:
        """Experience positions as nnabla-rl's ``_get_experience`` resolves them.

        nnabla-rl walks the trajectories' cumulative lengths (``[0]`` before the first
        trajectory): a position past the end raises ``ValueError``, also when no trajectory is
        stored; a negative one falls in the first trajectory and indexes it from its end
        (``trajectory[index]``: ``IndexError`` below ``-len(first trajectory)``), or, with no
        trajectory stored, reads trajectory 0 (``KeyError`` of the ring, ``IndexError`` of the
        deque).
        """
        n = len(self)
        first = self._lengths[0] if self._lengths else 0
        out = np.where(pos < 0, pos + first, pos)
        bad = (out < 0) | (out >= n)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])  # nnabla-rl stops at the first bad one, in order
            p = int(pos[j])
            if not self._lengths and p < 0:
                error: type[Exception] = PositionKeyError if self._bounded() else PositionError
                raise error(f"trajectory index 0 is out of range for 0 trajectories (index {p})")
            if p >= 0:
                raise ExperienceRangeError(
                    f"index {p} is out of range (the buffer holds {n} experiences)"
                )
            raise PositionError(
                f"index {p} is out of range for the first trajectory ({first} experiences): "
                "a negative index counts from its end, as in nnabla-rl"
            )
        return out

    # ------------------------------------------------------------------ trajectories
    def _starts(self) -> Array:
        """Core id of the first step of every stored trajectory."""
        lengths = np.fromiter(self._lengths, np.int64, len(self._lengths))
        return self._first_id() + np.cumsum(lengths) - lengths

    def _runs(self, starts: Array, lengths: Array, as_list: Sequence[bool]) -> list[Trajectory]:
        """The experiences of runs of consecutive steps (one gather for all), as given."""
        if lengths.size == 0:
            return []
        ends = np.cumsum(lengths)
        ids = np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]))
        flat = self._experiences(ids)
        return [
            (list if lst else tuple)(flat[e - n : e])
            for e, n, lst in zip(ends.tolist(), lengths.tolist(), as_list, strict=True)
        ]

    def _trajectory_numbers(self, idx: Array) -> Array:
        """Trajectory numbers checked as nnabla-rl's ring (``KeyError``) or deque does."""
        n = self.trajectory_num
        if not self._bounded():
            idx = np.where(idx < 0, idx + n, idx)
        bad = (idx < 0) | (idx >= n)
        if bad.any():
            error = PositionKeyError if self._bounded() else PositionError
            raise error(f"trajectory index {int(idx[bad][0])} is out of range for {n} trajectories")
        return idx

    def _trajectories(self, idx: Array) -> list[Trajectory]:
        lengths = np.fromiter(self._lengths, np.int64, self.trajectory_num)
        as_list = [self._as_list[i] for i in idx.tolist()]
        runs = self._runs(self._starts()[idx], lengths[idx], as_list)
        for j, i in enumerate(idx.tolist()):
            if self._originals[i] is not None:  # the very object appended, as nnabla-rl
                runs[j] = self._originals[i]
        return runs

    def get_trajectory(self, trajectory_index: int) -> Trajectory:
        """The stored trajectory number ``trajectory_index`` (0: the oldest).

        Raises:
            KeyError: No such trajectory (``IndexError`` without ``num_trajectories``).
        """
        i = np.array([operator.index(trajectory_index)], np.int64)
        return self._trajectories(self._trajectory_numbers(i))[0]

    def sample_trajectories(
        self, num_samples: int = 1
    ) -> tuple[Trajectory | tuple[Trajectory, ...], dict[str, Any]]:
        """Randomly sample num_samples distinct trajectories from the replay buffer.

        nnabla-rl 0.16.0's steps: ``num_samples > trajectory_num`` raises, then
        :meth:`_random_trajectory_indices` draws and :meth:`sample_indices_trajectory` reads.

        Returns:
            ``(trajectories, info)``: one trajectory when ``num_samples == 1``, else a tuple
            of them; ``info["weights"]`` is ``np.ones((num_samples, 1))``.

        Raises:
            ValueError: num_samples exceeds the maximum possible trajectories, is 0
                ("Indices are empty") or negative (NumPy's draw).
            TypeError: A num_samples NumPy's draw does not take as a size.
        """
        max_index = self.trajectory_num
        if num_samples > max_index:
            raise ValueError(
                f"num_samples: {num_samples} is greater than the number of trajectories saved "
                f"in buffer: {max_index}"
            )
        indices = self._random_trajectory_indices(num_samples=num_samples, max_index=max_index)
        return self.sample_indices_trajectory(indices)

    def _random_trajectory_indices(self, num_samples: int, max_index: int | None = None) -> Array:
        """nnabla-rl's ``drng.choice(max_index, size=num_samples, replace=False)``."""
        if max_index is None:
            max_index = self.trajectory_num
        out: Array = self._rng.choice(max_index, size=num_samples, replace=False)
        return out

    def sample_indices_trajectory(
        self, indices: Indices
    ) -> tuple[Trajectory | tuple[Trajectory, ...], dict[str, Any]]:
        """The trajectories with the given numbers (one trajectory if one index is given).

        Raises:
            ValueError: If indices are empty.
            KeyError: No such trajectory (``IndexError`` without ``num_trajectories``).
        """
        idx = self._trajectory_numbers(as_indices(indices))
        runs = self._trajectories(idx)
        weights = np.ones((idx.shape[0], 1))
        return (runs[0] if len(runs) == 1 else tuple(runs)), {"weights": weights}

    def sample_trajectories_portion(
        self, num_samples: int = 1, portion_length: int = 1
    ) -> tuple[tuple[Trajectory, ...], dict[str, Any]]:
        """Randomly sample num_samples trajectories with length portion_length.

        First, a trajectory is sampled with probability proportional to its length (with
        replacement, so ``num_samples`` may exceed ``trajectory_num``). Then, a random initial
        index ``i`` between 0 and ``len(trajectory) - portion_length`` is drawn uniformly, and
        ``trajectory[i : i + portion_length]`` is returned. Both draws are nnabla-rl 0.16.0's,
        in its order, so the results are its results for any arguments it accepts:
        ``num_samples == 0`` gives ``()``; ``portion_length == 0`` gives empty portions, and a
        negative one Python's slice ``trajectory[i : i + portion_length]``.

        Returns:
            ``(trajectories, info)``: a tuple of ``num_samples`` portions (slices of the
            trajectories); ``info["weights"]`` is ``np.ones((num_samples, 1))``.

        Raises:
            ValueError: A negative num_samples, or sampling from an empty buffer (NumPy's draw).
            RuntimeError: Trajectory's length is below portion_length.
        """
        rng, lengths = self._rng, self._lengths_array()
        p = lengths / np.sum(lengths)
        chosen = rng.choice(self.trajectory_num, size=num_samples, replace=True, p=p)
        owners: list[int] = []
        offsets: list[int] = []
        for k in np.asarray(chosen).tolist():
            length = int(lengths[k])
            max_index = length - portion_length
            if max_index < 0:
                raise RuntimeError(
                    f"Trajectory length is shorter than portion length: {portion_length} "
                    f"(a trajectory of {length} experiences was drawn)"
                )
            owners.append(k)
            offsets.append(int(rng.choice(max_index + 1, replace=False)))
        return self._portions(owners, offsets, portion_length)

    def sample_indices_portion(
        self, indices: Indices, portion_length: int = 1
    ) -> tuple[tuple[Trajectory, ...], dict[str, Any]]:
        """Sample the trajectory portions that start at the given experience indices.

        The portion of index ``i`` holds the experiences ``i .. i + portion_length - 1`` of the
        trajectory holding experience ``i``; if that runs past the trajectory's end, the
        portion is its last ``portion_length`` experiences instead. As in nnabla-rl, a
        negative index belongs to the first trajectory and slices it from that (negative)
        offset: ``trajectory[i : i + portion_length]``.

        Raises:
            ValueError: If indices are empty or portion_length is 0 or negative.
            IndexError: An index beyond the stored experiences.
            RuntimeError: Trajectory's length is below portion_length.
        """
        idx = as_indices(indices)
        if portion_length < 1:
            raise ValueError(f"portion_length: {portion_length} should be greater than 0!")
        lengths = self._lengths_array()
        ends = np.cumsum(lengths)
        owners: list[int] = []
        offsets: list[int] = []
        for index in idx.tolist():  # nnabla-rl's order of checks, index by index
            k = int(np.searchsorted(ends, index, side="right"))  # first trajectory ending after
            if k >= lengths.shape[0]:
                # no trajectory stored: nnabla-rl's cumsum is [0], so a negative index reads
                # trajectory 0 (the ring's KeyError); otherwise argwhere finds none (IndexError)
                error = PositionKeyError if index < 0 and self._bounded() else PositionError
                raise error(
                    f"index {index} is out of range for a buffer of {len(self)} experiences"
                )
            length = int(lengths[k])
            if length < portion_length:
                raise RuntimeError(
                    f"Trajectory length is shorter than portion length: {portion_length}"
                )
            offset = index - int(ends[k - 1]) if k > 0 else index
            owners.append(k)
            offsets.append(min(offset, length - portion_length))
        return self._portions(owners, offsets, portion_length)

    def _portions(
        self, owners: list[int], offsets: list[int], portion_length: int
    ) -> tuple[tuple[Trajectory, ...], dict[str, Any]]:
        """``trajectory[a : a + portion_length]`` of trajectory ``k`` for each ``(k, a)``."""
        lengths = self._lengths_array()
        starts = self._starts()
        run_starts: list[int] = []
        run_lengths: list[int] = []
        for k, a in zip(owners, offsets, strict=True):
            r = self._portion_range(int(lengths[k]), a, portion_length)
            run_starts.append(int(starts[k]) + r.start)
            run_lengths.append(len(r))
        # a slice of a list is a list (nnabla-rl's lazy Atari trajectory: always a list)
        as_list = [self._portions_are_lists or self._as_list[k] for k in owners]
        runs = self._runs(np.array(run_starts, np.int64), np.array(run_lengths, np.int64), as_list)
        for j, (k, a) in enumerate(zip(owners, offsets, strict=True)):
            original = self._originals[k]
            if original is not None:  # nnabla-rl slices the appended object
                runs[j] = original[a : a + portion_length]
        return tuple(runs), {"weights": np.ones((len(owners), 1))}

    def _portion_range(self, length: int, start: int, portion_length: int) -> range:
        """Positions of ``trajectory[start : start + portion_length]`` (Python's slice)."""
        return range(length)[start : start + portion_length]

    def _lengths_array(self) -> Array:
        return np.fromiter(self._lengths, np.int64, self.trajectory_num)
