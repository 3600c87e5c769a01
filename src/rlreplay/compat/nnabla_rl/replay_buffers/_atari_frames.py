"""nnabla-rl 0.16.0's Atari frame handling, as pure functions (``_append_to_buffer`` and
``_getitem_from_buffer`` of ``memory_efficient_atari_buffer.py``).

0.16.0 keeps one ``(84, 84)`` frame per state: a state of shape ``(84, 84)`` is that frame,
any other state gives its last element ``s[-1]`` (and ``s_next[-1]``, decided by ``s``'s shape
alone), so a stack ``(N, 84, 84)`` keeps its last frame and any other shape (a 2-D frame of
another size, a stack of such frames) fails the shape assertion. A floating frame is
quantised, ``(frame * 255.0).astype(np.uint8)``; any other frame is kept as it is. Then
``assert s.shape == (84, 84)`` and ``assert s.shape == s_next.shape``.
A state is read back as the stack of the ``stacked_frames`` newest frames, assigned into a
``uint8`` array (NumPy's unsafe cast), ``/ 255.0`` as ``float32``; ``s_next`` is ``s[1:]``
followed by the experience's own ``s_next`` frame ``.astype(np.float32) / 255.0``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay import ShapeError

__all__ = [
    "FRAME_SHAPE",
    "AtariFrameError",
    "atari_frames",
    "next_state",
    "same_frame",
    "stack_state",
    "stored_frame",
]

Array = np.ndarray[Any, Any]

#: The frame shape nnabla-rl 0.16.0's Atari buffers assert (the only one they store).
FRAME_SHAPE = (84, 84)


class AtariFrameError(ShapeError, AssertionError):
    """A state 0.16.0's ``assert s.shape == (84, 84)`` (or ``== s_next.shape``) refuses."""


def atari_frames(experience: Any) -> tuple[Array, Array]:
    """The frames 0.16.0's ``_append_to_buffer`` stores for ``s`` and ``s_next``.

    Raises what 0.16.0 raises there: ``ValueError``/``TypeError`` for an experience that does
    not unpack into ``s, a, r, non_terminal, s_next, info, *_``, ``AttributeError`` for a state
    without ``.shape`` (a list), ``IndexError`` for an empty stack, and
    :class:`AtariFrameError` (an ``AssertionError``) for a frame that isn't ``(84, 84)``.
    """
    s, _a, _r, _non_terminal, s_next, _info, *_ = experience  # 0.16.0's unpacking
    if s.shape != FRAME_SHAPE:  # 0.16.0's test, s's shape alone
        s, s_next = s[-1], s_next[-1]  # "Use only the last image to reduce memory"
    s, s_next = _quantized(s), _quantized(s_next)
    if s.shape != FRAME_SHAPE:
        raise AtariFrameError(
            f"s: expected a frame of shape {FRAME_SHAPE} (or a stack (N, 84, 84), whose last "
            f"frame is kept), got a frame of shape {tuple(s.shape)} (nnabla-rl 0.16.0 asserts "
            "s.shape == (84, 84))"
        )
    if s_next.shape != s.shape:
        raise AtariFrameError(
            f"s_next: expected a frame of the shape of s's, {s.shape}, got {s_next.shape}"
        )
    return s, s_next


def _quantized(frame: Any) -> Any:
    """0.16.0's ``_denormalize_state`` of a floating frame; any other frame as it is."""
    if np.issubdtype(frame.dtype, np.floating):  # 0.16.0's _is_float (a list: AttributeError)
        with np.errstate(all="ignore"):
            return (frame * 255.0).astype(np.uint8)
    return frame


def stored_frame(frame: Any) -> Any:
    """The frame 0.16.0 keeps, as values: what the episode check compares.

    A floating frame is 0.16.0's quantised ``uint8`` frame. An object array of numbers (0.16.0
    keeps it unquantised) counts as the numeric frame it holds, quantised if floating, so
    the same values in another representation (float64, float32, object, ``uint8`` already
    quantised) give the same stored frame. Any other frame is itself.
    """
    arr = np.asarray(frame)
    if arr.dtype == np.dtype(object):
        try:
            numeric = np.array(arr.tolist())
        except (ValueError, TypeError):  # a ragged or otherwise unconvertible content
            numeric = arr
        if numeric.shape == arr.shape and numeric.dtype.kind in "biufc":
            arr = numeric
    return _quantized(arr)


def same_frame(a: Any, b: Any) -> bool:
    """Whether two frames store the same values (:func:`stored_frame`, any dtypes).

    This is where the front-end's Atari episodes continue (deliberate difference 2): an
    appended ``s`` whose stored frame differs from the previous ``s_next``'s starts a new
    stack; a change of representation alone does not.
    """
    x, y = stored_frame(a), stored_frame(b)
    if np.shape(x) != np.shape(y):
        return False
    try:
        return bool(np.array_equal(x, y))
    except Exception:  # objects whose == raises: not known to be the same
        return False


def stack_state(previous: Array | None, frame: Any, stacked_frames: int) -> Array:
    """The ``uint8`` stack of a state: ``frame`` after ``previous``'s newest frames.

    ``previous`` is the previous experience's stack, or None at an episode's start, where
    0.16.0 fills the whole stack with the frame (``states[0:tail_index] = s``).
    """
    stack = np.zeros((stacked_frames, *np.shape(frame)), dtype=np.uint8)
    if previous is None:
        stack[:] = frame  # NumPy's assignment cast, as 0.16.0's
    else:
        stack[:-1] = previous[1:]
        stack[-1] = frame
    return stack


def next_state(states: Array, next_frame: Any) -> Array:
    """0.16.0's ``s_next``: ``states[1:]`` (float32) and ``next_frame.astype(float32) / 255``."""
    last = np.expand_dims(next_frame, axis=0).astype(np.float32) / 255.0
    if states.shape[0] > 1:
        return np.concatenate((states[1:], last), axis=0)
    return last
