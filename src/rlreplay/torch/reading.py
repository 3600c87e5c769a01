"""The reading side of a device buffer: draws (transitions, sequences, episodes) and gathers by
id, each draw through the rate limiter's grant and the transforms.

:class:`Reads` checks a call's arguments on the host, then queues the draw and the gathers on
the device (:mod:`rlreplay.torch.draws`, :mod:`rlreplay.torch.sequences`,
:mod:`rlreplay.torch.episodes`, :class:`~rlreplay.torch.assemble.Assembler`). A draw goes
through :meth:`Reads.paced`: the rate limiter grants its rows first (or refuses at once,
:mod:`rlreplay.torch.pacing`), the transforms run after it (:mod:`rlreplay.torch.transforms`),
and if anything raises the grant is handed back and the generator put back. The buffer
(:class:`rlreplay.torch.DeviceReplayBuffer`) documents each call and forwards it here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.buffer.sync import check_timeout, flag
from rlreplay.errors import ConfigError, DTypeError, EmptyBufferError
from rlreplay.sampling.prioritized_args import _real
from rlreplay.sampling.uniform import DrawOptions, draw_options
from rlreplay.spec import positive_int
from rlreplay.storage.torch import TorchStorage
from rlreplay.torch import draws
from rlreplay.torch.assemble import Assembler
from rlreplay.torch.batch import DeviceBatch
from rlreplay.torch.budget import DeviceBudget
from rlreplay.torch.config import DeviceConfig
from rlreplay.torch.pacing import DevicePacing
from rlreplay.torch.prioritized import Priorities
from rlreplay.torch.ring import Ring
from rlreplay.torch.transforms import DeviceTransform, apply, checked, rollback_point

if TYPE_CHECKING:
    import torch
    from torch import Tensor


__all__ = ["Reads"]


class Reads:
    """Draws and gathers of one device buffer (see the module docstring)."""

    def __init__(
        self, config: DeviceConfig, storage: TorchStorage, ring: Ring, assembler: Assembler,
        budget: DeviceBudget, gen: torch.Generator, prio: Priorities | None,
        pacing: DevicePacing | None, transforms: tuple[DeviceTransform, ...],
    ) -> None:  # fmt: skip
        self.config = config
        self.storage = storage
        self.ring = ring
        self.assembler = assembler
        self.budget = budget
        self.gen = gen
        self.prio = prio
        self.pacing = pacing
        self.transforms = transforms
        self.device = storage.device
        self.options = draw_options(config.recent_ratio, config.recent_steps, config.replacement)

    def ids(self, ids: Any) -> Tensor:
        """Ids as flat int64 on the device (integers only)."""
        import torch

        if isinstance(ids, torch.Tensor):
            if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
                raise DTypeError(f"ids: expected integers, got {ids.dtype}")
            t = ids.to(self.device, non_blocking=ids.device.type == "cpu")
            return t.reshape(-1).long()
        a = np.asarray(ids)
        if a.dtype.kind not in "iu":
            if a.size:
                raise DTypeError(f"ids: expected integers, got {a.dtype}")
            a = np.zeros(a.shape, np.int64)  # no ids (of any dtype: none to cast)
        flat = np.ascontiguousarray(a.reshape(-1), np.int64)
        return torch.from_numpy(flat.copy()).to(self.device, non_blocking=True)

    def drawable(self) -> Tensor:
        """A 0-d bool tensor: whether a draw gives real transitions now."""
        if self.prio is not None:
            return self.prio.sums.total > 0
        return self.ring.sizes().sum() > 0

    def check_nonempty(self, check: bool) -> None:
        if flag("check", check) and not bool(self.drawable()):
            raise EmptyBufferError(
                "sample: nothing is sampleable yet (add more steps: a step is sampleable once "
                "its n-step window is known)"
            )

    def paced(
        self, n: int, timeout: Any, what: str, draw: Callable[[], DeviceBatch],
        fns: tuple[DeviceTransform, ...] = (),
    ) -> DeviceBatch:  # fmt: skip
        """``draw()`` through the transforms ``fns``, once the rate limiter (if any) granted
        ``n`` samples; if anything raises, the grant is handed back and (with transforms) the
        generator and ``beta``'s step are put back. ``timeout`` checked as the core checks it."""
        pacing = self.pacing
        if pacing is None and not fns:
            if timeout is not None:
                check_timeout(timeout)
            return draw()
        if pacing is not None:
            pacing.grant_sample(n, timeout, what)
        elif timeout is not None:
            check_timeout(timeout)
        undo = rollback_point(self.gen, self.prio) if fns else None
        try:
            batch = draw()
            for fn in fns:
                batch = apply(fn, batch)
            return batch
        except BaseException:
            if undo is not None:
                undo()
            if pacing is not None:
                pacing.cancel_sample(n)
            raise

    def transforms_of(self, transform: Any, buffer_transforms: bool) -> tuple[Any, ...]:
        """The transforms a draw goes through: the buffer's (for transitions), then the
        call's ``transform`` (checked)."""
        fns = self.transforms if buffer_transforms else ()
        if transform is None:
            return fns
        return (*fns, checked(transform, "transform"))

    def get_transitions(self, ids: Any, stack_layout: Any) -> DeviceBatch:
        """See :meth:`rlreplay.torch.DeviceReplayBuffer.get_transitions`."""
        import torch

        if not isinstance(stack_layout, str) or stack_layout not in ("first", "last"):
            raise ConfigError(f"stack_layout: expected 'first' or 'last', got {stack_layout!r}")
        idx = self.ids(ids)
        self.budget.check("ids", f"{idx.shape[0]} ids", idx.shape[0], "get_transitions")
        E = self.config.num_envs
        env = torch.remainder(idx, E)
        t = torch.div(idx, E, rounding_mode="floor")
        out = self.assembler.transitions(env, t)
        out["weights"] = torch.ones(idx.shape[0], dtype=torch.float32, device=self.device)
        if stack_layout == "last" and self.config.frame_stack > 1 and "obs" in out:
            for key in ("obs", "next_obs"):  # the stacked ones (as the core stacks)
                out[key] = out[key].movedim(1, -1).contiguous()
        return DeviceBatch(out)

    def sample(
        self, batch_size: Any, recent_ratio: Any, recent_steps: Any, replacement: Any,
        check: Any, timeout: Any, transform: Any,
    ) -> DeviceBatch:  # fmt: skip
        """See :meth:`rlreplay.torch.DeviceReplayBuffer.sample`."""
        batch_size = positive_int("batch_size", batch_size)
        self.budget.check("batch_size", batch_size, batch_size, "sample")
        c = self.config
        if recent_ratio is None and recent_steps is None and replacement is None:
            options = self.options  # the buffer's own
        else:
            options = draw_options(
                c.recent_ratio if recent_ratio is None else recent_ratio,
                c.recent_steps if recent_steps is None else recent_steps,
                c.replacement if replacement is None else replacement,
            )

        fns = self.transforms_of(transform, True)

        def draw() -> DeviceBatch:
            self.check_nonempty(check)
            return self.draw_uniform(batch_size, options)

        return self.paced(batch_size, timeout, "sample", draw, fns)

    def draw_uniform(self, batch_size: int, options: DrawOptions) -> DeviceBatch:
        """A uniform draw of ``batch_size`` transitions (the recency mix, without
        replacement), assembled."""
        import torch

        recent = draws.recent_count(options.recent_ratio, batch_size)
        ring, gen = self.ring, self.gen
        cands = ring.candidates()
        if recent:
            env, t = draws.mixed(ring, cands, batch_size, recent, options.recent_steps, gen)
            total = cands.sizes.sum()
        else:
            env, t, total = draws.uniform(ring, cands, batch_size, gen)
        if not options.replacement and batch_size <= self.config.num_slots:
            # Distinct whenever enough are sampleable (else, as the core, with replacement).
            env_d, t_d = draws.distinct(ring, cands, batch_size, recent, options.recent_steps,
                                        gen)  # fmt: skip
            enough = batch_size <= total
            env, t = torch.where(enough, env_d, env), torch.where(enough, t_d, t)
        out = self.assembler.transitions(env, t)
        out["weights"] = self.assembler.weights(total, batch_size)
        return DeviceBatch(out)

    def sample_sequences(
        self, batch_size: Any, length: Any, within_episode: Any, pad: Any, balance_envs: Any,
        beta: Any, timeout: Any, transform: Any,
    ) -> DeviceBatch:  # fmt: skip
        """See :meth:`rlreplay.torch.DeviceReplayBuffer.sample_sequences`."""

        batch_size = positive_int("batch_size", batch_size)
        length = positive_int("length", length)
        self.budget.check("batch_size", batch_size, batch_size * length, "sample_sequences",
                           "step")  # fmt: skip
        within_episode = flag("within_episode", within_episode)
        pad, balance_envs = flag("pad", pad), flag("balance_envs", balance_envs)
        prio = self.prio
        if prio is not None and balance_envs:
            raise ConfigError(
                "balance_envs: prioritized sequence starts are drawn by priority over all envs"
            )
        if prio is None and beta is not None:
            raise ConfigError("beta: a uniform buffer has no importance weights")
        if beta is not None:
            beta = _real("beta", beta)
        return self.paced(
            batch_size, timeout, "sample_sequences",
            lambda: self.draw_sequences(batch_size, length, within_episode, pad, balance_envs,
                                         beta),
            self.transforms_of(transform, False),
        )  # fmt: skip

    def draw_sequences(
        self, batch_size: int, length: int, within_episode: bool, pad: bool,
        balance_envs: bool, beta: float | None,
    ) -> DeviceBatch:  # fmt: skip
        """The draw of :meth:`sample_sequences` (arguments checked)."""
        import torch

        from rlreplay.torch import sequences

        prio = self.prio
        probabilities = None
        if prio is None:
            env, t, exists = sequences.uniform_starts(
                self.ring, self.gen, batch_size, length, bool(within_episode), bool(pad),
                bool(balance_envs),
            )  # fmt: skip
            weights = exists.to(torch.float32).expand(batch_size).clone()
        elif pad:  # every sampleable transition is a start: the buffer's own draw
            env, t, probabilities, weights = prio.draw(batch_size, self.gen, beta)
        else:
            if beta is None:
                beta = prio.beta()
                prio.beta_step += 1
            env, t, probabilities, weights = sequences.prioritized_starts(
                prio, self.gen, batch_size, length, bool(within_episode), beta
            )
        out = sequences.gather(self.ring, self.storage, env, t, length, bool(within_episode))
        out["weights"] = weights
        if probabilities is not None:
            out["probabilities"] = probabilities
        return DeviceBatch(out)

    def sample_episodes(self, n: Any, max_length: Any) -> DeviceBatch:
        """See :meth:`rlreplay.torch.DeviceReplayBuffer.sample_episodes`."""
        from rlreplay.torch import sequences
        from rlreplay.torch.episodes import draw_episodes

        n = positive_int("n", n)
        if max_length is not None:
            max_length = positive_int("max_length", max_length)
            self.budget.check("n", n, n * max_length, "sample_episodes", "step")
        else:
            self.budget.check("n", n, n, "sample_episodes", "step")
        env, start, lengths, total = draw_episodes(self.ring, n, self.gen)
        if max_length is None:
            if not bool(total > 0):
                raise EmptyBufferError("sample_episodes: no complete episode is stored")
            max_length = int(lengths.max())
            self.budget.check("n", n, n * max_length, "sample_episodes", "step")
        else:
            lengths = lengths.masked_fill(total == 0, 0)
        out = sequences.gather(self.ring, self.storage, env, start, max_length, True)
        out["lengths"] = lengths
        return DeviceBatch(out)

    def get_sequences(self, ids: Any, length: Any, within_episode: Any) -> DeviceBatch:
        """See :meth:`rlreplay.torch.DeviceReplayBuffer.get_sequences`."""
        import torch

        from rlreplay.torch import sequences

        length = positive_int("length", length)
        within_episode = flag("within_episode", within_episode)
        idx = self.ids(ids)
        # (no ids too: the gather's per-step arrays are (n, length))
        rows = max(idx.shape[0], 1) * length
        self.budget.check("length", length, rows, "get_sequences", "step")
        E = self.config.num_envs
        env = torch.remainder(idx, E)
        t = torch.div(idx, E, rounding_mode="floor")
        return DeviceBatch(
            sequences.gather(self.ring, self.storage, env, t, length, bool(within_episode))
        )
