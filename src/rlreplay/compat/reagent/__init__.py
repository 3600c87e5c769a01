"""ReAgent's replay memory on rlreplay: change the import line, keep the code.

Replace ``reagent.replay_memory`` by ``rlreplay.compat.reagent`` in your imports. The package
re-exports :class:`ReplayBuffer` and :class:`PrioritizedReplayBuffer` as ReAgent's does; the
submodules ``circular_replay_buffer``, ``prioritized_replay_buffer``, ``sum_tree`` and ``utils``
mirror ReAgent's. torch is imported when tensors are built, pandas when a DataFrame is.
The differences from ReAgent are listed in ``docs/migrating/reagent.md``.

Example:
    >>> import rlreplay.compat.reagent as rm
    >>> rm.circular_replay_buffer.ReplayBuffer is rm.ReplayBuffer
    True
"""

from rlreplay.compat.reagent import (
    circular_replay_buffer,
    prioritized_replay_buffer,
    sum_tree,
    utils,
)
from rlreplay.compat.reagent.circular_replay_buffer import ReplayBuffer
from rlreplay.compat.reagent.prioritized_replay_buffer import PrioritizedReplayBuffer

__all__ = [
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "circular_replay_buffer",
    "prioritized_replay_buffer",
    "sum_tree",
    "utils",
]
