"""reagent 0.1's random draws, on the generators 0.1 uses (private to the ReAgent front-end).

A buffer built without ``seed=`` draws as reagent 0.1 does, so that a script seeding its
process (``np.random.seed``, ``random.seed``) gets the batches 0.1 gives after the same adds:

- the uniform buffer: one ``np.random.choice(a=replay_capacity, size=B, replace=True, p=p)``
  on NumPy's global generator, ``p`` the validity mask over the number of valid slots;
- the prioritized buffer: its slot sum tree's ``stratified_sample(B)`` (one
  ``random.uniform`` per stratum, Python's ``random``), then, for each draw of a slot that is
  not valid, ``sum_tree.sample()`` (``random.random()``) until a valid one comes, sharing
  ``max_sample_attempts`` redraws over the batch, as 0.1's loop does.

Deliberate difference 3 (see the migration notes) applies on top: a valid slot that holds no
transition (only :meth:`set_index_valid_status` makes one) is never returned. The uniform
buffer redraws such draws with one more ``np.random.choice`` over the slots that hold one;
the prioritized buffer treats them as invalid. Where 0.1 would return such a slot, or an
invalid slot when its redraws ran out on the last draw of a batch, the batches differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from rlreplay.compat.reagent.circular_replay_buffer import ReplayBuffer
    from rlreplay.compat.reagent.sum_tree import SumTree

__all__ = ["assemblable", "prioritized", "uniform"]

Array = np.ndarray[Any, Any]


def assemblable(buf: ReplayBuffer, slots: Array) -> Array:
    """Whether each slot holds a step whose n-step window the core can assemble (bool mask).

    A slot holds a core id (not a padding row or never written); the window of step ``t`` is
    known when its episode ended (``steps_to_episode_end >= 0``) or when step ``t + n``, the
    next state's step, is stored. Cost ``O(len(slots))``.
    """
    ids = buf._slot_id[slots]
    ok = ids >= 0
    if ok.any():
        held = ids[ok]
        end = int(buf._core.stored_range().end[0])
        known = (buf._core.steps_to_episode_end(held) >= 0) | (held + buf._update_horizon < end)
        ok[ok] = known
    return ok


def uniform(buf: ReplayBuffer, batch_size: int) -> Array:
    """``batch_size`` valid slots drawn as reagent 0.1's ``sample_index_batch``.

    Raises:
        RuntimeError: No valid slot (0.1's message), or none that holds a transition.
    """
    cap = buf._replay_capacity
    if buf._num_valid_indices == 0:
        raise RuntimeError(f"Cannot sample {batch_size} since there are no valid indices so far.")
    p = buf._is_valid.astype(np.float64) / float(buf._num_valid_indices)
    indices: Array = np.random.choice(a=cap, size=batch_size, replace=True, p=p)  # noqa: NPY002
    bad = ~assemblable(buf, indices)
    if bad.any():  # difference 3: never a slot holding no transition
        valid = np.flatnonzero(buf._is_valid)
        good = np.zeros(cap, np.bool_)
        good[valid[assemblable(buf, valid)]] = True
        if not good.any():
            raise RuntimeError(
                f"Cannot sample {batch_size}: the {buf._num_valid_indices} valid indices hold "
                "no transition that can be assembled (padding rows or windows not known yet)"
            )
        q = good.astype(np.float64) / float(good.sum())
        indices[bad] = np.random.choice(a=cap, size=int(bad.sum()), replace=True, p=q)  # noqa: NPY002
    return indices.astype(np.int64, copy=False)


def prioritized(buf: ReplayBuffer, tree: SumTree, batch_size: int) -> Array:
    """``batch_size`` valid slots drawn as reagent 0.1's prioritized ``sample_index_batch``.

    Args:
        buf: The buffer (validity, slots).
        tree: The slot-ordered sum tree of the slot priorities.
        batch_size: Number of slots.

    Raises:
        Exception: The tree is empty (all priorities 0), as 0.1's sum tree raises.
        RuntimeError: ``"Max sample attempts: ..."`` when the redraws run out.
    """
    indices = tree.stratified_sample(batch_size)
    ok = buf._is_valid[indices] & assemblable(buf, np.asarray(indices, np.int64))
    allowed = buf._max_sample_attempts

    def drawable(slot: int) -> bool:
        return bool(buf._is_valid[slot]) and bool(assemblable(buf, np.array([slot]))[0])

    for i in np.flatnonzero(~ok).tolist():
        if allowed == 0:
            raise RuntimeError(
                f"Max sample attempts: Tried {buf._max_sample_attempts} times but only sampled "
                f"{i} valid indices. Batch size is {batch_size}"
            )
        index = indices[i]
        while not drawable(index) and allowed > 0:
            index = tree.sample()  # not stratified, as in 0.1
            allowed -= 1
        if not drawable(index):
            # 0.1 returns this invalid slot when the redraws ran out on the batch's last draw.
            raise RuntimeError(
                f"Max sample attempts: Tried {buf._max_sample_attempts} times but only sampled "
                f"{i} valid indices. Batch size is {batch_size}"
            )
        indices[i] = index
    return np.array(indices, np.int64)
