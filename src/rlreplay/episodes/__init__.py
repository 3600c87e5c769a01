"""The episode index: per-env cursors, step ids, episode starts and ends, and which ids are
sampleable (window known, nothing it reads overwritten).

Pure array functions (:mod:`rlreplay.episodes.kernels`, :mod:`rlreplay.episodes.cuts`) plus one
class, :class:`EpisodeIndex`, that holds their arrays. Knows no field contents.
"""

from rlreplay.episodes.index import EpisodeIndex, expand_ranges, sampleable_delta

__all__ = ["EpisodeIndex", "expand_ranges", "sampleable_delta"]
