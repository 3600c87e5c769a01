"""What staging and growth see of an nnabla-rl buffer's columnar store (private).

:mod:`~._staging` (staged appends) and :mod:`~._growth` (an unbounded buffer's bigger core)
read and change the columnar store of :class:`~.replay_buffer.ReplayBuffer`: its core and
codec, the side ring, the ids and the cached size. :class:`ColumnarHost` declares exactly
that, so both are typed against it and neither depends on the buffer's module, which
imports them.
"""

from __future__ import annotations

from typing import Any, Protocol

from rlreplay import ReplayBuffer as CoreBuffer
from rlreplay.compat.nnabla_rl._codec import Codec, Row

__all__ = ["ColumnarHost"]


class ColumnarHost(Protocol):
    """The columnar store of an nnabla-rl buffer: its core and the bookkeeping around it."""

    _core: CoreBuffer | None
    _codec: Codec | None
    _core_len: int | None  # len(_core), as the buffer caches it (None: ask the core)
    _extras: list[tuple[Any, ...] | None]  # (non_terminal, info, ...) at id % core capacity
    _next_id: int  # the id of the next appended experience
    _newest: Row | None  # the core's newest step while its episode runs
    _frame_stack: int

    @property
    def capacity(self) -> int | None: ...
    def _columnar_only(self) -> bool: ...
    def _core_size(self) -> int: ...
    def _core_changed(self) -> None: ...
    def _cut(self) -> None: ...
    def _new_core(self, capacity: int) -> CoreBuffer: ...
