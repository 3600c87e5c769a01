"""ReAgent's transition elements, assembled from core batches (private to the ReAgent front-end).

:func:`transition_arrays` turns the core's transitions of a batch of slots into the elements
ReAgent returns: plain ones, the ``return_everything_as_stack`` stacks of other fields, and the
``return_as_timeline_format`` per-step windows. Stacks of fields other than observations are
raw runs of ``core.get_sequences`` stacked by the core's :func:`rlreplay.assemble.stack_frames`.
Arrays are NumPy throughout; :func:`to_torch` makes the returned tensors.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from rlreplay import Batch
from rlreplay.assemble import stack_frames
from rlreplay.compat.reagent._kernels import interleaved
from rlreplay.compat.reagent._state import BufferState

if TYPE_CHECKING:
    from rlreplay import ReplayBuffer as CoreReplayBuffer

__all__ = [
    "EXTRA",
    "core_name",
    "field_stacks",
    "shift_in",
    "stack_last",
    "state_stack",
    "n_step_reward",
    "timeline",
    "to_torch",
    "window_rewards",
    "transition_arrays",
    "c_contiguous",
    "warn_complex",
]

Array = np.ndarray[Any, Any]

EXTRA = "extra_"  # prefix of extra storage fields in the core (never clashes with its names)


class _Batch(NamedTuple):
    """Core data for a batch of slots (internal)."""

    slots: Array
    ids: Array
    core: Batch | None  # the core's transitions of the rows not read raw (None: no such row)
    given: Array | None = None  # the indices as the caller gave them (int64), if given
    raw: Array | None = None  # rows read from the slots as reagent 0.1 reads them (_slotread)


def warn_complex(complex_store: Collection[str], names: Sequence[str]) -> None:
    """Warn as reagent 0.1's sampling does when elements were loaded from complex arrays.

    0.1's ``load`` keeps a complex ``$store$_<x>`` array as it is, and each sample casts every
    returned element read from it with ``batch.astype(element.type)``: one NumPy
    ``ComplexWarning`` per such element (``state`` and ``next_state`` for the observation,
    ``x`` and ``next_x`` for the others), in the order of the elements. ``terminal`` is read
    with ``astype(np.bool)``, which does not warn. The values are the real parts, which the
    rows already hold (``_checkpoint.check_rows``).
    """
    if not complex_store:
        return
    for name in names:
        stored = name[len("next_") :] if name.startswith("next_") else name
        stored = "observation" if stored == "state" else stored
        if stored in complex_store:
            warnings.warn(
                np.exceptions.ComplexWarning(
                    "Casting complex values to real discards the imaginary part"
                ),
                stacklevel=3,
            )


def core_name(name: str) -> str:
    """The core field storing ReAgent element ``name`` (extras get the ``extra_`` prefix)."""
    return {"observation": "obs", "action": "action", "reward": "reward"}.get(name, EXTRA + name)


def transition_arrays(buf: BufferState, batch: _Batch) -> dict[str, Any]:
    """Element name -> NumPy array (or list of arrays in timeline format).

    Every row comes from the core (``batch.raw`` is ``None``); ``_slotread.mixed_arrays``
    handles batches with rows read from the slots.
    """
    tb, ids = batch.core, batch.ids
    assert tb is not None and batch.raw is None
    k = buf._stack_size
    stack_all = buf._return_everything_as_stack  # with stack_size 1 too, as ReAgent
    m = tb.steps
    ended = tb.terminated
    extras = [e.name for e in buf._extra_storage_types]
    # next_reward: the reward at t+m, 0 where the window reached a terminal (the core's
    # next_fields; an episode ends only at a terminal here)
    next_reward = tb.next_reward.astype(buf._reward_dtype, copy=False)
    # stack_size > 1: the core's stacks are stack-last already (_slots.gather), C-contiguous
    out: dict[str, Any] = {
        "state": tb.obs if k > 1 else state_stack(tb.obs, k),
        "next_state": tb.next_obs if k > 1 else state_stack(tb.next_obs, k),
        "action": tb.action,
        "reward": n_step_reward(buf, ids, m, tb.reward),
        "next_action": tb.next_action,
        "next_reward": next_reward,
        "terminal": ended,
        # 0.1 returns the indices as given (a negative one too); drawn ones are the slots.
        "indices": batch.slots if batch.given is None else batch.given,
        "step": m.astype(np.int64, copy=False),
    }
    for x in extras:
        out[x] = tb[EXTRA + x]
        out["next_" + x] = tb["next_" + EXTRA + x]
    if stack_all:
        names = ["action", "reward", *extras]
        kk = max(k, 1)  # stack_size 0: stacks of one step, emptied below
        now = field_stacks(buf._core, kk, ids, [core_name(x) for x in names])
        last = field_stacks(buf._core, kk, ids + m - 1, [core_name(x) for x in names])
        for x in names:
            c = core_name(x)
            nxt = shift_in(last[c], out["next_" + x])
            out[x] = np.moveaxis(now[c], 1, -1)[..., :k]
            out["next_" + x] = np.moveaxis(nxt, 1, -1)[..., :k]
        # terminal and step stay unstacked: ReAgent reads terminal at t+m-1 only.
    if ended.any():
        after_terminal(buf, batch.slots[ended] + m[ended], ended, out, stack_all, extras)
    if buf._return_as_timeline_format:
        plain = {x: out[x] for x in out if x.startswith("next_")}
        out.update(timeline(buf._core, k, buf._update_horizon, batch, stack_all, extras))
        # After a terminal the last next value is undefined (the seed); it is the value the
        # plain format returns there, read from the slot after the window as 0.1 does.
        for x, values in plain.items():
            for i in np.flatnonzero(ended).tolist():
                row = out[x][i] = out[x][i].copy()
                row[-1] = values[i].reshape(row.shape[1:])
    return out


def after_terminal(
    buf: BufferState,
    nxt: Array,
    rows: Array,
    out: dict[str, Any],
    stack_all: bool,
    extras: list[str],
) -> None:
    """``next_*`` of the terminal ``rows``: the slots at ``nxt`` (mod capacity) as they are.

    reagent 0.1 reads ``next_state`` as the stack at ``next_indices`` and ``next_<x>`` as
    ``_store[x][next_indices]`` (a stack of them with ``return_everything_as_stack``) whatever
    the slots hold after a terminal (documented as undefined): the next episode's padding or
    first step, or a step not overwritten yet. So does this, with zeros where a slot holds no
    step the core keeps (0.1 reads the oldest step at the cursor slot there, or ``np.empty``
    memory never written).
    """
    cap, k = buf._replay_capacity, buf._stack_size
    signature = {e.name: e for e in buf.get_storage_signature()}
    stack = (nxt[:, None] + np.arange(-k + 1, 1)) % cap  # ReAgent's stack_indices
    # The core ids the slots hold (-1: none), looked up once for every element read.
    stack_ids = buf._slot_id[stack]
    next_ids = buf._slot_id[nxt % cap]  # (the last column of stack_ids when k > 0)

    def slots(name: str, ids: Array) -> Array:  # _ranges.slot_rows (which imports this module)
        e = signature[name]
        got: Array = np.zeros((*ids.shape, *e.shape), e.type)
        held = ids >= 0
        if held.any():
            got[held] = buf._core.get_field(core_name(name), ids[held])
        return got

    if k > 0:  # stack_size 0: empty stacks, nothing to read
        frames = slots("observation", stack_ids)
        out["next_state"][rows] = state_stack(frames[:, 0] if k == 1 else frames, k)
    for x in ["action", "reward", *extras]:
        value = stack_last(slots(x, stack_ids), k) if stack_all else slots(x, next_ids)
        out["next_" + x][rows] = value


def field_stacks(core: CoreReplayBuffer, k: int, ids: Array, names: list[str]) -> dict[str, Array]:
    """``(B, k, ...)`` stacks of raw core fields over steps ``ids-k+1 .. ids``.

    Frames before the episode's first step are zero (what ReAgent's padding rows hold). The
    raw runs come from ``core.get_sequences`` and are stacked by the core's
    :func:`rlreplay.assemble.stack_frames`.
    """
    b = ids.size
    if b == 0:
        fields = core.schema.fields
        return {c: np.zeros((0, k, *fields[c].shape), fields[c].dtype) for c in names}
    start = np.maximum(ids - (k - 1), core.episode_begin(ids))
    runs = core.get_sequences(start, k, within_episode=True)
    base = np.arange(b, dtype=np.int64) * k
    last = ids - start  # where step `ids` sits in its run
    zero = np.zeros(b, np.int64)
    out = {}
    for c in names:
        col = runs[c].reshape(b * k, *runs[c].shape[2:])
        out[c] = stack_frames(col.__getitem__, base, last, zero, k, k, True)
    return out


def timeline(
    core: CoreReplayBuffer, k: int, n: int, batch: _Batch, stack_all: bool, extras: list[str]
) -> dict[str, Any]:
    """ReAgent's timeline format: per transition, the ``m`` per-step values of its window.

    ``reward[i]`` holds the rewards at ``t .. t+m-1``; ``next_state[i]``, ``next_action[i]``,
    ``next_reward[i]`` and ``next_<x>[i]`` hold the values at ``t+1 .. t+m`` (at a terminal
    the last of them is the zero placeholder / zeros). Each is a ``(m, ...)`` array. ``k`` is
    the stack size, ``n`` the update horizon.
    """
    tb, ids = batch.core, batch.ids
    assert tb is not None
    m = tb.steps
    runs = core.get_sequences(ids, n + 1, within_episode=True)  # raw t .. t+n
    offs = np.concatenate([[0], np.cumsum(m)])
    targets = np.repeat(ids, m) + np.arange(int(offs[-1])) - np.repeat(offs[:-1], m)
    stacked = (["obs"] if k != 1 else []) + (
        [core_name(x) for x in ("action", "reward", *extras)] if stack_all else []
    )
    stacks = field_stacks(core, k, targets, stacked) if stacked and k > 0 else {}
    fields = core.schema.fields

    def window(c: str, nxt: bool) -> list[Array]:
        rows = []
        for i in range(ids.size):
            lo, mi = int(offs[i]), int(m[i])
            if k == 0 and c in stacked:  # stack_size 0: empty stacks, as the plain format
                rows.append(np.zeros((mi, *fields[c].shape, 0), fields[c].dtype))
                continue
            if c not in stacks:
                if c == "obs":  # stack_size 1: each entry shaped as the plain next_state
                    rows.append(state_stack(runs["next_obs"][i, :mi], 1))
                    continue
                rows.append(runs[c][i, int(nxt) : mi + nxt])
                continue
            own = stacks[c][lo : lo + mi]
            if not nxt:
                rows.append(stack_last(own, k))
                continue
            newest = runs["next_obs"][i, mi - 1] if c == "obs" else runs[c][i, mi]
            after = shift_in(own[-1:], newest[None])
            rows.append(stack_last(np.concatenate([own[1:], after]), k))
        return rows

    out: dict[str, Any] = {
        "reward": window("reward", False),
        "next_state": window("obs", True),
        "next_action": window("action", True),
        "next_reward": window("reward", True),
    }
    for x in extras:
        out["next_" + x] = window(EXTRA + x, True)
    return out


def state_stack(frames: Array, k: int) -> Array:
    """States as ReAgent returns them: ``(B, *observation_shape, k)``, stack axis last.

    With ``k == 1`` ReAgent builds ``(B, *observation_shape, 1)`` and then squeezes axis 2 of
    the tensor only (``t.squeeze(2)``): a vector observation gives ``(B, n)``, a scalar one
    ``(B, 1)``, and an image ``(h, w)`` keeps its stack axis ``(B, h, w, 1)`` unless ``w == 1``.
    """
    if k > 1:
        return stack_last(frames, k)
    if k == 0:  # ReAgent's empty stacks: (B, *observation_shape, 0)
        return frames[..., None][..., :0]
    out = frames[..., None]
    return out[:, :, 0] if out.ndim > 2 and out.shape[2] == 1 else out


def n_step_reward(buf: BufferState, ids: Array, m: Array, core_reward: Array) -> Array:
    """The n-step reward as ReAgent computes it: ``sum_{j<m} gamma**j * r_{t+j}``.

    ReAgent multiplies the stored rewards by float64 ``gamma ** j`` and sums them in float64
    before casting to the reward dtype; the same operations here give the same bits (the
    core's float32 sum can differ in the last place). A vector reward is discounted per step
    (ReAgent's ``decays`` broadcast against the reward axis instead: see the migration notes).
    """
    n = buf._update_horizon
    if n == 1 or ids.size == 0:
        return core_reward.astype(buf._reward_dtype, copy=False)
    ring = getattr(buf, "_id_reward", None)
    runs = window_rewards(buf._core, ids, m, n) if ring is None else ring_rewards(ring, ids, m, n)
    # ReAgent's rewards * decays * masks: the runs hold zeros past each window already, and a
    # mask of 1.0 leaves a product as it is, so the mask's multiplication changes no bit
    out: Array = (runs * _decays(buf._gamma, n, runs.ndim)).sum(axis=1)
    return out.astype(buf._reward_dtype, copy=False)


@functools.lru_cache(maxsize=16)
def _decays(gamma: float, n: int, ndim: int) -> Array:
    """ReAgent's ``gamma ** np.arange(n)`` (float64), shaped ``(1, n, 1, ...)`` for ``ndim``
    axes, read-only (kept per call's arguments)."""
    out: Array = (gamma ** np.arange(n)).reshape(1, n, *([1] * (ndim - 2)))
    out.flags.writeable = False
    return out


def window_rewards(core: CoreReplayBuffer, ids: Array, m: Array, n: int) -> Array:
    """``(B, n, ...)`` rewards at ``ids + j`` for ``j < m``, zeros after (float core dtype).

    What ``core.get_sequences(ids, n)["reward"]`` gives for the windows of transitions (their
    runs stop after ``m`` real steps, the rest is zero padding), reading only the reward
    column: the runs would also gather every other field (frames included).
    """
    field = core.schema.fields["reward"]
    if ids.size and int(m.min()) >= n:  # no window cut short (most batches): no mask
        rewards: Array = core.get_field("reward", (ids[:, None] + np.arange(n)).reshape(-1))
        return rewards.reshape(ids.size, n, *field.shape)
    real = np.arange(n)[None, :] < m[:, None]
    out: Array = np.zeros((ids.size, n, *field.shape), field.dtype)
    out[real] = core.get_field("reward", (ids[:, None] + np.arange(n))[real])
    return out


def ring_rewards(ring: Array, ids: Array, m: Array, n: int) -> Array:
    """:func:`window_rewards` read from the buffer's ring of rewards by id (``id % len``,
    ``_slots.reward_ring``): the same values, for ids the core holds (each ``ids + j``,
    ``j < m``, is one: the windows of transitions it assembled)."""
    out: Array = ring[(ids[:, None] + np.arange(n)) % ring.shape[0]]
    if ids.size and int(m.min()) < n:
        out[np.arange(n)[None, :] >= m[:, None]] = 0  # past a window cut short: zeros
    return out


def stack_last(frames: Array, k: int) -> Array:
    """``(B, k, *shape)`` stacks as ReAgent returns them, the stack axis last.

    With ``k == 1`` too: a stack of one step keeps its trailing axis of size 1, as the plain
    format's ``return_everything_as_stack`` elements do (``(B, *shape, 1)``).
    """
    del k  # the stack length is the size of axis 1
    return frames.transpose(0, *range(2, frames.ndim), 1)  # np.moveaxis(frames, 1, -1)


def shift_in(stacks: Array, newest: Array) -> Array:
    """Stacks one step later: drop the oldest frame, append ``newest`` (``(B, *shape)``)."""
    out: Array = np.concatenate([stacks[:, 1:], np.asarray(newest)[:, None]], axis=1)
    return out


def to_torch(value: Any) -> Any:
    """A tensor (or list of tensors) of ``value``; a 1-D result becomes ``(B, 1)``.

    Each array keeps its number of axes (``np.ascontiguousarray`` would turn a 0-d array
    into 1-d): only ReAgent's ``(B,) -> (B, 1)`` reshape changes a shape.
    """
    import torch

    if isinstance(value, list):
        return [torch.from_numpy(c_contiguous(v)) for v in value]
    if type(value) is not np.ndarray or not value.flags.c_contiguous:
        # (the tensor is the copy's only holder: its memory may be recycled, _kernels)
        value = c_contiguous(value, recycle=True)
    if value.ndim == 1:  # reshaped before the tensor is made: half the cost of Tensor.reshape
        value = value.reshape(-1, 1)
    return torch.from_numpy(value)


#: last axes up to this long are copied entry by entry by :func:`c_contiguous`
_SHORT_LAST_AXIS = 16


def c_contiguous(value: Any, *, recycle: bool = False) -> Array:
    """``value`` as a C-contiguous array with its own shape (0-d stays 0-d).

    ``recycle``: a packed frame stack may be written into an array of
    :func:`rlreplay.compat.reagent._kernels.recycled_empty` (for a copy the caller alone holds).
    """
    arr = np.asarray(value)
    if arr.flags.c_contiguous:
        return arr
    if arr.ndim > 1 and 1 < arr.shape[-1] <= _SHORT_LAST_AXIS:
        # Frame stacks moved to the last axis: a pixel's frames packed into one machine word
        # where they fill 2, 4 or 8 bytes (_kernels), else one copy per last-axis entry
        packed = interleaved(arr, recycle=recycle)
        if packed is not None:
            return packed
        # One copy per last-axis entry reads contiguous
        # rows, about 4x faster than NumPy's strided copy of the whole array (same values).
        out: Array = np.empty(arr.shape, arr.dtype)
        for f in range(arr.shape[-1]):
            out[..., f] = arr[..., f]
        return out
    return arr.copy(order="C")
