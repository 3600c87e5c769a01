"""Functions generated from source once per schema (as :mod:`dataclasses` generates
``__init__``): straight-line code with no loop over field descriptions on a per-step path."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["define"]


def define(
    lines: Sequence[str], name: str, scope: dict[str, Any], filename: str, flags: int = 0
) -> Callable[..., Any]:
    """Compile ``lines``, which define function ``name``, with globals ``scope``; return it.

    The function is taken out of ``scope`` again: a function held by its own globals is a
    reference cycle, which would keep whatever the globals reach (a buffer's columns) alive
    after its last user drops it, until the cycle collector runs.

    Args:
        lines: The source, one line each (built from metadata only: names, dtypes, shapes).
        name: The function the source defines.
        scope: Its globals (the constants the source names).
        filename: Shown in tracebacks, e.g. ``"<rlreplay add>"``.
        flags: ``__future__`` compiler flags (nothing is inherited from this module).
    """
    code = compile("\n".join(lines), filename, "exec", flags, dont_inherit=True)
    exec(code, scope)  # the source comes from metadata, never from user data
    fn: Callable[..., Any] = scope.pop(name)
    return fn
