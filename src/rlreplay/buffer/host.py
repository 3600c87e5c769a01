"""What every part of :class:`rlreplay.ReplayBuffer` shares: its attributes, declared once.

:class:`~rlreplay.ReplayBuffer` is one class assembled from parts, one module per concern
(``buffer_writing``: ``add``/``extend``; ``buffer_fifo``: blocking waits and ``dequeue``;
``buffer_episodes``: sequences and episode queries; ``buffer_state``: state dicts and
checkpoints). Each part is a mixin over :class:`BufferHost`, which only *declares* the
attributes that ``ReplayBuffer.__init__`` sets and the few methods one part calls in another,
so each module type-checks alone and none imports :mod:`rlreplay.buffer.replay`.

This module imports neither the buffer nor :mod:`rlreplay.transforms`: a transform that binds to
a buffer (:class:`rlreplay.transforms.BindableTransform`) is typed against :class:`BufferHost`,
which keeps the import graph free of cycles.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rlreplay.batch import Batch
from rlreplay.episodes.index import EpisodeIndex
from rlreplay.limits import RateLimiter
from rlreplay.sampling.base import Sampler
from rlreplay.sampling.uniform import DrawOptions
from rlreplay.spec.schema import Schema
from rlreplay.storage import Columns
from rlreplay.storage.backends import Backend
from rlreplay.writing.writer import StepWriter

if TYPE_CHECKING:
    from rlreplay.io.frameworks import Output

__all__ = ["Array", "BufferHost"]

Array = np.ndarray[Any, Any]


class BufferHost:
    """The attributes of a replay buffer, set by ``ReplayBuffer.__init__`` (declarations only).

    Invariant: ``_lock`` (re-entrant) guards every attribute below; ``_cond`` is a condition on
    the same lock, which blocking calls wait on (``_waiting`` counts them).
    """

    schema: Schema
    capacity: int
    num_envs: int
    n_step: int
    gamma: float
    frame_stack: int
    stack_pad: str
    next_fields: tuple[str, ...]
    seed: int | None
    record_episodic_return: bool
    reward_clip: tuple[float, float] | None
    default_return: float
    draw_options: DrawOptions
    transforms: tuple[Callable[[Batch], Batch], ...]
    _tracks_sampleable: bool  # the sampler's: it hears of every change of the sampleable set
    _sampler: Sampler
    sampler_class: ClassVar[type[Any]]
    _env_capacity: int
    _backend: Backend
    _finals0: int
    _index: EpisodeIndex
    _cols: Columns
    _rng: np.random.Generator
    _lock: threading.RLock
    _cond: threading.Condition
    _waiting: int
    _closed: bool
    _all_envs: Array
    _writer: StepWriter
    _shared: Any  # rlreplay.sharing.handle.SharedState of a shared buffer, else None
    _limiter: RateLimiter | None  # paces writes against samples (rate_limiter=)
    _output: Output | None  # the default of sampling calls' as_/device (None: NumPy)

    if TYPE_CHECKING:
        # Defined by ReplayBuffer or another part; declared here for the parts that call them.
        def _check_open(self) -> None: ...

        def __len__(self) -> int: ...

        @property
        def num_sampleable(self) -> int: ...

        def _limiter_counts(self) -> dict[str, Any]: ...

        def _restore_limiter(self, counts: Any) -> None: ...

        def _limiter_resized(self) -> None: ...

        def _notify_sampleable(self, before: Array, rows_env: Array, rows_t: Array) -> None: ...

        def _bind(self, fn: Callable[[Batch], Batch]) -> None: ...

        def _config(self) -> dict[str, Any]: ...

        def _state_meta(self) -> dict[str, Any]: ...

        def _state_arrays(self) -> dict[str, Array]: ...

        def _install(self, meta: Mapping[str, Any], arrays: Mapping[str, Any]) -> None: ...

        def _wait(self, ready: Callable[[], bool], timeout: float | None, what: str) -> None: ...

        def _wait_for_room(self, rows_env: Array, timeout: float | None) -> None: ...
