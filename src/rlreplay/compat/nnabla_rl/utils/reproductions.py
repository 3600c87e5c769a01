"""Stand-in for ``nnabla_rl.utils.reproductions``: seeding for reproducible runs."""

from __future__ import annotations

import random as py_random

import numpy as np

import rlreplay.compat.nnabla_rl.random as rl_random

__all__ = ["set_global_seed"]


def set_global_seed(seed: int) -> None:
    """Seed Python's and NumPy's global generators and nnabla-rl's ``drng``, as nnabla-rl does.

    (nnabla-rl also seeds nnabla's generator; nnabla is not needed here.)

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
        >>> from rlreplay.compat.nnabla_rl.utils.reproductions import set_global_seed
        >>> def drawn():
        ...     buffer = ReplayBuffer(capacity=10)
        ...     buffer.append_all(list(range(10)))
        ...     return buffer.sample(num_samples=3)[0]
        >>> set_global_seed(5)
        >>> first = drawn()
        >>> set_global_seed(5)
        >>> drawn() == first
        True
    """
    py_random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 (nnabla-rl seeds NumPy's legacy global generator)
    rl_random.seed(seed)
