"""Stand-in for ``nnabla_rl.replay_buffers.memory_efficient_atari_buffer`` over the rlreplay core.

An Atari state is a stack of ``stacked_frames`` grayscale frames normalised to ``[0, 1]``. As
in nnabla-rl, only the newest frame of each state is stored, as ``uint8``
(nnabla-rl's ``(x * 255.0).astype(np.uint8)``, NumPy's unsafe cast, so fractions truncate),
and the stack is rebuilt at sample time: here by the core's frame stacking
(``frame_stack=stacked_frames``, ``stack_pad="first"``: before an episode's first frame the
stack repeats that frame, which is what a frame-stacking wrapper shows after a reset).
Sampled states are ``float32`` stacks ``frames / 255``, ``s_next`` being ``s`` shifted by one
frame (or ending with the final frame at an episode's end).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from rlreplay import Field
from rlreplay.compat.nnabla_rl._checks import PositionKeyError
from rlreplay.compat.nnabla_rl._codec import (
    Codec,
    Part,
    Row,
    Slot,
    Unfit,
    check_shape,
    is_terminal,
    is_timelimit,
    same,
)
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer, check_capacity, check_count
from rlreplay.compat.nnabla_rl.replay_buffers._atari_frames import (
    atari_frames,
    next_state,
    same_frame,
    stack_state,
)
from rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer import (
    ProportionalPrioritizedReplayBuffer,
    RankBasedPrioritizedReplayBuffer,
)
from rlreplay.compat.nnabla_rl.replay_buffers.trajectory_replay_buffer import (
    TrajectoryReplayBuffer,
)

__all__ = [
    "MemoryEfficientAtariBuffer",
    "MemoryEfficientAtariTrajectoryBuffer",
    "ProportionalPrioritizedAtariBuffer",
    "RankBasedPrioritizedAtariBuffer",
]

Array = np.ndarray[Any, Any]


def _core_frame(what: str, frame: Any, exact: bool) -> Array:
    """A frame from :func:`atari_frames` as the ``uint8`` the core stores (:class:`Unfit` if not).

    0.16.0 assigns ``s``'s frames into a ``uint8`` stack (NumPy's unsafe cast, which ``astype``
    repeats), but reads ``s_next``'s own frame with ``.astype(np.float32)``: for that one
    (``exact``) only values a ``uint8`` holds unchanged fit the core.
    """
    arr = np.asarray(frame)
    if arr.dtype.kind not in "biu":  # floats were quantised to uint8 already
        raise Unfit(f"{what}: frames of dtype {arr.dtype} are kept as objects")
    out = arr.astype(np.uint8)
    if exact and not np.array_equal(out, arr):
        raise Unfit(f"{what}: values outside [0, 255] are kept as objects")
    return out


def _frame_of(value: Array) -> Array:
    """The newest frame of a row's state: the frame, or the last of the newest row's stack."""
    return value[-1] if value.ndim == 3 else value


class _AtariCodec(Codec):
    """Stores 0.16.0's frame of ``s`` (uint8) in ``obs``; states come back as float stacks.

    As nnabla-rl's ring, which keeps ``a`` and ``r`` as the appended objects, ``a``, ``r``,
    ``non_terminal`` and ``info`` go to the side ring untouched (what follows ``info`` is
    dropped, as 0.16.0's ``(s, a, r, non_terminal, s_next, info, reset_flag)`` drops it); the
    core's reward column holds zeros.
    """

    def __init__(self, stacked_frames: int, frame_shape: tuple[int, ...]) -> None:
        frame = Part("obs", Field(frame_shape, np.uint8, observation=True), "array")
        zero = Part("reward", Field((), np.float64), "python", float)
        super().__init__(Slot((frame,), False), Slot((), False), zero, cast=True)
        self.stacked_frames = stacked_frames
        self.stack_shape = (stacked_frames, *frame_shape)

    def encode(self, experience: Any) -> Row:
        s, s_next = atari_frames(experience)  # raises what 0.16.0 raises
        exp = check_shape(experience)  # anything but a tuple: the object store
        if s.shape != self.stack_shape[1:]:
            raise Unfit(f"s: frames of shape {s.shape}, the column's are {self.stack_shape[1:]}")
        obs = (_core_frame("s", s, exact=False),)
        next_obs = (_core_frame("s_next", s_next, exact=True),)
        a, r, non_terminal = exp[1:4]
        terminal, timelimit = is_terminal(non_terminal), is_timelimit(exp[5])
        return Row(obs, next_obs, (), 0.0, terminal, timelimit, (a, r, non_terminal, exp[5]))

    def convert_state(self, what: str, value: Any) -> tuple[Any, ...]:
        raise Unfit(f"{what}: Atari states are converted per experience")

    def step_values(self, row: Row) -> dict[str, Any]:
        return {"obs": _frame_of(row.obs[0]), "reward": 0.0}

    def final_values(self, row: Row) -> dict[str, Any]:
        return {"next_obs": _frame_of(row.next_obs[0])}

    def decode_state(self, batch: Any, prefix: str) -> list[Any]:
        # (B, stacked_frames, 84, 84) uint8 -> float32 / 255, nnabla-rl's _normalize_state
        states = np.asarray(batch[prefix + "obs"]).astype(np.float32)
        states /= np.float32(255.0)
        # the core adds no stack axis for one frame; nnabla-rl's stacks always have it
        states = states.reshape(states.shape[0], *self.stack_shape)
        return list(states)

    def decode(self, batch: Any, sides: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        s = self.decode_state(batch, "")
        s_next = self.decode_state(batch, "next_")
        return [
            (s[i], side[0], side[1], side[2], s_next[i], *side[3:]) for i, side in enumerate(sides)
        ]


def _to_uint8(state: Any) -> Array:
    """A float32 state read back (``frames / 255``) as its ``uint8`` frames."""
    return np.rint(np.asarray(state) * 255.0).astype(np.uint8)


def _ends(non_terminal: Any, info: Any) -> bool:
    """Whether an experience ends its episode (terminal, or truncated: difference 2)."""
    try:
        return is_terminal(non_terminal) or is_timelimit(info)
    except Unfit:
        return bool(0 == non_terminal)  # noqa: SIM300  0.16.0's ``return 0 == non_terminal``


class _AtariObjects(ReplayBuffer):
    """The Atari buffers' fallback: experiences whose frames do not fit the core's column.

    The memory-efficient path keeps one ``uint8`` frame per experience in the core. 0.16.0
    also stores frames of other dtypes as they are (complex, object, ints past 255 in
    ``s_next``, ...) and experiences that are not tuples; such an experience moves the buffer
    to the object store, as the base buffer does (the kept experiences move with it, in
    order). There each experience is stored as 0.16.0 reads it back, its stacks built when it
    is appended from the previous experience's stack (:func:`stack_state`, :func:`next_state`),
    by the same episode rules as the core's.
    """

    _objects_allowed = True
    #: The previous object experience: (its uint8 stack, its s_next frame, whether it ended).
    _obj_prev: tuple[Array, Any, bool] | None = None
    #: Whether the next object experience starts a new stack whatever came before.
    _obj_fresh: bool = False

    def _make_codec(self, experience: Any) -> Codec:
        # Every Atari buffer: one uint8 frame per experience, states rebuilt from
        # ``self._frame_stack`` of them (each subclass sets it in its constructor).
        return _AtariCodec(self._frame_stack, atari_frames(experience)[0].shape)

    def _continues(self, prev: Row, row: Row) -> bool:
        """Whether ``row``'s stored ``uint8`` frame is ``prev``'s ``s_next`` frame."""
        return same((_frame_of(row.obs[0]),), (_frame_of(prev.next_obs[0]),))

    def _write(self, row: Row, end: str | None) -> None:
        """Store a step; the running episode's newest row keeps its whole stacks.

        The core gives back the newest step's ``s_next`` only once its episode ends, so the
        adapter reads the running episode's newest experience from its row: that row gets
        the ``uint8`` stacks of ``s`` and ``s_next``, built from the previous row's stack as
        the core stacks frames (a new episode repeats its first frame).
        """
        prev = self._newest  # the running episode's previous step (None: a new episode)
        stack = stack_state(None if prev is None else prev.obs[0], row.obs[0], self._frame_stack)
        super()._write(row, end)
        if self._newest is row:
            next_stack = np.concatenate((stack[1:], row.next_obs[0][None]), axis=0)
            self._newest = replace(row, obs=(stack,), next_obs=(next_stack,))

    def _previous_stack(self) -> tuple[Array, Any, bool] | None:
        """The stack the next object experience continues (None: it starts an episode)."""
        if self._obj_fresh:
            return None
        if self._objects is None:  # moving from the core: continue its newest experience
            n = len(self)
            if not n:
                return None
            s, _a, _r, non_terminal, s_next, info = self[n - 1][:6]
            to_u8 = _to_uint8
            return to_u8(s), to_u8(s_next[-1]), _ends(non_terminal, info)
        return self._obj_prev

    def _append_object(self, experience: Any) -> None:
        s_frame, next_frame = atari_frames(experience)  # 0.16.0's errors, nothing changed
        _s, a, r, non_terminal, _sn, info, *_ = experience
        prev = self._previous_stack()
        continues = (
            prev is not None
            and not prev[2]
            and np.shape(prev[0])[1:] == np.shape(s_frame)
            and same_frame(prev[1], s_frame)  # stored values, not representations
        )
        stack = stack_state(
            prev[0] if continues and prev is not None else None, s_frame, self._frame_stack
        )
        states = stack.astype(np.float32) / 255.0
        super()._append_object((states, a, r, non_terminal, next_state(states, next_frame), info))
        self._obj_prev = (stack, next_frame, _ends(non_terminal, info))
        self._obj_fresh = False


class MemoryEfficientAtariBuffer(_AtariObjects):
    """Buffer designed to compactly save experiences of Atari environments used in DQN.

    DQN (and other training algorithms) requires large replay buffer when training on Atari
    games. This replay buffer reduces the size of experience by casting the images to uint8
    and removing old frames concatenated to the observation: each experience stores one
    ``uint8`` frame, and ``s``/``s_next`` are rebuilt from the stored frames at sample time
    (the core's frame stacks). Designed for DQN style training on Atari: a state is
    ``stacked_frames`` concatenated grayscale frames normalised between 0 and 1.

    The ``stacked_frames - 1`` frames older than the oldest kept experience are kept too, so
    every kept experience has its whole stack (nnabla-rl's ``sub_buffer``).

    Args:
        capacity: Experiences kept (required, ``>= 1``).
        stacked_frames: Frames per state.
        seed: Seed of the random generator (an rlreplay addition).

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.nnabla_rl.replay_buffers import MemoryEfficientAtariBuffer
        >>> frames = [np.full((84, 84), t, np.uint8) for t in range(6)]
        >>> def stack(t):  # a FrameStack wrapper repeats the first frame after a reset
        ...     return np.stack([frames[max(j, 0)] for j in range(t - 3, t + 1)]) / 255.0
        >>> buffer = MemoryEfficientAtariBuffer(capacity=100)
        >>> for t in range(5):
        ...     buffer.append((stack(t), np.zeros(1), 0.0, float(t < 4), stack(t + 1), {}))
        >>> s, a, r, non_terminal, s_next, info = buffer[1]
        >>> s.dtype, s.shape, (s * 255).round()[:, 0, 0].tolist()
        (dtype('float32'), (4, 84, 84), [0.0, 0.0, 0.0, 1.0])
    """

    def __init__(self, capacity: int, stacked_frames: int = 4, *, seed: int | None = None) -> None:
        super().__init__(capacity=check_capacity("capacity", capacity, allow_none=False), seed=seed)
        self._frame_stack = check_count("stacked_frames", stacked_frames)


class MemoryEfficientAtariTrajectoryBuffer(_AtariObjects, TrajectoryReplayBuffer):
    """A :class:`TrajectoryReplayBuffer` storing Atari states as single ``uint8`` frames.

    Each trajectory's states are rebuilt as stacks of 4 frames (the stack repeats the
    trajectory's first frame before it), as :class:`MemoryEfficientAtariBuffer` does.

    Args:
        num_trajectories: Most trajectories kept, or None for no limit.
        seed: Seed of the random generator (an rlreplay addition).
    """

    _keep_originals = False  # states come back quantised, never as the objects appended
    _portions_are_lists = True  # nnabla-rl's _LazyAtariTrajectory slices into a list

    def __init__(self, num_trajectories: int | None = None, *, seed: int | None = None) -> None:
        super().__init__(num_trajectories, seed=seed)
        self._frame_stack = 4  # nnabla-rl builds MemoryEfficientAtariBuffer(len(trajectory))

    def __getitem__(self, item: int) -> Any:
        # nnabla-rl's _LazyAtariTrajectory takes Python ints only ("Invalid key type" for a
        # NumPy integer that falls in a stored trajectory; past the end, ValueError first)
        if self._lengths and not isinstance(item, int) and operator.index(item) < len(self):
            raise TypeError("Invalid key type")
        return super().__getitem__(item)

    def _positions(self, pos: Array) -> Array:
        """As :class:`TrajectoryReplayBuffer`'s, but a negative position raises ``KeyError``.

        0.16.0 reads a negative position of the first trajectory from that trajectory's own
        ``MemoryEfficientAtariBuffer``, whose ring raises ``KeyError`` for any negative index.
        """
        bad = (pos < 0) | (pos >= len(self))
        if self._lengths and bad.any():
            p = int(pos[int(np.flatnonzero(bad)[0])])  # nnabla-rl stops at the first bad one
            if p < 0:
                raise PositionKeyError(
                    f"index {p} is out of range: the first trajectory's Atari buffer takes "
                    "no negative index"
                )
        return super()._positions(pos)

    def _portion_range(self, length: int, start: int, portion_length: int) -> range:
        """nnabla-rl's ``_LazyAtariTrajectory`` slice: ``range(key.stop)[key]``.

        Equal to Python's slice for the usual portions; an empty portion for a negative
        ``portion_length``, and from the first experience on for a negative start.
        """
        return range(start + portion_length)[start : start + portion_length]

    def append_trajectory(self, trajectory: Sequence[Any]) -> None:
        """Add a trajectory; its first state starts a new stack (0.16.0: a new Atari buffer)."""
        self._obj_fresh = True
        try:
            super().append_trajectory(trajectory)
        finally:
            self._obj_fresh = False


class ProportionalPrioritizedAtariBuffer(_AtariObjects, ProportionalPrioritizedReplayBuffer):
    """Proportional prioritized version of :class:`MemoryEfficientAtariBuffer`.

    Experiences are stored as :class:`MemoryEfficientAtariBuffer` stores them (one ``uint8``
    frame each, stacks rebuilt at sample time, ``a``, ``r``, ``non_terminal`` and ``info`` as
    appended) and drawn, weighted and updated as :class:`ProportionalPrioritizedReplayBuffer`
    does (``P(i) ∝ (|clip(e_i)| + epsilon) ** alpha``).

    Args:
        capacity: Most experiences kept (``>= 1``).
        alpha, beta, error_clip, epsilon, normalization_method: As
            :class:`ProportionalPrioritizedReplayBuffer`.
        betasteps: As there; nnabla-rl's Atari default is 50000000.
        stacked_frames: Frames per state.
        seed: Seed of a random generator of the buffer's own (an rlreplay addition).

    Example:
        >>> import numpy as np
        >>> buffer = ProportionalPrioritizedAtariBuffer(capacity=100, seed=0)
        >>> for t in range(6):
        ...     s = np.full((4, 84, 84), t / 255.0)
        ...     buffer.append((s, 0, 1.0, 1.0, np.full((4, 84, 84), (t + 1) / 255.0), {}))
        >>> experiences, info = buffer.sample(num_samples=2)
        >>> experiences[0][0].shape, experiences[0][0].dtype, info["weights"].shape
        ((4, 84, 84), dtype('float32'), (2, 1))
        >>> buffer.update_priorities(np.array([0.5, 0.1]))
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        betasteps: int = 50000000,
        error_clip: tuple[float, float] | None = (-1, 1),
        epsilon: float = 1e-8,
        normalization_method: str = "buffer_max",
        stacked_frames: int = 4,
        *,
        seed: int | None = None,
    ) -> None:
        super().__init__(
            capacity,
            alpha=alpha,
            beta=beta,
            betasteps=betasteps,
            error_clip=error_clip,
            epsilon=epsilon,
            normalization_method=normalization_method,
            seed=seed,
        )
        self._frame_stack = check_count("stacked_frames", stacked_frames)


class RankBasedPrioritizedAtariBuffer(_AtariObjects, RankBasedPrioritizedReplayBuffer):
    """Rank-based prioritized version of :class:`MemoryEfficientAtariBuffer`.

    Experiences are stored as :class:`MemoryEfficientAtariBuffer` stores them and drawn,
    weighted and updated as :class:`RankBasedPrioritizedReplayBuffer` does
    (``P(i) ∝ rank_i ** -alpha``).

    Args:
        capacity: Most experiences kept (``>= 1``).
        alpha, beta, error_clip, reset_segment_interval: As
            :class:`RankBasedPrioritizedReplayBuffer`.
        sort_interval: Kept, unused: nnabla-rl 0.16.0's Atari ``append`` replaces the
            rank-based one (which sorts the heap every ``sort_interval`` appends), so the
            heap is never sorted, as there.
        betasteps: As there; nnabla-rl's Atari default is 50000000.
        stacked_frames: Frames per state.
        seed: Seed of a random generator of the buffer's own (an rlreplay addition).
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.7,
        beta: float = 0.5,
        betasteps: int = 50000000,
        error_clip: tuple[float, float] | None = (-1, 1),
        reset_segment_interval: int = 1000,
        sort_interval: int = 1000000,
        stacked_frames: int = 4,
        *,
        seed: int | None = None,
    ) -> None:
        super().__init__(
            capacity,
            alpha=alpha,
            beta=beta,
            betasteps=betasteps,
            error_clip=error_clip,
            reset_segment_interval=reset_segment_interval,
            sort_interval=sort_interval,
            seed=seed,
        )
        self._frame_stack = check_count("stacked_frames", stacked_frames)
        # nnabla-rl 0.16.0's Atari append replaces the rank-based one, which counts appends
        # and sorts the heap: this buffer's heap is never sorted (sort_interval is unused)
        self._regular_sorts = False
        self._append_hook = False
