"""The part nnabla-rl's two prioritized buffers share: ``_PrioritizedReplayBuffer`` and errors.

nnabla-rl 0.16.0 (``nnabla_rl/replay_buffers/prioritized_replay_buffer.py``, Apache-2.0, Sony
Group Corporation): the sample/update protocol, the ring bookkeeping of sampled experiences
and ``sample_indices`` with its importance weights. The buffers themselves are in
:mod:`.prioritized_replay_buffer` (proportional, and the seed's ``PrioritizedReplayBuffer``)
and :mod:`._rank_based`; the public names are all importable from
:mod:`.prioritized_replay_buffer`, as in nnabla-rl.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlreplay import ConfigError, ReplayError
from rlreplay.compat.nnabla_rl.replay_buffer import Indices, ReplayBuffer

__all__ = [
    "EndlessDrawError",
    "NoSamplesError",
    "NormalizationMethodError",
    "SegmentError",
]

Array = np.ndarray[Any, Any]


class NormalizationMethodError(ConfigError, AssertionError):
    """nnabla-rl's ``assert normalization_method in ("batch_max", "buffer_max")``."""


class SegmentError(ReplayError, AssertionError):
    """nnabla-rl's ``assert len(boundaries) == k`` in the rank-based segment computation."""


class NoSamplesError(ReplayError, ValueError, ZeroDivisionError):
    """``num_samples=0``: nnabla-rl divides by it (``ZeroDivisionError``) or, once the total
    priority is a NumPy float, samples nothing (``ValueError: Indices are empty``)."""


class EndlessDrawError(ReplayError, RuntimeError):
    """A draw nnabla-rl would repeat for ever (no reachable experience fits ``num_steps``)."""


class _PrioritizedReplayBuffer(ReplayBuffer):
    """nnabla-rl's ``_PrioritizedReplayBuffer``: the protocol both prioritized buffers share.

    Each :meth:`sample` or :meth:`sample_indices` must be followed by
    :meth:`update_priorities` with the TD errors of the returned experiences before the next
    one (``RuntimeError`` otherwise).
    """

    def __init__(
        self,
        capacity: int,
        alpha: float,
        beta: float,
        betasteps: int,
        error_clip: tuple[float, float] | None,
        seed: int | None,
    ) -> None:
        if capacity is None or capacity <= 0:
            raise ConfigError("buffer size must be greater than 0")
        super().__init__(capacity=operator.index(capacity), seed=seed)
        self._slots = operator.index(capacity)
        self._alpha = alpha
        self._beta = beta
        self._beta_diff = (1.0 - beta) / betasteps  # betasteps=0: ZeroDivisionError, as there
        self._error_clip = error_clip
        self._last_sampled: Array | None = None  # append numbers awaiting update_priorities
        self._last_first = 0  # the oldest kept append number when they were sampled
        # whether _on_append runs after each append (the structures are otherwise brought up
        # to date from _appended when next read); an instance attribute: read every append
        self._append_hook = False

    @property
    def _appended(self) -> int:
        """Experiences appended so far: the ``t``-th is in ring slot ``t % capacity``.

        The base buffer's id counter: every append (staged, one by one or to the object
        store) takes the next id, and a refused one (it raises) takes none.
        """
        return self._next_id

    # ------------------------------------------------------------------ writing
    def append(self, experience: Any) -> None:
        """Add new experience to the replay buffer, with the top priority.

        Notes:
            If the replay buffer size is full, the oldest (head of the buffer) experience will
            be dropped off and the given experience will be added to the tail of the buffer.
        """
        st = self._staging
        if st is not None and st.push(self, experience):
            # ReplayBuffer.append's staged path, written out (this runs once per append):
            # the id advanced in push
            if self._append_hook:
                self._on_append()
            return
        ReplayBuffer.append(self, experience)  # (super() costs a lookup on every append)
        if self._append_hook:
            self._on_append()

    def append_all(self, experiences: Sequence[Any]) -> None:
        """Add list of experiences to the replay buffer (each as :meth:`append`)."""
        for experience in experiences:
            self.append(experience)

    def _on_append(self) -> None:
        """Hook after each append when :attr:`_append_hook` is set."""

    # ------------------------------------------------------------------ sampling
    def _first(self) -> int:
        """Append number of position 0 (the oldest stored experience)."""
        return self._appended - len(self)

    def _head(self) -> int:
        """Ring slot of position 0 (nnabla-rl's ``RingBuffer._head``)."""
        return self._first() % self._slots

    def _check_updated(self) -> None:
        if self._last_sampled is not None:
            raise RuntimeError(
                "Trying to sample data from buffer without updating priority. "
                "Check that the algorithm supports prioritized replay buffer."
            )

    def _check_sizes(self, num_samples: int, num_steps: int) -> int:
        n = len(self)
        if num_samples > n:
            raise ValueError(f"num_samples: {num_samples} is greater than the size of buffer: {n}")
        if n - num_steps < 0:
            raise RuntimeError(f"Insufficient buffer length. buffer: {n} < steps: {num_steps}")
        return n  # a pending sample is refused by sample_indices, after the draws (as there)

    def sample_indices(self, indices: Indices, num_steps: int = 1) -> tuple[Any, dict[str, Any]]:
        """Sample experiences for given indices, with their importance weights.

        As nnabla-rl: the weights use the current ``beta``, which then advances; with
        ``num_steps < 1`` the experiences are an empty tuple.

        Returns:
            ``(experiences, info)`` as the base buffer's, ``info["weights"]`` of shape
            ``(len(indices), 1)`` and nnabla-rl's dtype (proportional: float32 when every
            sampled mass and the normalising one are ``np.float32``s, else float64).

        Raises:
            ValueError: If indices are empty.
            RuntimeError: The previous sample's priorities were not updated.
            KeyError: A position outside ``[0, len)``.
        """
        if len(indices) == 0:
            raise ValueError("Indices are empty")
        self._check_updated()
        num_steps = operator.index(num_steps)
        if type(indices) is np.ndarray and indices.dtype == np.int64 and indices.ndim == 1:
            positions: Array = indices  # (read only: no copy)
        else:
            positions = np.asarray(indices).astype(np.int64).reshape(-1)
        experiences: Any = ()
        if num_steps >= 1:
            experiences = self._read(positions, num_steps)  # ReplayBuffer.sample_indices
        first = self._first()
        weights = self._get_weights((positions + first % self._slots) % self._slots)
        self._beta = min(self._beta + self._beta_diff, 1.0)
        self._last_first = first
        self._last_sampled = first + positions
        return experiences, {"weights": weights}

    def _get_weights(self, slots: Array) -> Array:
        raise NotImplementedError

    # ------------------------------------------------------------------ priorities
    def _preprocess_errors(self, errors: Any) -> Array:
        if self._error_clip is not None:
            lo, hi = self._error_clip[0], self._error_clip[1]
            # np.clip of an array is its method (without the dispatch)
            errors = errors.clip(lo, hi) if type(errors) is np.ndarray else np.clip(errors, lo, hi)
        out: Array = np.abs(errors)
        return out

    def _pending(self) -> Array:
        """Slots of the last sampled experiences (-1: overwritten since), then forgotten.

        Raises:
            TypeError: Nothing was sampled since the last update (nnabla-rl zips None).
        """
        last = self._last_sampled
        if last is None:
            raise TypeError(
                "update_priorities: no sampled experiences await new priorities (nnabla-rl "
                "zips the errors with None here); call sample or sample_indices first"
            )
        # dropped: kept when sampled, overwritten since (deliberate difference 1). A negative
        # position (num_steps < 1 reads nothing) held no experience: it names the ring slot
        # nnabla-rl's relative index wraps to, (position + head) % capacity, as there
        first = self._first()
        if first == self._last_first:  # nothing overwritten since (the usual update)
            kept: Array = last % self._slots
            return kept
        dropped = (last >= self._last_first) & (last < first)
        slots: Array = np.where(dropped, -1, last % self._slots)
        return slots

    def update_priorities(self, errors: Any) -> None:
        raise NotImplementedError
