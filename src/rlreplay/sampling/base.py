"""The sampler part of a buffer: its contract (:class:`Sampler`) and what a draw returns.

A sampler chooses *which* sampleable transitions a batch holds; the episode index says which
transitions are sampleable, and the assembler turns the chosen ``(env, t)`` into arrays. A
buffer owns exactly one sampler, built before the buffer (``ReplayBuffer(..., sampler=...)``)
and bound to it once. Every draw comes from the buffer's generator, passed in, so the sampler
holds no randomness of its own and a checkpoint of the generator reproduces its draws.

The buffer calls, under its lock:

* :meth:`Sampler.bind` once, from its constructor;
* :meth:`Sampler.on_write` after every write that may change the sampleable set (only for a
  sampler with ``tracks_sampleable``), with the steps written and the transitions that
  stopped or started being sampleable;
* :meth:`Sampler.on_settle` when the index accounts for steps the per-step fast path
  deferred (same meaning as ``on_write`` for the steps ``t0 .. t0+n-1`` of every env);
* :meth:`Sampler.draw` for :meth:`~rlreplay.ReplayBuffer.sample`, and
  :meth:`Sampler.draw_starts` for :meth:`~rlreplay.ReplayBuffer.sample_sequences`;
* :meth:`Sampler.config`, :meth:`Sampler.state_meta`, :meth:`Sampler.state_arrays`,
  :meth:`Sampler.load_meta` and :meth:`Sampler.after_load` to save and restore it (a checkpoint
  is the union of the parts' states plus the generator's).

Knows nothing of how a transition is assembled or stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from rlreplay.sampling.uniform import DrawOptions

if TYPE_CHECKING:
    from rlreplay.episodes.index import EpisodeIndex

__all__ = ["Draw", "Sampler", "settled_rows"]

Array = np.ndarray[Any, Any]


class Draw(NamedTuple):
    """The transitions a sampler chose, one row per batch item.

    Attributes:
        env_ids: int64 ``(B,)``: each item's env.
        t: int64 ``(B,)``: each item's absolute step in its env.
        weights: float32 ``(B,)``: importance weights (ones for uniform draws).
        probabilities: float64 ``(B,)``: each item's probability under the law drawn from, or
            ``None`` where the sampler does not report them (uniform draws).
    """

    env_ids: Array
    t: Array
    weights: Array
    probabilities: Array | None = None

    def extra(self) -> dict[str, Array]:
        """The per-item arrays a batch carries besides the assembled fields."""
        out = {"weights": self.weights}
        if self.probabilities is not None:
            out["probabilities"] = self.probabilities
        return out


def settled_rows(num_envs: int, env_capacity: int, t0: int, n: int) -> tuple[Array, Array]:
    """``(rows_env, rows_t)`` of deferred steps ``t0 .. t0+n-1`` of every env still stored
    (earlier ones were overwritten since), in the order the general write reports them."""
    first = max(t0, t0 + n - env_capacity)
    rows_t = np.repeat(np.arange(first, t0 + n, dtype=np.int64), num_envs)
    rows_env = np.tile(np.arange(num_envs, dtype=np.int64), t0 + n - first)
    return rows_env, rows_t


@runtime_checkable
class Sampler(Protocol):
    """What a buffer's sampler does (see the module docstring for when each is called).

    Attributes:
        name: Short name of the law (``"uniform"``, ``"prioritized"``).
        tracks_sampleable: Whether the sampler keeps per-transition state and must hear of
            every change of the sampleable set (:meth:`on_write`, :meth:`on_settle`).
        kernel: Which one-call kernel may draw and assemble for it
            (:mod:`rlreplay.sampling.onecall`): ``"uniform"``, ``"prioritized"`` or ``None``
            (the general path: :meth:`draw`, then the assembler). A subclass that draws its
            own way must report ``None``.
    """

    name: str
    tracks_sampleable: bool
    kernel: str | None

    def bind(self, index: EpisodeIndex, options: DrawOptions) -> None:
        """Attach to a buffer's episode index (once; a second buffer raises ``ConfigError``)
        and check the buffer's draw options (``ConfigError`` for options this law refuses)."""
        ...

    def check_options(self, options: DrawOptions) -> None:
        """Refuse (``ConfigError``) per-call draw options this law cannot honour."""
        ...

    def draw(
        self, index: EpisodeIndex, batch_size: int, rng: np.random.Generator, options: DrawOptions
    ) -> Draw:
        """Choose ``batch_size`` sampleable transitions.

        Raises:
            EmptyBufferError: Nothing can be drawn (nothing sampleable, or no mass).
        """
        ...

    def draw_starts(
        self,
        index: EpisodeIndex,
        batch_size: int,
        rng: np.random.Generator,
        *,
        length: int,
        within_episode: bool,
        pad: bool,
        balance_envs: bool,
    ) -> Draw:
        """Choose ``batch_size`` sequence starts of ``length`` steps.

        Raises:
            EmptyBufferError: No start can be drawn.
        """
        ...

    def on_write(
        self,
        index: EpisodeIndex,
        rows_env: Array,
        rows_t: Array,
        removed_env: Array,
        removed_t: Array,
        added_env: Array,
        added_t: Array,
    ) -> None:
        """Steps ``(rows_env, rows_t)`` were written; the ``removed`` transitions are no longer
        sampleable (apply them first: an added one may reuse a removed one's slot) and the
        ``added`` ones just became sampleable."""
        ...

    def on_settle(self, index: EpisodeIndex, before: Array, t0: int, n: int) -> None:
        """The index accounted for deferred plain steps ``t0 .. t0+n-1`` of every env;
        ``before`` holds each env's sampleable ``[lo, hi)`` before them."""
        ...

    def update(self, index: EpisodeIndex, ids: Any, priorities: Any) -> int:
        """Set priorities of transitions by id; returns how many ids were stale (ignored).

        Raises:
            ConfigError: The law has no priorities.
        """
        ...

    @property
    def nbytes(self) -> int:
        """Bytes the sampler allocated."""
        ...

    def config(self) -> dict[str, Any]:
        """The sampler's parameters (JSON-able), merged into the buffer's configuration."""
        ...

    def state_meta(self) -> dict[str, Any]:
        """Scalars of the sampler's state (JSON-able), merged into the buffer's state."""
        ...

    def state_arrays(self) -> dict[str, Array]:
        """Arrays of the sampler's state (live views), named as they are in a checkpoint.

        A sampler may also define ``state_rows() -> dict[str, tuple[str | int, Any]]`` (not
        required): for some of these arrays, which rows hold state, and the value a fresh
        sampler's other rows hold: ``("slots", fill)`` for an array with one row per slot
        (the rows of stored steps hold state), ``(n, fill)`` for its first ``n`` rows. A
        checkpoint file holds only those rows, and the other rows read back as ``fill``, so
        they must be rows nothing reads before a write sets them (a state dict shows them as
        ``fill`` too). Arrays it does not name are state in every row.
        """
        ...

    def load_meta(self, meta: Mapping[str, Any]) -> None:
        """Restore :meth:`state_meta`'s scalars (``CheckpointError`` for values out of range)."""
        ...

    def after_load(self, index: EpisodeIndex) -> None:
        """Rebuild what derives from the restored arrays and the restored index."""
        ...
