"""Argument checks of prioritized sampling (:class:`rlreplay.PrioritizedReplayBuffer`).

Validation of the constructor's numbers and clip range, the uniform-only draw options, and
R2D2's reduction of per-step sequence priorities to one per sequence.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlreplay.errors import ConfigError, DTypeError, PriorityError, ShapeError
from rlreplay.sampling.uniform import DrawOptions
from rlreplay.spec.arguments import as_array, shown

__all__ = ["_check_uniform_only", "_clip_range", "_real", "_reduce_steps"]

Array = np.ndarray[Any, Any]


def _check_uniform_only(opts: DrawOptions) -> None:
    if opts.recent_ratio > 0 or not opts.replacement:
        raise ConfigError(
            "recent_ratio/replacement: prioritized sampling draws by priority with "
            "replacement; recency mixing and draws without replacement are uniform-only"
        )


def _reduce_steps(p: Array, mask: Any, eta: float) -> Array:
    """R2D2's sequence priority: ``eta * max + (1 - eta) * mean`` over each row's real steps."""
    if (
        isinstance(eta, bool | np.timedelta64)
        or not isinstance(eta, int | float | np.integer | np.floating)
        or not 0 <= eta <= 1
    ):
        raise ConfigError(f"eta: expected a number in [0, 1], got {shown(eta)}")
    eta = float(eta)
    if p.dtype.kind not in "iuf":
        raise PriorityError(f"priorities: expected real numbers, got dtype {p.dtype}")
    if mask is None:
        m = np.ones(p.shape, bool)
    else:
        m = as_array("mask", mask)
        if m.dtype.kind not in "biu":
            raise DTypeError(f"mask: expected booleans (batch.mask), got dtype {m.dtype}")
        m = m.astype(bool)
    if m.shape != p.shape:
        raise ShapeError(f"mask: expected shape {p.shape}, got {m.shape}")
    if not m.any(axis=-1).all():
        raise ShapeError("mask: every sequence needs at least one real step")
    if p.shape[-1] == 0:  # (so no sequence: one would have been refused above)
        return np.zeros(p.shape[:-1], np.float64)
    pf = p.astype(np.float64)
    bad = m & ~(pf >= 0.0)  # (NaN too) refused here: the reduction would hide or overflow
    if bad.any() or not np.isfinite(pf[m]).all():
        raise PriorityError(
            f"priorities: expected finite numbers >= 0, got {pf[m & ~np.isfinite(pf) | bad][:5]}"
        )
    top = np.where(m, pf, -np.inf).max(axis=-1)
    count = m.sum(axis=-1)
    with np.errstate(over="ignore"):
        mean = np.where(m, pf, 0.0).sum(axis=-1) / count
    if not np.isfinite(mean).all():  # sums of values near float max: each step's share first
        mean = np.where(m, pf / count[..., None], 0.0).sum(axis=-1)
    out: Array = eta * top + (1.0 - eta) * mean
    return out


def _real(name: str, value: Any) -> float:
    """A finite float ``>= 0`` from a real number (bools refused)."""
    if isinstance(value, bool | np.timedelta64) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        raise ConfigError(f"{name}: expected a finite number >= 0, got {shown(value)}")
    try:
        out = float(value)
    except OverflowError:  # an int past float max
        out = math.inf
    if not math.isfinite(out) or out < 0.0:
        raise ConfigError(f"{name}: expected a finite number >= 0, got {shown(value)}")
    return out


def _clip_range(clip: Any) -> tuple[float, float] | None:
    if clip is None:
        return None
    try:
        lo, hi = clip
    except (TypeError, ValueError):
        raise ConfigError(f"priority_clip: expected None or (lo, hi), got {clip!r}") from None
    lo, hi = _real("priority_clip[0]", lo), _real("priority_clip[1]", hi)
    if lo > hi:
        raise ConfigError(f"priority_clip: expected lo <= hi, got ({lo}, {hi})")
    return lo, hi
