"""Checks of call arguments that every blocking or allocating call shares: timeouts and sizes.

**Timeouts.** Every call that can wait takes ``timeout`` with one meaning:

* ``None``: wait for ever;
* a finite number ``>= 0``: at most that many seconds (``0``: check once, do not wait);
* ``+inf``, or any number of at least :data:`threading.TIMEOUT_MAX` seconds (about 292 years,
  more than the platform can wait in one piece): wait for ever, as ``None``;
* NaN, a negative number, a number too large for a float, a bool or anything else: a
  :class:`rlreplay.ConfigError` naming ``timeout`` and the value, before the call changes or
  waits for anything.

**Size budget.** A call that allocates a result sized by its arguments (``sample(B)``,
``sample_sequences(B, L)``, ``sample_episodes(n)``, ``get_sequences``, ``iterate``'s
prefetched batches, a front-end's batch) first computes the bytes that result would take
(rows times the bytes of one row, as :func:`check_rows` states them) and refuses one above the
budget with a :class:`rlreplay.ConfigError` naming the argument, the requested size and the
budget, before anything is drawn or allocated. The budget is the machine's physical memory
(``os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")``, read once at import), or
:data:`FALLBACK_BUDGET` where the platform does not report it: a result that large can never be
held, so no legitimate call is refused, and a hostile size never reaches the allocator. Calls
within the budget may still find less memory free and raise :class:`MemoryError`.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from rlreplay.errors import ConfigError, ShapeError

__all__ = [
    "FALLBACK_BUDGET",
    "SIZE_BUDGET",
    "as_array",
    "check_rows",
    "shown",
    "size_budget",
    "timeout_seconds",
]

#: The size budget where the platform does not report its physical memory: 1 TiB.
FALLBACK_BUDGET = 1 << 40


def _physical_memory() -> int:
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):  # not POSIX, or not reported
        return FALLBACK_BUDGET
    return pages * page if pages > 0 and page > 0 else FALLBACK_BUDGET


#: Bytes one call's result may take at most: the machine's physical memory (see the module
#: docstring). Read at every check, so a process may lower it (tests do).
SIZE_BUDGET: int = _physical_memory()

_FOREVER = threading.TIMEOUT_MAX


def size_budget() -> int:
    """The size budget in bytes: what one call's result may take at most (see the module).

    Example:
        >>> from rlreplay.spec import size_budget
        >>> size_budget() > 0
        True
    """
    return SIZE_BUDGET


def timeout_seconds(timeout: Any, name: str = "timeout") -> float | None:
    """``timeout`` checked and normalised: seconds to wait, or ``None`` for ever.

    Args:
        timeout: ``None``, or a real number (``int``, ``float``, NumPy integer or float).
        name: The argument's name, for the message.

    Returns:
        ``None`` (wait for ever: ``None``, ``+inf`` or at least ``threading.TIMEOUT_MAX``
        seconds) or a finite ``float >= 0``.

    Raises:
        rlreplay.ConfigError: NaN, negative, too large for a float, a bool or not a number.

    Example:
        >>> from rlreplay.spec import timeout_seconds
        >>> timeout_seconds(None), timeout_seconds(0.5), timeout_seconds(float("inf"))
        (None, 0.5, None)
    """
    if timeout is None:
        return None
    if type(timeout) is float:  # the common case, without isinstance
        seconds = timeout
    elif isinstance(timeout, bool | np.bool_ | np.timedelta64) or not isinstance(
        timeout, int | float | np.integer | np.floating
    ):
        raise ConfigError(
            f"{name}: expected None or a number of seconds >= 0 (inf: for ever), got "
            f"{type(timeout).__name__} {shown(timeout)}"
        )
    else:
        try:
            seconds = float(timeout)
        except OverflowError:  # an int past float max: say so rather than guess
            raise ConfigError(
                f"{name}: expected None or a number of seconds >= 0 (inf: for ever), got "
                f"{shown(timeout)}, too large for a float"
            ) from None
    if not seconds >= 0.0:  # NaN or negative
        raise ConfigError(
            f"{name}: expected None or a number of seconds >= 0 (inf: for ever), got "
            f"{shown(timeout)}"
        )
    return None if seconds >= _FOREVER else seconds


def check_rows(name: str, requested: Any, rows: int, row_bytes: int, what: str) -> None:
    """Refuse a result of ``rows * row_bytes`` bytes above the size budget.

    Args:
        name: The argument that sized the request (``batch_size``, ``length``, ...).
        requested: The value that was asked for, for the message (``(B, L)`` for sequences).
        rows: Rows the result would have (``B``, ``B * L``, ...).
        row_bytes: Bytes of one row (an upper estimate: every array of the result and the
            draw's per-row scratch).
        what: The call, for the message.

    Raises:
        rlreplay.ConfigError: ``rows * row_bytes > SIZE_BUDGET``, naming ``name``, the request,
            the bytes it needs and the budget.

    Example:
        >>> from rlreplay.spec import check_rows
        >>> check_rows("batch_size", 32, 32, 100, "sample")  # 3200 bytes: fine
        >>> try:
        ...     check_rows("batch_size", 10**15, 10**15, 100, "sample")
        ... except ValueError as e:
        ...     print(str(e)[:38])
        batch_size: sample(10**15) needs 88.8
    """
    need = rows * row_bytes
    budget = SIZE_BUDGET
    if need > budget:
        raise ConfigError(
            f"{name}: {what}({shown(requested)}) needs {_bytes(need)} ({shown(rows)} rows "
            f"of {row_bytes} bytes), more than the size budget of {_bytes(budget)} "
            "(rlreplay.spec.size_budget()); ask for fewer rows per call"
        )


def shown(value: Any) -> str:
    """``repr(value)`` for a message, short and safe: a huge int as ``10**k``, ``2**k`` or its
    bit length (``str`` of an int past 4,300 digits raises), a long repr cut."""
    if isinstance(value, tuple):
        return ", ".join(shown(v) for v in value)
    if isinstance(value, int | np.integer) and not isinstance(value, bool | np.timedelta64):
        v = abs(int(value))
        sign = "-" if value < 0 else ""
        if v >= 1 << 20:
            if v & (v - 1) == 0:
                return f"{sign}2**{v.bit_length() - 1}"
            if v.bit_length() > 4000:
                return f"{sign}(an int of {v.bit_length()} bits)"
            digits = str(v)
            if digits.rstrip("0") == "1":
                return f"{sign}10**{len(digits) - 1}"
        return f"{sign}{v}"
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _bytes(n: int) -> str:
    if n < 1 << 10:
        return f"{n} B"
    if n >= 1 << 70:
        return f"over 2**{n.bit_length() - 1} B"
    for unit, shift in (("EiB", 60), ("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n / 1024:.3g} KiB"


def as_array(name: str, value: Any) -> np.ndarray[Any, Any]:
    """``np.asarray(value)``, with NumPy's refusals (ragged nests, objects that fail to
    convert) as a :class:`rlreplay.ShapeError` naming ``name``."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ShapeError(f"{name}: expected an array, got {shown(value)} ({exc})") from None
