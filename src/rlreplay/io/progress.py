"""Progress bars for long reads and writes (tqdm, an optional extra, imported only to draw one).

``progress=None`` (the default of every call that takes it) draws a bar only when stderr is a
terminal, and, for checkpoints, only when the arrays are large (``LARGE_BYTES``: a small save
or load is over before a bar would show anything); ``True`` always draws one, ``False`` never.
Without tqdm installed the default draws nothing and ``True`` raises before any work starts.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

__all__ = [
    "LARGE_BYTES",
    "ByteProgress",
    "byte_progress",
    "progress_bar",
    "require_tqdm",
    "show_progress",
]

LARGE_BYTES = 64 << 20  # 64 MiB: checkpoints with less array data than this get no bar by default


class ByteProgress(Protocol):
    """What :func:`byte_progress` returns: a tqdm bar counted in bytes."""

    def update(self, n: int) -> Any: ...

    def close(self) -> None: ...


def show_progress(progress: bool | None) -> bool:
    """Whether to draw a progress bar: ``progress`` if given, else when stderr is a terminal."""
    if progress is None:
        return sys.stderr.isatty()
    return bool(progress)


def _tqdm(progress: bool | None) -> Any:
    """tqdm's ``tqdm`` class, or ``None`` when it is missing and the bar was not asked for."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if progress:
            raise ImportError("progress=True needs tqdm: pip install 'tqdm>=4.60'") from None
        return None
    return tqdm


def require_tqdm(progress: bool | None) -> None:
    """Raise now, before any work, if ``progress=True`` and tqdm is missing.

    Raises:
        ImportError: ``progress`` is true and tqdm is not installed.
    """
    if progress:
        _tqdm(progress)


def progress_bar(items: Any, total: int, desc: str, progress: bool | None) -> Any:
    """``items`` wrapped in a tqdm bar counted in episodes when :func:`show_progress` says so."""
    if not show_progress(progress):
        return items
    tqdm = _tqdm(progress)
    return items if tqdm is None else tqdm(items, total=total, desc=desc, unit="episode")


class _NoBar:
    """The bar when none is drawn: counts nothing."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def byte_progress(total: int, desc: str, progress: bool | None) -> ByteProgress:
    """A tqdm bar over ``total`` bytes (one that draws nothing when none is to be drawn).

    Args:
        total: Bytes the operation will process.
        desc: The bar's label.
        progress: ``True``: draw one; ``False``: never; ``None``: when stderr is a terminal
            and ``total >= LARGE_BYTES``.

    Raises:
        ImportError: ``progress=True`` without tqdm installed.
    """
    if (progress is None and total < LARGE_BYTES) or not show_progress(progress):
        return _NoBar()
    tqdm = _tqdm(progress)
    if tqdm is None:
        return _NoBar()
    bar: ByteProgress = tqdm(
        total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, leave=False
    )
    return bar
