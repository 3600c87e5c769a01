"""The default sampler: uniform over the sampleable transitions (recency mix and draws without
replacement on request), and uniform sequence starts.

Keeps no per-transition state (``tracks_sampleable`` is false), so writes cost it nothing and a
checkpoint holds nothing of it. Its plain draw (with replacement, no recency mix) is the one
the one-call kernel reproduces (:mod:`rlreplay.sampling.onecall`): the same generator calls,
so the same batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlreplay.episodes.index import LO, EpisodeIndex
from rlreplay.errors import ConfigError, EmptyBufferError
from rlreplay.sampling.base import Draw, settled_rows
from rlreplay.sampling.sequence_starts import draw_sequence_starts
from rlreplay.sampling.uniform import DrawOptions, draw_mixed, draw_uniform

__all__ = ["UniformSampler", "nothing_sampleable"]

Array = np.ndarray[Any, Any]


def nothing_sampleable(index: EpisodeIndex) -> EmptyBufferError:
    """The error of a draw from a buffer with no sampleable transition."""
    return EmptyBufferError(
        f"sample: nothing is sampleable yet ({index.stored} stored transitions; a "
        f"transition becomes sampleable once its {index.n_step}-step window is known)"
    )


class UniformSampler:
    """Uniform draws over the sampleable transitions of a buffer (the default sampler).

    :meth:`draw` draws each item uniformly, with replacement, over every env's sampleable
    steps; the draw options mix in ``ceil(recent_ratio * B)`` items uniform over each env's
    ``recent_steps`` newest transitions and, without replacement, avoid duplicates whenever
    enough transitions are sampleable. Weights are ones.

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> from rlreplay.sampling import UniformSampler
        >>> buf = rr.ReplayBuffer(16, {"obs": rr.Field((), np.float32)},
        ...                       sampler=UniformSampler(), seed=0)
    """

    name = "uniform"
    tracks_sampleable = False

    def __init__(self) -> None:
        self._bound = False
        #: The one-call kernel that reproduces :meth:`draw`: none for a subclass that draws
        #: its own way.
        self.kernel: str | None = "uniform" if type(self).draw is UniformSampler.draw else None

    def bind(self, index: EpisodeIndex, options: DrawOptions) -> None:
        if self._bound:
            raise ConfigError("sampler: this sampler already belongs to another buffer")
        self._bound = True
        self.check_options(options)

    def check_options(self, options: DrawOptions) -> None:
        return None

    def draw(
        self, index: EpisodeIndex, batch_size: int, rng: np.random.Generator, options: DrawOptions
    ) -> Draw:
        sizes = index.sizes()
        total = int(sizes.sum())
        if not total:
            raise nothing_sampleable(index)
        lo = index.env[:, LO]
        if options.recent_ratio == 0 and options.replacement:
            env_ids, t = draw_uniform(lo, sizes, batch_size, rng, total)
        else:
            env_ids, t = draw_mixed(
                lo, lo + sizes, batch_size, rng, recent_ratio=options.recent_ratio,
                recent_steps=options.recent_steps, replacement=options.replacement,
            )  # fmt: skip
        t = index.unhole(env_ids, t)  # drawn over ranges compressed past the holes
        return Draw(env_ids, t, np.ones(batch_size, np.float32))

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
        env_ids, t0 = draw_sequence_starts(
            index, rng, batch_size, length,
            within_episode=within_episode, pad=pad, balance_envs=balance_envs,
        )  # fmt: skip
        return Draw(env_ids, t0, np.ones(batch_size, np.float32))

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
        return None

    def on_settle(self, index: EpisodeIndex, before: Array, t0: int, n: int) -> None:
        """The settled steps, reported to :meth:`on_write` (the buffer calls this only for a
        sampler with ``tracks_sampleable``, such as a subclass that follows the set)."""
        rows_env, rows_t = settled_rows(index.num_envs, index.env_capacity, t0, n)
        self.on_write(index, rows_env, rows_t, *index.sampleable_changes(before))

    def update(self, index: EpisodeIndex, ids: Any, priorities: Any) -> int:
        raise ConfigError(
            "update_priorities: uniform sampling keeps no priorities; use "
            "rr.PrioritizedReplayBuffer (or a prioritized sampler)"
        )

    @property
    def nbytes(self) -> int:
        return 0

    def config(self) -> dict[str, Any]:
        return {}

    def state_meta(self) -> dict[str, Any]:
        return {}

    def state_arrays(self) -> dict[str, Array]:
        return {}

    def load_meta(self, meta: Mapping[str, Any]) -> None:
        return None

    def after_load(self, index: EpisodeIndex) -> None:
        return None
