"""ALF's episode information of the device-backed buffer, as tensors on its device.

The host-backed buffer keeps episodes in the core's episode index and, beside it, the parts
ALF adds (``_episodic``: episodes a ``FIRST`` cuts, episodes joined after a ``LAST``,
discount-0 segments), and reads returns from the core's recorded ones. Here the same
information is kept per slot (env ``e``'s step ``pos`` in slot ``e * C + pos % C``) and per
env, updated by every ``add_batch`` with a fixed sequence of torch ops on the device, so
that writing never waits for the device. The rules, in terms of ALF's step types, are the
host-backed buffer's (the tests compare both on random streams):

* **Episode begin** of a new step ``t`` of env ``e``: ``t`` if it is a ``FIRST``; else, if
  ``e`` still stores its previous step, that step's begin (after a ``LAST`` too: ALF's
  episode goes on until a ``FIRST``); else ``t`` if the previous step was a ``LAST``, else
  the begin of the episode the env was running (``core_begin``: the position after the
  env's newest ``LAST`` or its newest ``FIRST``).
* **Episode end** of a stored step ``pos``: the first stored ``q >= pos`` that is the env's
  newest step or is followed by a ``FIRST`` (a ``LAST`` followed by another step does not
  end ALF's episode).
* **Discount-0 segment begin**: one past the newest earlier step of the env whose
  ``discount`` is 0 (0 if none).
* **Returns** (``record_episodic_return``): ``acc[s]`` accumulates, for every stored step
  ``s`` of the running episode, ``gamma^(k - s - 1) * clip(r_k)`` of each later step ``k``
  (in float64); at a ``LAST`` at ``q`` every stored step ``s <= q`` of its episode takes
  ``ret[s] = acc[s]`` (ALF completes the episode there; 0 for the ``LAST`` itself). Steps
  never completed read ``default_return``. The host-backed buffer sums the same terms
  backwards (the core's recursion) and rounds the parts of joined episodes to float32
  separately, so the two agree to float32 rounding, not always bit for bit.

Cost: ``O(B)`` per ``add_batch`` of ``B`` steps; with returns ``O(E * C)`` more (every slot
of every env is updated under a mask, since which ones is a device value). Queries gather
``O(n)`` values (``steps_to_episode_end``: ``O(n log C)``, a binary search).
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["DeviceEpisodes"]

FIRST, LAST = 0, 2  # ALF's StepType


class DeviceEpisodes:
    """Episode begins and ends, discount-0 segments and returns of ``E`` envs of ``C`` slots.

    Invariants: for a stored step at slot ``s``: ``begin[s]`` its ALF episode begin,
    ``firsts[s]`` how many ``FIRST`` steps its env added up to it (non-decreasing along the
    env's positions), ``disc0[s]`` its discount-0 segment begin (with a
    ``discount`` leaf), ``done[s]`` whether an episode completion gave it ``ret[s]``, and
    ``acc[s]`` its discounted sum of the rewards after it up to the env's newest step within
    its episode (with returns). Per env: ``alf_begin`` / ``core_begin`` of the newest added
    step, ``ended`` whether it is a ``LAST``, ``last0`` the newest position of discount 0,
    ``first_count`` the ``FIRST`` steps added.

    Args:
        num_envs: ``E``.
        max_length: ``C``, steps per env.
        device: The torch device of the tensors.
        discount: Whether steps carry a scalar ``discount`` (discount-0 segments).
        returns: ``None``, or ``(gamma, (lo, hi) or None, default_return)`` to record returns.
    """

    def __init__(
        self,
        num_envs: int,
        max_length: int,
        device: torch.device,
        *,
        discount: bool,
        returns: tuple[float, tuple[float, float] | None, float] | None,
    ) -> None:
        E, C, n = num_envs, max_length, num_envs * max_length
        self.num_envs, self.max_length, self.device = E, C, device

        def zeros(size: int, dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(size, dtype=dtype, device=device)

        self.begin = zeros(n, torch.int64)
        self.firsts = zeros(n, torch.int64)  # FIRST steps of the env up to this one
        self.first_count = zeros(E, torch.int64)
        self.alf_begin = zeros(E, torch.int64)
        self.core_begin = zeros(E, torch.int64)
        self.ended = zeros(E, torch.bool)
        self.disc0: torch.Tensor | None = zeros(n, torch.int64) if discount else None
        self.last0 = torch.full((E,), -1, dtype=torch.int64, device=device)
        self.returns = returns is not None
        self.acc = zeros(n if returns else 0, torch.float64)
        self.ret = zeros(n if returns else 0, torch.float64)
        self.done = zeros(n if returns else 0, torch.bool)
        gamma, clip, default = returns if returns is not None else (0.0, None, 0.0)
        lo, hi = clip if clip is not None else (-math.inf, math.inf)
        self.clip, self.default = (float(lo), float(hi)), float(default)
        # gamma^d for the distances d in [0, C) between a step and a later one of its env
        self.powers = torch.pow(
            torch.tensor(float(gamma), dtype=torch.float64, device=device),
            torch.arange(C if returns else 0, dtype=torch.float64, device=device),
        )
        # gamma^(b - 1) for a step b steps before the newest, 0 for the newest itself
        self.shifted = torch.cat([self.powers.new_zeros(min(C, 1)), self.powers[: C - 1]])
        self.slot_index = torch.arange(C, dtype=torch.int64, device=device)  # j of slot e*C+j
        # Row C - 1 - n: (n - j) mod C for j in [0, C), the window at C - 1 - n of
        # [C-1, ..., 0, C-1, ..., 0] (a view: no C x C table is stored).
        lap = torch.flip(self.slot_index, (0,))
        self.backs = torch.cat([lap, lap]).unfold(0, C, 1)

    def slots(self, env: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Slot of the steps ``pos`` of ``env`` (broadcast)."""
        return env * self.max_length + torch.remainder(pos, self.max_length)

    # ------------------------------------------------------------------ writing
    def record(
        self,
        env: torch.Tensor,
        t: torch.Tensor,
        step_type: torch.Tensor,
        discount: torch.Tensor | None,
        reward: torch.Tensor | None,
        first_pos: torch.Tensor,
    ) -> None:
        """Steps ``t`` of ``env`` (distinct envs) were just written; ``first_pos`` is each
        env's oldest stored position after the write (on the device: nothing is read on the
        host)."""
        slots = self.slots(env, t)
        is_first = step_type == FIRST
        is_last = step_type == LAST
        held = (t - 1) >= first_pos.index_select(0, env)  # the env still stores step t - 1
        prev_end = self.ended.index_select(0, env)
        core_old = self.core_begin.index_select(0, env)
        alf_old = self.alf_begin.index_select(0, env)
        core = torch.where(is_first | prev_end, t, core_old)
        alf = torch.where(
            is_first, t, torch.where(held, alf_old, torch.where(prev_end, t, core_old))
        )
        self.core_begin.index_copy_(0, env, core)
        self.alf_begin.index_copy_(0, env, alf)
        self.ended.index_copy_(0, env, is_last)
        self.begin.index_copy_(0, slots, alf)
        count = self.first_count.index_select(0, env) + is_first.to(torch.int64)
        self.firsts.index_copy_(0, slots, count)
        self.first_count.index_copy_(0, env, count)
        if self.disc0 is not None and discount is not None:
            last0 = self.last0.index_select(0, env)
            self.disc0.index_copy_(0, slots, last0 + 1)
            self.last0.index_copy_(0, env, torch.where(discount == 0, t, last0))
        if self.returns:
            self._accumulate(env, t, slots, is_last, alf, reward, first_pos)

    def _accumulate(
        self,
        env: torch.Tensor,
        t: torch.Tensor,
        slots: torch.Tensor,
        is_last: torch.Tensor,
        alf: torch.Tensor,
        reward: torch.Tensor | None,
        first_pos: torch.Tensor,
    ) -> None:
        """Add the new steps' discounted rewards to the earlier steps of their episodes and
        complete the episodes a ``LAST`` ends (every slot, masked: no host decision)."""
        E, C = self.num_envs, self.max_length
        dev = self.device
        r = torch.zeros(t.shape[0], dtype=torch.float64, device=dev)
        if reward is not None:
            r = reward.to(dev, torch.float64).reshape(-1).clamp(*self.clip)
        self.acc.index_fill_(0, slots, 0.0)
        self.ret.index_fill_(0, slots, 0.0)
        self.done.index_fill_(0, slots, False)
        # Slot j of env e holds the step `back = (t - j) mod C` steps before the newest t
        # (in slot t % C). The steps of t's episode still stored are those with
        # back <= span = t - max(first, episode begin); the others of the env are not (and
        # envs without a new step get span -1: nothing).
        span = t - torch.maximum(first_pos.index_select(0, env), alf)
        span_e = torch.full((E,), -1, dtype=torch.int64, device=dev).index_copy_(0, env, span)
        done_e = torch.full((E,), -1, dtype=torch.int64, device=dev).index_copy_(
            0, env, torch.where(is_last, span, -1)
        )
        r_e = torch.zeros(E, dtype=torch.float64, device=dev).index_copy_(0, env, r)
        newest = torch.zeros(E, dtype=torch.int64, device=dev).index_copy_(0, env, t % C)
        back = self.backs.index_select(0, (C - 1) - newest)
        # step t - back gets gamma^(back - 1) * r_t (shifted[0] = 0: t itself gets nothing)
        within = back.masked_fill(back > span_e[:, None], 0)
        self.acc.view(E, C).add_(
            self.shifted.index_select(0, within.reshape(-1)).reshape(E, C) * r_e[:, None]
        )
        # a LAST completes its episode: every stored step of it (t included: 0) keeps acc
        complete = (back <= done_e[:, None]).reshape(-1)
        self.ret.copy_(torch.where(complete, self.acc, self.ret))
        self.done.logical_or_(complete)

    # ------------------------------------------------------------------ reading
    def begin_of(self, env: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """ALF's episode begin of stored steps ``pos`` of ``env``."""
        return self.begin.index_select(0, self.slots(env, pos))

    def disc0_of(self, env: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The discount-0 segment begin of stored steps ``pos`` of ``env``."""
        assert self.disc0 is not None
        return self.disc0.index_select(0, self.slots(env, pos))

    def steps_to_end(self, env: torch.Tensor, pos: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        """Steps from stored ``pos`` of ``env`` (1-D) to its episode's end; ``end`` is each
        env's ``current_pos``.

        The end is one before the env's next ``FIRST`` after ``pos`` (else its newest step):
        the first stored ``p > pos`` whose count of ``FIRST`` steps exceeds ``pos``'s, found
        by a binary search over the stored steps (``ceil(log2(C + 1))`` rounds of ``O(n)``
        gathers, a number known on the host).
        """
        newest = end.index_select(0, env) - 1
        before = self.firsts.index_select(0, self.slots(env, pos))
        lo, hi = pos + 1, newest + 1  # the answer is in [lo, hi]; hi: no FIRST stored after
        for _ in range(max(1, self.max_length).bit_length()):
            mid = torch.div(lo + hi, 2, rounding_mode="floor")
            later = self.firsts.index_select(0, self.slots(env, torch.minimum(mid, newest)))
            left = (later > before) & (lo < hi)
            right = (later <= before) & (lo < hi)
            hi = torch.where(left, mid, hi)
            lo = torch.where(right, mid + 1, lo)
        return lo - 1 - pos

    def returns_of(self, env: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """float32 ``discounted_return`` of stored steps ``pos`` of ``env`` (broadcast)."""
        slots = self.slots(env, pos)
        flat = slots.reshape(-1)
        got = torch.where(
            self.done.index_select(0, flat), self.ret.index_select(0, flat), self.default
        )
        return got.to(torch.float32).reshape(slots.shape)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, torch.Tensor]:
        """CPU copies of every tensor (names as the attributes)."""
        return {name: t.detach().cpu().clone() for name, t in self._tensors().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` onto the device (in place)."""
        for name, t in self._tensors().items():
            t.copy_(torch.as_tensor(state[name]).to(t.device))

    def _tensors(self) -> dict[str, torch.Tensor]:
        names = ("begin", "firsts", "first_count", "alf_begin", "core_begin", "ended",
                 "last0", "acc", "ret", "done")  # fmt: skip
        out = {n: getattr(self, n) for n in names}
        if self.disc0 is not None:
            out["disc0"] = self.disc0
        return out
