"""Transitions from stored steps on the device: n-step windows, discounts, next and final
observations, frame stacks, as the NumPy core's assembler builds them
(:mod:`rlreplay.assemble.transitions`).

For a step ``t`` whose episode ends at step ``d`` (or runs on), the window is ``t .. t+m-1``
with ``m = min(n, d - t + 1)``: ``reward = sum_{j<m} gamma^j r_{t+j}``, ``next_<obs> =
obs_{t+m}`` or the episode's final observation when the window reached its end, ``discount =
0`` if terminated else ``gamma^m``. Frame stacks hold frames ``tau-k+1 .. tau`` of the same
episode, padded before its first step with zeros or the first frame.

Observations are read from the storage's joint tensors
(:meth:`rlreplay.storage.TorchStorage.joint`: step rows, final rows and a row of zeros in one
tensor per field): ``next_<obs>`` is one gather of the step ``t+m`` or the final record, and
a zero-padded frame stack reads the row of zeros where it pads, so no select runs over
gathered observations.

Bit for bit: the rewards are multiplied by the NumPy core's powers of ``gamma`` (the same
numbers, :func:`rlreplay.assemble.powers.reward_powers` for a scalar reward), held as tensors
of the reward's dtype, and summed in the same order and dtype; every product and sum is its
own torch op (rounded once each, as NumPy rounds them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.assemble.powers import reward_powers
from rlreplay.storage.torch import TorchStorage
from rlreplay.torch.config import DeviceConfig

if TYPE_CHECKING:
    from torch import Tensor

    from rlreplay.torch.ring import Ring

__all__ = ["Assembler", "select", "zero_where"]


def _signed(t: Tensor) -> Tensor:
    """``t`` viewed as the signed tensor of its width when torch has no kernels for its
    unsigned dtype (uint16/32/64: same bits), else ``t``."""
    from rlreplay.storage.torch import _raw

    return _raw(t)


def select(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``torch.where(mask, a, b)`` for any stored dtype (``mask`` broadcast from the left)."""
    import torch

    mask = mask.reshape(mask.shape + (1,) * (a.dim() - mask.dim()))
    return torch.where(mask, _signed(a), _signed(b)).view(a.dtype)


def zero_where(mask: Tensor, a: Tensor) -> Tensor:
    """``a`` with zeros where ``mask`` (broadcast from the left), for any stored dtype."""
    mask = mask.reshape(mask.shape + (1,) * (a.dim() - mask.dim()))
    return _signed(a).masked_fill(mask, 0).view(a.dtype)


def powers(config: DeviceConfig) -> tuple[list[Any], Any]:
    """``(reward multipliers, discount table)`` exactly as the NumPy core computes them: its
    one-call kernel for a scalar reward, its general path for any other shape."""
    n, gamma = config.n_step, config.gamma
    dtype = config.schema.fields["reward"].dtype
    if config.schema.fields["reward"].shape == ():
        table = reward_powers(gamma, n, dtype)
        return [dtype.type(table[0, j]) for j in range(n)], table[1].astype(np.float32)
    # NumPy multiplies by the Python float gamma ** j, which it rounds to the reward's dtype.
    mults = [dtype.type(gamma**j) for j in range(n)]
    discounts = (np.float64(gamma) ** np.arange(n + 1)).astype(np.float32)
    return mults, discounts


class Assembler:
    """Builds transitions from a :class:`~rlreplay.storage.TorchStorage` and a
    :class:`~rlreplay.torch.ring.Ring` (constants prepared once, on the device)."""

    def __init__(self, config: DeviceConfig, storage: TorchStorage, ring: Ring) -> None:
        import torch

        self.config, self.storage, self.ring = config, storage, ring
        dev = storage.device
        rew = storage.steps["reward"]
        mults, discounts = powers(config)
        # (n, 1, ...): step j's multiplier against the window's rewards (B, n, *reward shape).
        shape = (len(mults),) + (1,) * (rew.dim() - 1)
        mult_arr = np.asarray(mults, dtype=config.schema.fields["reward"].dtype.newbyteorder("="))
        self.mults = torch.from_numpy(mult_arr).to(dev).reshape(shape)
        self.window = torch.arange(config.n_step, dtype=torch.int64, device=dev)[None, :]
        self.discounts = torch.from_numpy(np.asarray(discounts, np.float32)).to(dev)
        self.zero32 = torch.zeros((), dtype=torch.float32, device=dev)
        self.one32 = torch.ones((), dtype=torch.float32, device=dev)
        self.discount1 = self.discounts[1].clone()  # gamma, for n_step = 1
        k = config.frame_stack
        self.lanes = torch.arange(1 - k, 1, dtype=torch.int64, device=dev)
        self.is_last_lane = self.lanes == 0
        E, C, F = config.num_envs, config.env_capacity, config.finals_per_env
        # The row of zeros of the joint observation tensors (TorchStorage.joint) pads frame
        # stacks.
        self.zero_row = E * C + E * F + E

    def _joint(self, name: str) -> None:
        if self.storage.joint(name) is None:
            raise RuntimeError(
                f"the storage's finals of {name!r} were reallocated: a device buffer's finals "
                "capacity is fixed (do not call grow_finals / set_finals_capacity on it)"
            )

    def _window(self, base: Tensor, tc: Tensor, t: Tensor) -> tuple[Tensor, ...]:
        """``(m, reward, terminated, truncated, ended)`` of the windows at steps ``t`` (``base
        = env * C``, ``tc = t % C``).

        The window's rewards and flags are gathered at once (``(B, n)``); step ``j`` is in
        the window while no step before it ended its episode. The rewards are summed in the
        core's order, ``((0 + p_0 r_0) + p_1 r_1) + ...``, adding 0 for steps past the
        window's end: the same bits as the core's kernel, which stops adding (a sum that
        starts at +0 is never -0, so adding +0 changes nothing).
        """
        import torch

        st = self.storage
        n, C = self.config.n_step, self.config.env_capacity
        w = torch.remainder(tc[:, None] + self.window, C).add_(base[:, None])  # (B, n)
        a, b = st.take("terminated", w), st.take("truncated", w)
        done = a | b
        done_i = done.to(torch.int32)
        after_end = (torch.cumsum(done_i, 1) - done_i) > 0
        alive = ~after_end
        prods = zero_where(after_end, self.mults * st.take("reward", w))
        ret = torch.zeros_like(prods[:, 0])
        for j in range(n):
            ret = ret + prods[:, j]
        m = alive.sum(1)
        te = (alive & a).any(1)
        tr = (alive & b & ~a).any(1)
        return m, ret, te, tr, (alive & done).any(1)

    def weights(self, total: Tensor, batch_size: int) -> Tensor:
        """``(batch_size,)`` float32: 1 where ``total`` (a 0-d count of candidates) is
        positive, else 0."""
        import torch

        return torch.where((total > 0).expand(batch_size), self.one32, self.zero32)

    def transitions(self, env: Tensor, t: Tensor) -> dict[str, Tensor]:
        """The transitions at steps ``t`` of envs ``env`` (assumed sampleable).

        Observations come from the storage's joint tensors (:meth:`TorchStorage.joint`):
        ``next_<obs>`` is one gather of a row per transition, the step ``t+m`` or, where the
        window reached its episode's end, the final record (the ring's ``next_joint`` of the
        window's last step names it); a zero-padded frame stack reads the row of zeros where
        it pads. Cost: a fixed sequence of about 10 small index ops for ``n_step = 1`` (about
        20 for a longer window, more for a frame stack), plus one ``B``-row gather per stored
        field (per observation field: two, of ``B * k``
        rows each for a stack of ``k``), ``B * n`` rows for the window's reward and flags.

        Returns:
            The keys of :meth:`rlreplay.ReplayBuffer.get_transitions` in its order, without
            ``weights``.
        """
        import torch

        c, st, ring = self.config, self.storage, self.ring
        E, k, C, n = c.num_envs, c.frame_stack, c.env_capacity, c.n_step
        tc = torch.remainder(t, C)
        slot = torch.add(tc, env, alpha=C)  # env * C + t % C
        next_row: Tensor | None = None  # the row of step t+m (for next_fields)
        ended: Tensor | None = None  # whether the window reached its episode's end
        if n == 1:
            te, tr = st.take_checked("terminated", slot), st.take_checked("truncated", slot)
            reward = st.take_checked("reward", slot)
            if c.next_fields or k > 1:  # (next_<obs> needs no select: next_joint)
                ended = te | tr
            tr = tr > te  # truncated and not terminated
            m = torch.ones_like(t)
            last_row = slot  # the window's last step
            if c.next_fields:
                next_row = torch.add(torch.remainder(tc + 1, C), env, alpha=C)
            disc = torch.where(te, self.zero32, self.discount1)
        else:
            m, reward, te, tr, ended = self._window(slot - tc, tc, t)
            tcm = tc + m
            last_row = torch.add(torch.remainder(tcm - 1, C), env, alpha=C)
            if c.next_fields:
                next_row = torch.add(torch.remainder(tcm, C), env, alpha=C)
            disc = self.discounts.index_select(0, m).masked_fill_(te, 0.0)
        # The joint row of next_<obs>: the final record of the episode whose last step t+m-1
        # the window reached, else step t+m's row (the ring keeps it per step).
        next_joint = ring.next_joint.index_select(0, last_row)
        first = ring.ep_start.index_select(0, slot)[:, None] if k > 1 else None

        def stack_rows(last: Tensor) -> Tensor:
            """Joint rows of frames ``last-k+1 .. last`` of each row's episode ``(B, k)``."""
            assert first is not None
            pos = last[:, None] + self.lanes
            offset = torch.maximum(pos, first) - t[:, None]  # in [1 - k, n_step]
            rows = torch.add(torch.remainder(tc[:, None] + offset, C), env[:, None], alpha=C)
            if c.stack_pad == "zero":
                rows = torch.where(pos < first, self.zero_row, rows)
            return rows

        out: dict[str, Tensor] = {}
        nexts: dict[str, Tensor] = {}
        builtin = ("reward", "terminated", "truncated")
        for name, f in c.schema.fields.items():
            if name in builtin:
                continue
            if not f.observation:
                out[name] = st.take_checked(name, slot)
                continue
            self._joint(name)
            if name == "obs" and k > 1:
                out[name] = st.take_joint(name, stack_rows(t))
                assert ended is not None
                last = self.is_last_lane & ended[:, None]
                rows = torch.where(last, next_joint[:, None], stack_rows(t + m))
                nexts["next_" + name] = st.take_joint(name, rows)
            else:
                out[name] = st.take_checked(name, slot)
                nexts["next_" + name] = st.take_joint_checked(name, next_joint)
        for name in c.next_fields:
            assert next_row is not None and ended is not None
            v = st.take(name, next_row)
            nexts["next_" + name] = zero_where(ended, v)
        out["reward"] = reward
        out.update(nexts)
        out["terminated"] = te
        out["truncated"] = tr
        out["discount"] = disc
        out["steps"] = m
        out["ids"] = torch.add(env, t, alpha=E)  # t * E + env
        out["env_ids"] = env
        return out
