"""Pickling and copies of the nnabla-rl front-end's buffers (a mixin of ``ReplayBuffer``).

nnabla-rl's buffers are plain objects: ``pickle`` and ``copy.deepcopy`` copy them by value
(the core buffer copies itself; the global generator stays global). The tuples a staging
buffer hands out (``_handed``) are copied with it, their arrays read-only again.
Staged experiences go to the core first, as before any read of the core; the staging is
bookkeeping over the handed tuples, made again for the copy. ``copy.copy`` is an alias, as
nnabla-rl's shallow copy shares its data holder. (``PrioritizedReplayBuffer`` holds its
built buffer only: its state is its ``__dict__``.)
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np

__all__ = ["ByValue"]


class ByValue:
    """``__getstate__``/``__setstate__``/``__copy__`` over the buffer's ``__dict__``.

    The host class provides ``_core_size()`` (which writes what is staged) and
    ``_make_staging()``, and keeps its staging in ``_staging``.
    """

    _staging: Any

    def _core_size(self) -> int:
        raise NotImplementedError

    def _make_staging(self) -> Any:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        if "_staging" not in self.__dict__:
            return dict(self.__dict__)
        self._core_size()  # writes what is staged
        return {**self.__dict__, "_staging": self._staging is not None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "_staging" in state:
            self._staging = self._make_staging() if state["_staging"] else None
        for handed in state.get("_handed") or ():
            # the copies the tuples handed out hold (s, a, r, s_next) come back writable
            # from pickle: read-only again, as they were handed out
            if handed is not None:
                for j in (0, 1, 2, 4):
                    if type(handed[j]) is np.ndarray:
                        handed[j].flags.writeable = False

    def __copy__(self) -> Self:
        # nnabla-rl's shallow copy shares the data holder, so each sees the other's appends
        # and updates; here the state is the attributes and the core together: an alias.
        new = object.__new__(type(self))
        new.__dict__ = self.__dict__
        return new
