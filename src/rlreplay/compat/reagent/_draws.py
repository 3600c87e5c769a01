"""reagent 0.1's random draws, on the generators 0.1 uses (private to the ReAgent front-end).

A buffer built without ``seed=`` draws as reagent 0.1 does, so that a script seeding its
process (``np.random.seed``, ``random.seed``) gets the batches 0.1 gives after the same adds:

- the uniform buffer: one ``np.random.choice(a=replay_capacity, size=B, replace=True, p=p)``
  on NumPy's global generator, ``p`` the validity mask over the number of valid slots (the
  same generator call and slots, found over the valid slots only: :func:`uniform`);
- the prioritized buffer: its slot sum tree's ``stratified_sample(B)`` (one
  ``random.uniform`` per stratum, Python's ``random``), then, for each draw of a slot that is
  not valid, ``sum_tree.sample()`` (``random.random()``) until a valid one comes, sharing
  ``max_sample_attempts`` redraws over the batch, as 0.1's loop does.

A slot set valid with :meth:`set_index_valid_status` is drawn as 0.1 draws it, whatever it
holds. Deliberate difference 3 (see the migration notes) applies to the prioritized loop
only: where 0.1 returns an invalid slot because its redraws ran out on the last draw of a
batch, this raises ``RuntimeError("Max sample attempts: ...")``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.compat.reagent._kernels import sequential_cdf

if TYPE_CHECKING:
    from rlreplay.compat.reagent._state import BufferState
    from rlreplay.compat.reagent.sum_tree import SumTree

__all__ = ["level_cdf", "prioritized", "uniform"]

Array = np.ndarray[Any, Any]


def uniform(buf: BufferState, batch_size: int) -> Array:
    """``batch_size`` valid slots drawn as reagent 0.1's ``sample_index_batch``.

    0.1 draws ``np.random.choice(a=capacity, size=B, replace=True, p=p)`` with ``p`` the
    validity mask over the ``k`` valid slots, ``O(capacity)`` each time (about 1 ms at
    100,000 slots). NumPy's ``choice`` draws ``u = random_sample(B)`` and returns
    ``cdf.searchsorted(u, side="right")``, ``cdf = p.cumsum() / p.cumsum()[-1]``. Over the
    valid slots ``p`` is ``1/k`` and elsewhere ``0.0``, whose addition leaves a partial sum
    unchanged (exactly), so ``cdf`` at the ``j``-th valid slot is the ``j``-th entry of
    :func:`level_cdf` ``(k)``, and between two valid slots it stays at the earlier one's. The
    first ``cdf`` entry above ``u`` is then the ``j``-th valid slot, ``j`` the number of
    ``level_cdf(k)`` entries ``<= u``: the same slots from the same generator call, for one
    scan of the validity mask, ``O(B log k)`` and an ``O(k)`` cumulative sum cached per ``k``
    (``tests/compat/test_reagent_draws.py`` checks the slots and the generator state against
    ``np.random.choice`` over many seeds and validity masks).

    Raises:
        RuntimeError: No valid slot (0.1's message).
    """
    if buf._num_valid_indices == 0:
        raise RuntimeError(f"Cannot sample {batch_size} since there are no valid indices so far.")
    valid = np.flatnonzero(buf._is_valid)
    u = np.random.random_sample(batch_size)  # noqa: NPY002 - the one draw 0.1's choice makes
    indices: Array = valid[level_cdf(valid.size).searchsorted(u, side="right")]
    return indices


@functools.lru_cache(maxsize=4)
def level_cdf(k: int) -> Array:
    """NumPy ``choice``'s ``cdf`` of ``k`` equal probabilities ``1/k``, read-only.

    ``np.cumsum`` adds in order (``add.accumulate``), as ``choice`` does over the whole mask;
    then every entry is divided by the last, as ``choice`` normalises. A compiled loop makes
    the same operations in the same order (:func:`~._kernels.sequential_cdf`: the same bits,
    about 2 µs for 2,500 levels against NumPy's 11, 60 µs for 100,000). It is made again
    whenever the number of valid slots changed, so in a training loop once per sample.
    """
    cdf: Array = sequential_cdf(k)  # compiled: the same additions (_kernels)
    cdf.flags.writeable = False
    return cdf


def prioritized(
    buf: BufferState, tree: SumTree, batch_size: int, rng: np.random.Generator | None = None
) -> Array:
    """``batch_size`` valid slots drawn as reagent 0.1's prioritized ``sample_index_batch``.

    Args:
        buf: The buffer (validity).
        tree: The slot-ordered sum tree of the slot priorities.
        batch_size: Number of slots.
        rng: ``None``: 0.1's query values (Python's ``random``, through the tree). Else the
            same draws with query values from this generator (a seeded buffer).

    Raises:
        Exception: The tree is empty (all priorities 0), as 0.1's sum tree raises.
        RuntimeError: ``"Max sample attempts: ..."`` when the redraws run out.
    """
    if rng is None:
        drawn = tree._stratified(batch_size)
    else:
        bounds = np.linspace(0.0, 1.0, batch_size + 1)
        drawn = np.array(
            [tree.sample(float(rng.uniform(bounds[i], bounds[i + 1]))) for i in range(batch_size)],
            np.int64,
        )
    valid = buf._is_valid
    redraw = np.flatnonzero(~valid[drawn])
    if redraw.size == 0:  # the usual case: every draw valid
        return drawn
    indices: list[int] = drawn.tolist()
    allowed = buf._max_sample_attempts

    def error(i: int) -> RuntimeError:
        return RuntimeError(
            f"Max sample attempts: Tried {buf._max_sample_attempts} times but only sampled "
            f"{i} valid indices. Batch size is {batch_size}"
        )

    for i in redraw.tolist():
        if allowed == 0:
            raise error(i)
        index = indices[i]
        while not valid[index] and allowed > 0:
            index = tree.sample(None if rng is None else float(rng.random()))  # not stratified
            allowed -= 1
        if not valid[index]:
            # Difference 3: 0.1 returns this invalid slot when the redraws ran out on the
            # batch's last draw (a transition its validity marks say not to sample).
            raise error(i)
        indices[i] = index
    return np.array(indices, np.int64)
