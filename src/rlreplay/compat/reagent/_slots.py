"""Slot bookkeeping of the ReAgent buffer (private to the ReAgent front-end).

The ring of ``replay_capacity`` slots maps onto core ids: ``slot_id[s]`` is the core id slot
``s`` holds (``-1`` for a padding row or a slot never written) and ``id_slot[i % capacity]`` the
slot that holds core id ``i`` (``-1`` once released). Writing a step marks validity as
ReAgent's ``add`` does; sampling draws core ids and keeps those whose slot is valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay import EmptyBufferError, InvalidIdError
from rlreplay.compat.reagent import _slotread
from rlreplay.compat.reagent._args import positive_int
from rlreplay.compat.reagent._assembly import _Batch
from rlreplay.compat.reagent._elements import batch_size_of
from rlreplay.compat.reagent._errors import (
    IndexAssertionError,
    SlotRangeError,
    StackedRewardError,
)
from rlreplay.compat.reagent._state import BufferState

if TYPE_CHECKING:
    from rlreplay import ReplayBuffer as CoreReplayBuffer

__all__ = [
    "SlotRangeError",
    "as_slots",
    "leaf_count",
    "refuse_unsampleable",
    "batch_slots",
    "choose_slots",
    "drawable_slots",
    "gather",
    "sample_slots",
    "slot_index",
    "slots_of_ids",
    "write_padding",
    "write_step",
]

Array = np.ndarray[Any, Any]


# ---------------------------------------------------------------------- writing
def write_padding(buf: BufferState) -> None:
    """Write one zero padding row: counted in add_count, stored nowhere.

    The slot's validity is left as it is: reagent 0.1 writes the row with ``_add`` (from
    ``_add_zero_transition``), which marks nothing, so a slot set valid with
    ``set_index_valid_status`` stays valid and counted in ``size``, and is sampled as 0.1
    reads it (a zero row, then whatever the slots after it hold: ``_slotread``).
    """
    cur = buf.cursor()
    buf._release(cur)
    buf._slot_id[cur] = -1
    buf._terminal_rows[cur] = 0
    buf._add_count += 1


def write_step(buf: BufferState, step: dict[str, Any], values: Sequence[Any]) -> None:
    """Store one real step in the core and mark validity exactly as ReAgent's ``add``."""
    cap, n = buf._replay_capacity, buf._update_horizon
    new_id = int(buf._core.add(**step)[0])
    if buf._episode_ended:
        buf._num_transitions_in_current_episode = 0
    cur = buf.cursor()
    buf._mark(cur, False)
    if buf._num_transitions_in_current_episode >= n:
        buf._mark((cur - n) % cap, True)
    buf._release(cur, for_step=True)
    buf._slot_id[cur] = new_id
    buf._terminal_rows[cur] = values[3]  # as 0.1's _store["terminal"][cursor] = terminal
    buf._id_slot[new_id % cap] = cur
    rewards = getattr(buf, "_id_reward", None)  # (absent from a buffer pickled before it)
    if rewards is None and getattr(buf, "_id_reward_tracked", False):
        rewards = buf._id_reward = reward_ring(buf._core)
    if rewards is not None:
        rewards[new_id % rewards.shape[0]] = step["reward"]
    buf._on_step_written(new_id, values)
    buf._add_count += 1
    buf._num_transitions_in_current_episode += 1
    done = bool(step["terminated"])
    buf._episode_ended = done
    # The stacks of the oldest stack_size - 1 slots would read the row just overwritten.
    for i in range(buf._stack_size - 1):
        buf._mark((buf.cursor() + i) % cap, False)
    if done:
        for i in range(min(n, buf._num_transitions_in_current_episode)):
            buf._mark((buf.cursor() - i - 1) % cap, True)


def reward_ring(core: CoreReplayBuffer) -> Array:
    """A zero ring of the core's rewards, one entry per step the core can hold, at ``id % len``.

    :func:`write_step` writes each step's reward there as it adds the step (the value the
    core stores, of the core's dtype), so the reward of any id the core still holds is at
    ``id % len``: the core holds at most ``len`` consecutive ids. The n-step sum reads its
    windows there (``_assembly.n_step_reward``), one NumPy gather instead of a core query.
    """
    field = core.schema.fields["reward"]
    return np.zeros((core.capacity, *field.shape), field.dtype)


# ---------------------------------------------------------------------- slots and ids
def slot_index(index: Any, cap: int) -> int:
    """One slot in ``[0, cap)`` from an int, NumPy integer or one-integer array/tensor.

    Read as ReAgent's ``self._is_index_valid[index]`` (a torch tensor) reads it: a negative
    index counts from the end.

    Raises:
        IndexError: Not one integer, or outside ``[-cap, cap)`` (:class:`SlotRangeError`).
    """
    arr = np.asarray(index.cpu() if hasattr(index, "cpu") else index)
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise SlotRangeError(f"index: expected one int slot, got {index!r}")
    i = int(arr.reshape(-1)[0])
    if not -cap <= i < cap:
        raise SlotRangeError(f"index {i} is out of bounds for {cap} slots")
    return i % cap


def as_slots(indices: Any, cap: int) -> Array:
    """Leaf numbers of ReAgent's sum tree from a tensor/array/list of any shape, as int64.

    ReAgent reads ``sum_tree.nodes[-1][index]``: its leaf level has ``2**ceil(log2(cap))``
    entries (slots, then zero padding leaves), and a negative index counts back from its end.
    The result lies in ``[0, leaf_count(cap))``; values ``>= cap`` are padding leaves.

    Raises:
        AssertionError: Not integers (ReAgent asserts an integer dtype); also
            :class:`rlreplay.InvalidIdError`.
        IndexError: An index outside ``[-leaves, leaves)`` (:class:`SlotRangeError`).
    """
    arr = _numpy(indices).reshape(-1)
    if arr.size and arr.dtype.kind not in "iu":
        raise IndexAssertionError(f"Indices must be integers, given: {arr.dtype}")
    arr = arr.astype(np.int64)
    leaves = leaf_count(cap)
    bad = (arr < -leaves) | (arr >= leaves)
    if bad.any():
        raise SlotRangeError(
            f"indices {arr[bad][:5].tolist()} are out of bounds for the {leaves} tree leaves"
        )
    out: Array = arr % leaves
    return out


def leaf_count(cap: int) -> int:
    """Leaves of ReAgent's sum tree for ``cap`` slots: the power of two ``>= cap``."""
    return 1 << (cap - 1).bit_length()


def batch_slots(indices: Any, cap: int, *, wrap: bool = False) -> tuple[Array, Array]:
    """The slots of ``sample_transition_batch(indices=...)``, read as ReAgent reads them.

    ReAgent converts the indices with ``.type(torch.int64)`` (floats are truncated) and reads
    the stacks modulo ``replay_capacity``, but every other element as ``_store[name][indices]``:
    an index outside ``[-replay_capacity, replay_capacity)`` raises NumPy's ``IndexError``
    there (reagent 0.1), and does here (:class:`SlotRangeError`, also an rlreplay error).
    With ``wrap`` (``return_everything_as_stack``: 0.1 reads every element as a stack) any
    index is read modulo ``cap``.
    """
    arr = _numpy(indices).reshape(-1)
    if arr.size and arr.dtype.kind not in "iuf":
        raise IndexAssertionError(f"indices: expected numbers, got dtype {arr.dtype}")
    raw = np.trunc(arr).astype(np.int64) if arr.dtype.kind == "f" else arr.astype(np.int64)
    outside = (raw >= cap) | (raw < -cap)
    if outside.any() and not wrap:
        raise SlotRangeError(
            f"index {int(raw[outside][0])} is out of bounds for axis 0 with size {cap} "
            f"(indices: expected slots in [-{cap}, {cap}), as ReAgent reads _store[name][indices])"
        )
    out: Array = raw % cap
    return out, raw


def refuse_unsampleable(buf: BufferState) -> None:
    """Raise where reagent 0.1's ``sample_transition_batch`` fails after its draw.

    Raises:
        IndexError: ``update_horizon=0``: 0.1's ``traj_lengths`` read ``terminals[:, -1]`` of
            an empty ``(B, 0)`` window, whatever the indices.
        NotImplementedError: ``return_everything_as_stack`` with ``update_horizon > 1`` and
            no timeline format: 0.1 refuses to stack n-step rewards at the reward element.
    """
    if buf._update_horizon == 0:
        raise SlotRangeError(
            "index -1 is out of bounds for axis 1 with size 0 (update_horizon=0: the "
            "n-step window of every transition is empty, as in reagent 0.1)"
        )
    stacked = buf._return_everything_as_stack and not buf._return_as_timeline_format
    if stacked and buf._update_horizon > 1:
        raise StackedRewardError.for_horizon(buf._update_horizon)


def _numpy(indices: Any) -> Array:
    out: Array = np.asarray(indices.cpu() if hasattr(indices, "cpu") else indices)
    return out


def slots_of_ids(slot_id: Array, id_slot: Array, ids: Array) -> Array:
    """Slot of each core id, or -1 if no slot holds it any more."""
    slots = id_slot[ids % id_slot.size]
    held = slots >= 0
    held[held] = slot_id[slots[held]] == ids[held]
    out: Array = np.where(held, slots, -1)
    return out


def gather(buf: BufferState, slots: Array, *, check: bool = True) -> _Batch:
    """The data of the given slots: core transitions where the slots hold them, else raw.

    A row is the core's transition of the step its slot holds when the slots reagent 0.1
    reads for it hold that step's episode (:func:`._slotread.intact`); the other rows
    (``raw``) are read from the slots as 0.1 reads them. ``check=False`` skips the test for
    slots known to pass it: every slot valid by ``add``'s marks (none set valid by hand).
    """
    ids = buf._slot_id[slots]
    ok = _slotread.intact(buf, slots) if check else None
    # states are returned stack-last: the core writes its frame stacks so (stack_size > 1)
    layout = "last" if buf._stack_size > 1 else "first"
    if ok is None or ok.all():  # the fast path: every row from the core
        try:
            return _Batch(slots, ids, buf._core.get_transitions(ids, stack_layout=layout))
        except InvalidIdError:  # the slots' read is 0.1's answer whatever the core says
            ok = _slotread.intact(buf, slots)
    assert ok is not None  # (the fast path returned, or found rows to read raw)
    core = None
    if ok.any():
        try:
            core = buf._core.get_transitions(ids[ok], stack_layout=layout)
        except InvalidIdError:
            ok[:] = False
    return _Batch(slots, ids, core, raw=~ok)


# ---------------------------------------------------------------------- sampling
def sample_slots(buf: BufferState, batch_size: int) -> Array:
    """``batch_size`` valid slots.

    Built without ``seed=``: reagent 0.1's draws (``buf._global_draw``, see ``_draws``).
    With a seed: core draws, redrawn where the slot is not valid here; after
    ``max_sample_attempts`` rejected draws the rest come from ``buf._sample_exhausted``.
    While a slot set valid by the user is valid (it may hold nothing the core can draw),
    ``buf._forced_draw`` draws over the valid slots themselves, as 0.1 does.
    """
    if buf._seed is None:  # reagent 0.1's draws, on the generators it uses
        return buf._global_draw(batch_size)
    if buf._num_forced:  # slots the core may not draw are valid: exact draws over them all
        return buf._forced_draw(batch_size)
    if buf._num_valid_indices == 0:
        raise RuntimeError(f"Cannot sample {batch_size} since there are no valid indices so far.")
    out = np.empty(batch_size, np.int64)
    todo = np.arange(batch_size)
    rejected = 0
    while todo.size and rejected <= buf._max_sample_attempts:
        try:
            ids = buf._core.sample(int(todo.size)).ids
        except EmptyBufferError:
            break
        slots = slots_of_ids(buf._slot_id, buf._id_slot, ids)
        ok = slots >= 0
        ok[ok] = buf._is_valid[slots[ok]]
        out[todo[ok]] = slots[ok]
        todo = todo[~ok]
        rejected += int(todo.size)
    if todo.size:
        out[todo] = buf._sample_exhausted(int(todo.size), batch_size)
    return out


def choose_slots(
    buf: BufferState, batch_size: int | None, indices: Any
) -> tuple[Array, Array | None]:
    """The slots of a transition batch: ``indices`` checked, or sampled (``batch_size``).

    Returns:
        The slots (in ``[0, replay_capacity)``) and the given indices as int64 (``None`` when
        sampled): 0.1 echoes those, a negative one as it is, in the ``indices`` element.
    """
    b = buf._batch_size if batch_size is None else positive_int("batch_size", batch_size, 0)
    if indices is None:  # a batch that is drawn: sized by b alone, checked before the draw
        b = batch_size_of(buf, b, "sample_transition_batch")
    if indices is None:
        slots = sample_slots(buf, b)
        if b == 0 and buf._prioritized:
            # 0.1: np.array([]) of the stratified draw is float64, which cannot index _store
            raise SlotRangeError("arrays used as indices must be of integer (or boolean) type")
        return slots, None
    count = _numpy(indices).reshape(-1).size
    if b != count:
        # reagent 0.1 (and the seed: "If None, the default batch_size will be used"):
        # assert len(indices) == batch_size, before any index is read
        given_as = "batch_size" if batch_size is not None else "the default batch_size"
        raise IndexAssertionError(
            f"indices: expected {given_as} = {b} of them (reagent asserts len(indices) == "
            f"batch_size), got {count}"
        )
    refuse_unsampleable(buf)  # 0.1 fails there before it reads _store[name][indices]
    # 0.1 reads every element of a return_everything_as_stack batch as a stack, modulo
    # replay_capacity: no index is out of range there (the timeline format is not 0.1's)
    wrap = buf._return_everything_as_stack and not buf._return_as_timeline_format
    return batch_slots(indices, buf._replay_capacity, wrap=wrap)


def drawable_slots(core: CoreReplayBuffer, slot_id: Array, is_valid: Array) -> Array:
    """The valid slots holding a step the core can assemble (and so draw)."""
    valid = np.flatnonzero(is_valid)
    ids = slot_id[valid]
    ok = np.isin(ids, core.sampleable_ids()) & (ids >= 0)
    out: Array = valid[ok]
    return out
