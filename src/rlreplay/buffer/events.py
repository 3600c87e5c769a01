"""Tells a buffer's sampler when the sampleable set moves.

A sampler with per-transition state (priorities: ``tracks_sampleable``) hears of every change
of the sampleable set: on every write, removal and abandon (:meth:`SampleableEvents.after`,
with the index's :meth:`~rlreplay.episodes.EpisodeIndex.bounds` taken
:meth:`~SampleableEvents.before`), and when the index accounts for steps the per-step fast
path deferred (:meth:`~SampleableEvents.settled`). A sampler that keeps no such state
(uniform) costs nothing here: :meth:`~SampleableEvents.before` is ``None`` and nothing follows.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from rlreplay.episodes.index import EpisodeIndex
from rlreplay.sampling.base import Sampler

__all__ = ["SampleableEvents"]

Array = np.ndarray[Any, Any]
_EMPTY = np.zeros(0, np.int64)
_EMPTY.flags.writeable = False


class SampleableEvents:
    """The link from the episode index to the sampler (see the module docstring)."""

    __slots__ = ("__weakref__", "index", "sampler", "tracks")

    def __init__(self, index: EpisodeIndex, sampler: Sampler) -> None:
        self.index = index
        self.sampler = sampler
        self.tracks = bool(sampler.tracks_sampleable)
        if self.tracks:
            # Weakly: the index must not keep this part (and its sampler) alive through a cycle
            # that only the cycle collector frees.
            settled = weakref.WeakMethod(self.settled)

            def on_settle(before: Array, t0: int, n: int) -> None:
                hook = settled()
                if hook is not None:
                    hook(before, t0, n)

            index.on_settle = on_settle

    def before(self) -> Array | None:
        """The index's bounds before a change, if the sampler tracks the sampleable set."""
        return self.index.bounds() if self.tracks else None

    def after(self, before: Array | None, rows_env: Array = _EMPTY, rows_t: Array = _EMPTY) -> None:
        """Steps ``(rows_env, rows_t)`` were written (none for a removal) and the sampleable
        set moved from ``before``: the sampler hears of it."""
        if before is not None:
            changes = self.index.sampleable_changes(before)
            self.sampler.on_write(self.index, rows_env, rows_t, *changes)

    def settled(self, before: Array, t0: int, n: int) -> None:
        """The index accounted for deferred plain steps ``t0 .. t0+n-1`` of every env (before
        anything reads it): the sampler hears of them."""
        self.sampler.on_settle(self.index, before, t0, n)
