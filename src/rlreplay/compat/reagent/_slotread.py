"""reagent 0.1's read of ring slots, for rows the core cannot give (private to the ReAgent API).

reagent 0.1's ``sample_transition_batch`` never asks which episode a slot belongs to: for slot
``s`` it reads the stack at slots ``s - k + 1 .. s``, the window's terminal flags and rewards at
``s .. s + n - 1`` (``m``: up to the first terminal flag), the next values at ``s + m`` and the
stack ending there, all modulo ``replay_capacity``, whatever those slots hold. Where they hold
one episode's consecutive steps (every slot that ``add`` marks valid), that is the core's
transition, and the front-end assembles it in the core (the fast path). Elsewhere -- a slot
made valid by ``set_index_valid_status``, or named in ``indices=`` -- the slots mix episodes,
padding rows and rows never written, and 0.1 still returns what they hold. :func:`intact` tells
the rows apart; :func:`read_slots` is 0.1's read, element by element, from the same per-slot
rows as the buffer's ``_store`` view (:func:`._ranges.slot_rows`, public core reads only);
:func:`mixed_arrays` joins both kinds of rows into one batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay.compat.reagent import _assembly
from rlreplay.compat.reagent._assembly import _Batch, state_stack
from rlreplay.compat.reagent._ranges import slot_rows
from rlreplay.compat.reagent._state import BufferState

__all__ = ["intact", "mixed_arrays", "read_slots", "window_lengths"]

Array = np.ndarray[Any, Any]


def window_lengths(buf: BufferState, slots: Array) -> Array:
    """0.1's ``traj_lengths``: ``1 +`` the first terminal flag in ``s .. s + n - 1``, else ``n``."""
    cap, n = buf._replay_capacity, buf._update_horizon
    flags = buf._terminal_rows[(slots[:, None] + np.arange(n)) % cap] != 0
    flags[:, -1] = True
    out: Array = np.argmax(flags, axis=1) + 1
    return out


def intact(buf: BufferState, slots: Array) -> Array:
    """Whether 0.1's read of each slot is the core's transition of the step the slot holds.

    True when slot ``s`` holds step ``g`` and the other slots 0.1 reads hold what the core
    assembles around ``g``: ``g - j`` at ``s - j`` for the stack (a padding row or a slot
    never written, both zeros, where ``g - j`` precedes ``g``'s episode), ``g + j`` at
    ``s + j`` up to the window's last step, and ``g + m`` at ``s + m`` unless the window ends
    on a terminal (the next values after a terminal are read from the slots in both paths).
    Cost ``O(B * (stack_size + update_horizon))`` index reads.
    """
    cap, k = buf._replay_capacity, buf._stack_size
    slot_id = buf._slot_id
    ids = slot_id[slots]
    m = window_lengths(buf, slots)
    ended = buf._terminal_rows[(slots + m - 1) % cap] != 0
    ok = ids >= 0
    span = np.arange(1, buf._update_horizon + 1)
    ahead = slot_id[(slots[:, None] + span) % cap]
    needed = span[None, :] <= (m - ended)[:, None]
    ok &= ((ahead == ids[:, None] + span) | ~needed).all(axis=1)
    if k > 1 and ok.any():
        back = np.arange(1, k)
        rows = np.flatnonzero(ok)
        g = ids[rows]
        behind = slot_id[(slots[rows, None] - back) % cap]
        earlier = g[:, None] - back
        begin = buf._core.episode_begin(g)
        expected = np.where(earlier >= begin[:, None], earlier, -1)
        ok[rows] = (behind == expected).all(axis=1)
    return ok


def read_slots(buf: BufferState, slots: Array, given: Array | None) -> dict[str, Any]:
    """0.1's ``sample_transition_batch`` read of ``slots``, in the front-end's layout.

    Values are 0.1's: whatever the slots hold (zeros for padding rows and slots never
    written). The layout is the front-end's (the seed's): ``terminal`` and ``step`` unstacked,
    vector rewards discounted per step (difference 9), the timeline format's per-step windows
    read from the same slots.
    """
    cap, k, n = buf._replay_capacity, buf._stack_size, buf._update_horizon
    signature = {e.name: e for e in buf.get_storage_signature()}

    def rows(name: str, at: Array) -> Array:  # _store[name][at], any shape of slots
        e = signature[name]
        flat = slot_rows(buf._core, buf._slot_id, e, at.reshape(-1) % cap)
        out: Array = flat.reshape(*at.shape, *e.shape)
        return out

    def stacks(name: str, at: Array) -> Array:  # (..., k, *shape): the stacks ending at `at`
        return rows(name, at[..., None] + np.arange(-k + 1, 1))

    def state(at: Array) -> Array:
        return state_stack(stacks("observation", at) if k > 1 else rows("observation", at), k)

    m = window_lengths(buf, slots)
    nxt = (slots + m) % cap
    extras = [e.name for e in buf._extra_storage_types]
    window = slots[:, None] + np.arange(n)
    rewards = rows("reward", window)
    shape = (1, n, *([1] * (rewards.ndim - 2)))
    decays = (buf._gamma ** np.arange(n)).reshape(shape)
    masks = (np.arange(n)[None, :] < m[:, None]).reshape(-1, *shape[1:])
    out: dict[str, Any] = {
        "state": state(slots),
        "action": rows("action", slots),
        "reward": (rewards * decays * masks).sum(axis=1).astype(buf._reward_dtype),
        "next_state": state(nxt),
        "next_action": rows("action", nxt),
        "next_reward": rows("reward", nxt),
        "terminal": buf._terminal_rows[(nxt - 1) % cap] != 0,
        "indices": slots if given is None else given,
        "step": m.astype(np.int64),
    }
    for x in extras:
        out[x] = rows(x, slots)
        out["next_" + x] = rows(x, nxt)
    if buf._return_everything_as_stack:
        for x in ["action", "reward", *extras]:
            out[x] = np.moveaxis(stacks(x, slots), 1, -1)  # the stack axis last
            out["next_" + x] = np.moveaxis(stacks(x, nxt), 1, -1)
    if buf._return_as_timeline_format:
        out.update(_timeline(buf, slots, m, rows, stacks, extras))
    return out


def _timeline(
    buf: BufferState, slots: Array, m: Array, rows: Any, stacks: Any, extras: list[str]
) -> dict[str, list[Array]]:
    """Per row, the window's ``m`` values read from the slots: rewards at ``s .. s+m-1``,
    next values (and next stacks) at ``s+1 .. s+m``, shaped as the fast path shapes them."""
    k = buf._stack_size
    stack_all = buf._return_everything_as_stack

    def per_row(name: str, first: int, stacked: bool) -> list[Array]:
        out = []
        for s, mi in zip(slots.tolist(), m.tolist(), strict=True):
            at = s + first + np.arange(mi)
            if stacked:
                out.append(_assembly.stack_last(stacks(name, at), k))
            elif name == "observation":  # stack_size 1: shaped as the plain next_state
                out.append(state_stack(rows(name, at), 1))
            else:
                out.append(rows(name, at))
        return out

    out = {
        "reward": per_row("reward", 0, stack_all),
        "next_state": per_row("observation", 1, k != 1),  # stack_size 0: empty stacks
        "next_action": per_row("action", 1, stack_all),
        "next_reward": per_row("reward", 1, stack_all),
    }
    for x in extras:
        out["next_" + x] = per_row(x, 1, stack_all)
    return out


def mixed_arrays(buf: BufferState, batch: _Batch) -> dict[str, Any]:
    """The elements of a batch whose rows ``batch.raw`` are read from the slots (0.1's read)
    and whose other rows come from the core's transitions (``batch.core``)."""
    raw = batch.raw
    assert raw is not None
    given = batch.given
    parts: list[tuple[Array, dict[str, Any]]] = []
    fast = np.flatnonzero(~raw)
    if fast.size:
        sub = _Batch(
            batch.slots[fast], batch.ids[fast], batch.core, None if given is None else given[fast]
        )
        parts.append((fast, _assembly.transition_arrays(buf, sub)))
    odd = np.flatnonzero(raw)
    parts.append((odd, read_slots(buf, batch.slots[odd], None if given is None else given[odd])))
    b = batch.slots.size
    out: dict[str, Any] = {}
    for name, first in parts[0][1].items():
        if isinstance(first, list):
            joined: list[Any] = [None] * b
            for at, arrays in parts:
                for i, value in zip(at.tolist(), arrays[name], strict=True):
                    joined[i] = value
            out[name] = joined
            continue
        full = np.empty((b, *np.shape(first)[1:]), np.asarray(first).dtype)
        for at, arrays in parts:
            full[at] = arrays[name]
        out[name] = full
    return out
