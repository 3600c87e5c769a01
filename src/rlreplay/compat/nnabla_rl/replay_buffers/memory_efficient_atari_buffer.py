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

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlreplay.compat.nnabla_rl._codec import (
    Codec,
    Part,
    Row,
    Slot,
    Unfit,
    check_shape,
    is_terminal,
    is_timelimit,
)
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer, check_capacity, check_count
from rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer import (
    ProportionalPrioritizedReplayBuffer,
    RankBasedPrioritizedReplayBuffer,
)
from rlreplay.compat.nnabla_rl.replay_buffers.trajectory_replay_buffer import (
    TrajectoryReplayBuffer,
)
from rlreplay.spec import Field

__all__ = [
    "MemoryEfficientAtariBuffer",
    "MemoryEfficientAtariTrajectoryBuffer",
    "ProportionalPrioritizedAtariBuffer",
    "RankBasedPrioritizedAtariBuffer",
]

Array = np.ndarray[Any, Any]


def _quantize(what: str, value: Any, shape: tuple[int, ...]) -> Array:
    """nnabla-rl's ``(state * 255.0).astype(np.uint8)`` of a frame stack (a new array).

    NumPy's unsafe cast, as nnabla-rl: fractions are truncated and values outside ``[0, 1]``
    wrap or saturate as the platform's float-to-uint8 conversion does.
    """
    if isinstance(value, tuple):
        raise Unfit(f"{what}: expected a frame stack array, got a tuple")
    arr = np.asarray(value)
    if arr.shape != shape:
        raise Unfit(
            f"{what}: expected a stack of frames of shape {shape} (stacked_frames first), "
            f"got {arr.shape}"
        )
    if arr.dtype.kind not in "biuf":
        raise Unfit(f"{what}: expected number frames, got dtype {arr.dtype}")
    with np.errstate(all="ignore"):
        return (arr * 255.0).astype(np.uint8)


class _AtariCodec(Codec):
    """Stores the last frame of ``s`` (uint8) in ``obs``; states come back as float stacks.

    As nnabla-rl's ring, which keeps ``a`` and ``r`` as the appended objects, ``a``, ``r``,
    ``non_terminal`` and ``info`` go to the side ring untouched; the core's reward column
    holds zeros.
    """

    def __init__(self, frame: Part, stacked_frames: int) -> None:
        zero = Part("reward", Field((), np.float64), "python", float)
        super().__init__(Slot((frame,), False), Slot((), False), zero, cast=True)
        self.stacked_frames = stacked_frames
        self.stack_shape = (stacked_frames, *frame.field.shape)

    @classmethod
    def infer_atari(cls, experience: Any, stacked_frames: int) -> _AtariCodec:
        s = check_shape(experience)[0]
        if isinstance(s, tuple):
            raise Unfit("s: the Atari buffers store one frame stack per state, got a tuple")
        shape = np.shape(s)
        if len(shape) < 2 or shape[0] != stacked_frames:
            raise Unfit(
                f"s: expected a stack of {stacked_frames} frames (shape ({stacked_frames}, H, W)"
                f"), got shape {shape}"
            )
        frame = Part("obs", Field(shape[1:], np.uint8, observation=True), "array")
        return cls(frame, stacked_frames)

    def encode(self, experience: Any) -> Row:
        exp = check_shape(experience)
        s, a, r, non_terminal, s_next = exp[:5]
        obs = self.convert_state("s", s)
        next_obs = self.convert_state("s_next", s_next)
        terminal, timelimit = is_terminal(non_terminal), is_timelimit(exp[5])
        return Row(obs, next_obs, (), 0.0, terminal, timelimit, (a, r, non_terminal, *exp[5:]))

    def convert_state(self, what: str, value: Any) -> tuple[Any, ...]:
        return (_quantize(what, value, self.stack_shape),)

    def step_values(self, row: Row) -> dict[str, Any]:
        return {"obs": row.obs[0][-1], "reward": 0.0}

    def final_values(self, row: Row) -> dict[str, Any]:
        return {"next_obs": row.next_obs[0][-1]}

    def decode_state(self, batch: Any, prefix: str) -> list[Any]:
        # (B, stacked_frames, *frame) uint8 -> float32 / 255, nnabla-rl's _normalize_state
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


def _quantized_state(value: Any) -> Array:
    """A state as the Atari buffers give it back: ``(x * 255.0).astype(np.uint8) / 255``.

    nnabla-rl's quantisation (NumPy's unsafe cast) of the whole state, then its
    ``_normalize_state`` (float32 / 255). A state NumPy can't multiply by ``255.0`` (strings,
    ...) raises NumPy's error, as nnabla-rl's ``s[-1] * 255.0`` does.
    """
    with np.errstate(all="ignore"):
        frames = (np.asarray(value) * 255.0).astype(np.uint8)
    states = frames.astype(np.float32)
    states /= np.float32(255.0)
    return states


class _AtariObjects(ReplayBuffer):
    """The Atari buffers' fallback: experiences that do not fit the core's frame column.

    The memory-efficient path (one ``uint8`` frame per experience in the core) needs every
    state to be a numeric stack ``(stacked_frames, *frame)`` with the first experience's frame
    shape. nnabla-rl stores other states too, so an experience that doesn't fit moves the
    buffer to the object store, as the base buffer does (the kept experiences move with it, in
    order, as they read back). There each experience keeps its own states quantised as nnabla-rl
    quantises frames and normalised as it normalises them (:func:`_quantized_state`), with
    ``a``, ``r``, ``non_terminal`` and the rest as appended.
    """

    _objects_allowed = True

    def _make_codec(self, experience: Any) -> Codec:
        # Every Atari buffer: one uint8 frame per experience, states rebuilt from
        # ``self._frame_stack`` of them (each subclass sets it in its constructor).
        return _AtariCodec.infer_atari(experience, self._frame_stack)

    def _append_object(self, experience: Any) -> None:
        s, a, r, non_terminal, s_next, *rest = experience  # nnabla-rl's unpacking
        quantized = (_quantized_state(s), a, r, non_terminal, _quantized_state(s_next), *rest)
        super()._append_object(quantized)


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

    def _portion_range(self, length: int, start: int, portion_length: int) -> range:
        """nnabla-rl's ``_LazyAtariTrajectory`` slice: ``range(key.stop)[key]``.

        Equal to Python's slice for the usual portions; an empty portion for a negative
        ``portion_length``, and from the first experience on for a negative start.
        """
        return range(start + portion_length)[start : start + portion_length]


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
        alpha, beta, error_clip, reset_segment_interval, sort_interval: As
            :class:`RankBasedPrioritizedReplayBuffer`.
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
