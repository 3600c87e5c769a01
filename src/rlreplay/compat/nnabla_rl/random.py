"""Stand-in for ``nnabla_rl.random``: the global generator nnabla-rl's buffers draw from.

nnabla-rl's buffers draw their indices from the module attribute ``drng``, which
``nnabla_rl.utils.reproductions.set_global_seed`` (or :func:`seed`) replaces with a seeded
generator. The buffers of this front-end do the same unless they were given the keyword
``seed=`` (an rlreplay addition), which gives a buffer a generator of its own.

Example:
    >>> import numpy as np
    >>> import rlreplay.compat.nnabla_rl.random as rl_random
    >>> rl_random.seed(0)
    >>> bool(rl_random.drng.integers(10) == np.random.default_rng(0).integers(10))
    True
"""

from __future__ import annotations

import numpy as np

__all__ = ["drng", "seed"]

#: The generator unseeded buffers draw from (replaced by :func:`seed`).
drng: np.random.Generator = np.random.default_rng()


def seed(seed: int | None) -> None:
    """Replace :data:`drng` with ``np.random.default_rng(seed)``, as nnabla-rl does."""
    global drng
    drng = np.random.default_rng(seed)
