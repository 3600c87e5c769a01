"""Growth of an unbounded nnabla-rl buffer's core: a rebuild with twice the room.

nnabla-rl's unbounded buffer is a deque that never drops anything. The front-end's core has a
fixed capacity, so when an unbounded buffer's core is full, :func:`grow_core` builds one with
twice the room (through the buffer's own ``_new_core``, so subclasses keep their core class
and transforms), re-adds every stored step in order (finals included, from the core's public
``gather_all``), moves the side ring of ``(non_terminal, info, ...)`` to the new slots and
renumbers the ids from 0. Amortised O(1) per append.
"""

from __future__ import annotations

from typing import Any

from rlreplay.compat.nnabla_rl._host import ColumnarHost

__all__ = ["grow_core"]


def grow_core(buffer: ColumnarHost) -> None:
    """Rebuild ``buffer``'s core with twice the room and re-add every stored step, in order."""
    old = buffer._core
    assert old is not None and buffer._codec is not None
    new = buffer._new_core(2 * old.capacity)
    n = len(old)
    first = buffer._next_id - n
    if n:
        data = old.gather_all()  # (1, n, ...) raw steps, finals as next_<obs> at ends
        names = list(old.schema.fields) + ["next_" + o for o in buffer._codec.obs_names]
        new.extend(**{name: data[name][0] for name in names})
    extras: list[tuple[Any, ...] | None] = [None] * new.capacity
    for j in range(n):
        extras[j] = buffer._extras[(first + j) % old.capacity]
    old.close()
    buffer._core, buffer._extras, buffer._next_id = new, extras, n
    buffer._core_changed()
