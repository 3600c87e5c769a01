"""keras-gym's ring of ``capacity + bootstrap_n`` slots, mapped onto the core (private).

:class:`RingViews` gives the keras-gym front-end keras-gym's slot arithmetic (which add a ring
slot holds) and read-only copies of keras-gym's caches (``_s``, ``_a``, ``_r``, ``_d``,
``_e``, ``_i``) built from the core's public reads; :func:`assigned` converts a value as
keras-gym's assignment into a ring slot does, and :func:`check_ring` refuses a negative ring.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay import ConfigError, ReplayBuffer

__all__ = ["RingViews", "assigned", "check_ring"]

Array = np.ndarray[Any, Any]


class RingViews:
    """keras-gym's ring slots over the core (mixed into ``ExperienceReplayBuffer``)."""

    capacity: int
    bootstrap_n: int
    _core: ReplayBuffer | None
    _num_transitions: int
    _first_id: int
    _adds: int
    _initialized: bool
    _s_shape: tuple[int, ...]
    _s_dtype: np.dtype[Any]
    _a_shape: tuple[int, ...]
    _a_dtype: np.dtype[Any]

    def _cache_layout(self) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """Dtype and row shape of each of keras-gym's caches, by core field name."""
        return {
            "obs": (self._s_dtype, self._s_shape),
            "action": (self._a_dtype, self._a_shape),
            "reward": (np.dtype(np.float64), ()),
            "terminated": (np.dtype(np.bool_), ()),
            "episode_id": (np.dtype(np.int32), ()),
        }

    def _slots(self) -> int:
        """Size of keras-gym's ring: ``capacity + bootstrap_n``."""
        return self.capacity + self.bootstrap_n

    def _slot_ids(self, slots: Array) -> Array:
        """Core ids of the adds keras-gym's ring ``slots`` hold (the newest add per slot).

        Slot ``p`` holds add ``i = p + M * floor((adds - 1 - p) / M)`` (``M`` slots); only
        slots written since the last ``clear`` are mapped (their adds the core keeps).
        """
        M = self._slots()
        out: Array = self._first_id + slots + M * ((self._adds - 1 - slots) // M)
        return out

    # ------------------------------------------------------------------ keras-gym's ring
    def _ring(self, name: str) -> Array:
        """Field ``name`` laid out as keras-gym's ring of ``capacity + bootstrap_n`` slots.

        A copy: slot ``p`` holds the newest add ``i`` with ``i % M == p`` since the last
        ``clear``; slots not written since then read zeros (keras-gym keeps older data there).
        """
        core = self._core
        if core is None:
            if not self._initialized:
                raise AttributeError(f"{type(self).__name__!r} has no cache before the first add")
            # a first add that failed after keras-gym's _init_cache: its empty (zero) arrays
            dtype, shape = self._cache_layout()[name]
            return np.zeros((self._slots(), *shape), dtype)
        dtype, shape = core.schema.fields[name].dtype, core.schema.fields[name].shape
        out = np.zeros((self._slots(), *shape), dtype)
        written = np.arange(self._num_transitions)
        if written.size:
            out[written] = core.get_field(name, self._slot_ids(written))
        return out

    @property
    def _s(self) -> Array:
        """keras-gym's frame cache ``_s`` (a copy, see :meth:`_ring`)."""
        return self._ring("obs")

    @property
    def _a(self) -> Array:
        """keras-gym's action cache ``_a`` (a copy, see :meth:`_ring`)."""
        return self._ring("action")

    @property
    def _r(self) -> Array:
        """keras-gym's reward cache ``_r`` (a copy, see :meth:`_ring`)."""
        return self._ring("reward")

    @property
    def _d(self) -> Array:
        """keras-gym's done cache ``_d`` (a copy, see :meth:`_ring`)."""
        return self._ring("terminated")

    @property
    def _e(self) -> Array:
        """keras-gym's episode-id cache ``_e`` (a copy, see :meth:`_ring`)."""
        return self._ring("episode_id")

    @property
    def _i(self) -> int:
        """keras-gym's write cursor: the ring slot the next add writes."""
        return self._adds % self._slots() if self._slots() > 0 else 0


def check_ring(M: int) -> None:
    """keras-gym's ``np.empty((capacity + bootstrap_n,) + shape)`` of a negative size."""
    if M < 0:
        raise ConfigError(
            f"capacity + bootstrap_n: expected a ring of at least 0 slots, got {M} (keras-gym: "
            "negative dimensions are not allowed)"
        )


def assigned(value: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
    """``value`` converted as ``arr[i] = value`` converts it into ``arr`` of rows ``shape``.

    NumPy's assignment: unsafe casts (float64 into uint8, 1.7 into int32), broadcasting, and
    NumPy's own errors for what it cannot assign.
    """
    if type(value) is np.ndarray and value.shape == shape and value.dtype == dtype:
        return value  # nothing to convert (the core copies it into its columns)
    row = np.empty((1, *shape), dtype)
    row[0] = value  # exactly keras-gym's `self._s[self._i] = s` on one row
    out: Array = row[0]
    return out
