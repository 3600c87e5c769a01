"""Pacing a device buffer's writes and samples with a :class:`rlreplay.RateLimiter`, counted on
the host.

The limiter (:mod:`rlreplay.limits`) is the core's, with the core's counters: an :meth:`add`
inserts one item per env step it stores, a :meth:`sample` (or ``sample_sequences``) samples
one per row. Both counts are shapes, known on the host without reading the device: an add of
every env inserts ``num_envs`` items, an add of ``env_ids`` inserts ``len(env_ids)`` (the
length of a device tensor is its shape), a draw of ``B`` rows samples ``B``.

The limiter's ``size`` (what ``min_size_to_sample`` waits for) is the core's sampleable count
there; on the device that count depends on which steps ended their episodes, a device value.
This part counts it on the host instead, from what the host knows: the steps each env holds
(``held[e]``: steps added since the env was last emptied, at most its ``C`` slots), less the
newest ``n_step`` of each, whose windows may not be known yet::

    size = sum_e max(0, held[e] - n_step)

That is the core's sampleable count whenever no episode ended within an env's newest
``n_step`` steps (then the core also draws from those steps, up to ``n_step`` more per env),
with ``frame_stack = 1`` (a frame stack skips the first ``k - 1`` steps of an episode whose
start was overwritten or cleared), no episode dropped for a final observation
(``finals_per_env``) and none abandoned (``abandon_episode``: its last ``n_step`` steps are
never sampleable, and still counted here). Where an ``add`` names its envs by a device
tensor, which envs stepped is not known on the host: from then on the envs are counted
together (``held`` the rows added since the buffer was last emptied, at most ``E * C``;
``size = max(0, held - E * n_step)``).
``clear`` empties ``held`` (no wait); ``dequeue``, which reads the device anyway, reads each
env's stored count exactly.

A device buffer is used from one thread: a call the limiter refuses could only be freed by
another call of that thread, so none waits. A refused call raises
:class:`rlreplay.ReplayTimeout` at once, whatever its ``timeout`` (checked as the core checks
it), and counts as the core counts a call with ``timeout=0``: one wait and one timeout in the
limiter's ``stats``, nothing inserted or sampled, the buffer unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.buffer.pacing import Pacing
from rlreplay.buffer.sync import check_timeout
from rlreplay.errors import ReplayTimeout
from rlreplay.limits import RateLimiter
from rlreplay.torch.config import DeviceConfig

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["DevicePacing"]

Array = np.ndarray[Any, Any]


class DevicePacing:
    """The rate limiter of one device buffer and the host count of what it holds.

    Attributes:
        limiter: The buffer's :class:`rlreplay.RateLimiter`.
        held: ``(E,)`` int64: steps each env holds as the host counts them (see the module
            docstring), or ``None`` while the envs are counted together (``held_total``).
        held_total: Rows held over all envs, as the host counts them.
    """

    __slots__ = ("config", "held", "held_total", "limiter")

    def __init__(self, limiter: RateLimiter, config: DeviceConfig) -> None:
        self.limiter = limiter
        self.config = config
        self.held: Array | None = np.zeros(config.num_envs, np.int64)
        self.held_total = 0

    @staticmethod
    def check(limiter: Any, num_envs: int) -> None:
        """Refuse what the core refuses (not a limiter; a band too narrow for a step of every
        env), before anything is allocated."""
        Pacing.check(limiter, storage="torch", num_envs=num_envs)

    # ------------------------------------------------------------------ the host count
    def size(self) -> int:
        """The limiter's ``size``: transitions whose windows are known by count alone."""
        n = self.config.n_step
        if self.held is not None:
            return int(np.maximum(self.held - n, 0).sum())
        return max(0, self.held_total - self.config.num_envs * n)

    def _stored(self, envs: Array | None, k: int) -> None:
        """Count ``k`` new steps: one of each env of ``envs`` (``None``: of every env), or,
        while the envs are counted together, ``k`` rows."""
        C = self.config.env_capacity
        held = self.held
        if held is None:
            self.held_total = min(self.held_total + k, self.config.num_envs * C)
            return
        if envs is None:
            np.minimum(held + 1, C, out=held)
        else:
            held[envs] = np.minimum(held[envs] + 1, C)
        self.held_total = int(held.sum())

    def forget_envs(self) -> None:
        """An add named its envs by a device tensor: count the envs together from now on."""
        if self.held is not None:
            self.held_total = int(self.held.sum())
            self.held = None

    def cleared(self) -> None:
        """``clear``: nothing is held."""
        self.held = np.zeros(self.config.num_envs, np.int64)
        self.held_total = 0
        self.limiter.set_size(0)

    def reread(self, stored: Array) -> None:
        """Each env's stored count, read on the device by a call that waits anyway."""
        self.held = np.asarray(stored, np.int64).copy()
        self.held_total = int(self.held.sum())
        self.limiter.set_size(self.size())

    # ------------------------------------------------------------------ grants
    def grant_insert(self, k: int, timeout: Any) -> None:
        """Grant ``k >= 1`` inserts now or raise :class:`ReplayTimeout` (no wait)."""
        if timeout is not None:
            check_timeout(timeout)
        try:
            self.limiter.await_insert(k, 0)
        except ReplayTimeout as exc:
            raise ReplayTimeout(
                f"add: the rate limiter does not allow {k} inserts now ({exc}). A device buffer "
                "does not wait (one thread uses it, so nothing could sample while it waited): "
                f"sample first, or ask rate_limiter.can_insert({k})"
            ) from None

    def commit_insert(self, k: int, envs: Array | None) -> None:
        """``k`` granted inserts were stored, for ``envs`` (``None``: every env in order, or
        envs unknown on the host once :meth:`forget_envs` was called)."""
        self._stored(envs, k)
        self.limiter.commit_insert(k, self.size())

    def cancel_insert(self, k: int) -> None:
        """Hand back ``k`` granted inserts that were not stored."""
        self.limiter.cancel_insert(k)

    def insert(
        self, k: int, timeout: Any, envs: Array | None, store: Callable[[], Tensor],
        envs_known: bool = True,
    ) -> Tensor:  # fmt: skip
        """``store()`` ``k >= 1`` env steps under a grant: granted first (or
        :class:`ReplayTimeout`, no wait), handed back if ``store`` raises, committed for
        ``envs`` (see :meth:`commit_insert`) once stored; ``envs_known=False`` (envs given as a
        device tensor) counts the envs together from then on (:meth:`forget_envs`)."""
        self.grant_insert(k, timeout)
        try:
            ids = store()
        except BaseException:
            self.cancel_insert(k)
            raise
        if not envs_known:
            self.forget_envs()
        self.commit_insert(k, envs)
        return ids

    def grant_sample(self, n: int, timeout: Any, what: str) -> None:
        """Grant ``n`` samples now or raise :class:`ReplayTimeout` (no wait); a batch too large
        for the limiter's band is a :class:`rlreplay.ConfigError`, as in the core."""
        if timeout is not None:
            check_timeout(timeout)
        try:
            self.limiter.await_sample(n, 0)
        except ReplayTimeout as exc:
            raise ReplayTimeout(
                f"{what}: the rate limiter does not allow {n} samples now ({exc}). A device "
                "buffer does not wait (one thread uses it, so nothing could add while it "
                f"waited): add first, or ask rate_limiter.can_sample({n})"
            ) from None

    def cancel_sample(self, n: int) -> None:
        """Hand back ``n`` granted samples that were not drawn."""
        self.limiter.cancel_sample(n)
