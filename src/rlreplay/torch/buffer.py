"""The device buffer :class:`DeviceReplayBuffer` (its prioritized subclass:
:mod:`rlreplay.torch.prioritized_buffer`).

It checks its arguments once, on the host (:mod:`rlreplay.torch.config`), and holds its
data as tensors on one torch device, updated in place by every call: the field columns in a
:class:`rlreplay.storage.TorchStorage`, the episode bookkeeping in a
:class:`~rlreplay.torch.ring.Ring`, the priorities in
:class:`~rlreplay.torch.prioritized.Priorities`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.buffer.episodes import StoredRange
from rlreplay.errors import ConfigError, ShapeError
from rlreplay.limits import RateLimiter
from rlreplay.spec import Field, positive_int
from rlreplay.storage.torch import TorchStorage
from rlreplay.torch.assemble import Assembler
from rlreplay.torch.batch import DeviceBatch
from rlreplay.torch.budget import DeviceBudget
from rlreplay.torch.config import DeviceConfig, make_config
from rlreplay.torch.pacing import DevicePacing
from rlreplay.torch.prioritized import Priorities
from rlreplay.torch.reading import Reads
from rlreplay.torch.ring import Ring
from rlreplay.torch.transforms import (
    DeviceTransform,
    checked_all,
)
from rlreplay.torch.writing import Writes

if TYPE_CHECKING:
    import os

    import torch
    from torch import Tensor

    from rlreplay.buffer import ReplayBuffer

__all__ = ["DeviceReplayBuffer"]


class DeviceReplayBuffer:
    """An episode-aware replay buffer whose data lives on a torch device, for ``num_envs``
    envs that step together (every :meth:`add` gives one step of each) or not (``add(...,
    env_ids=...)`` gives one step of some of them).

    Semantics are those of :class:`rlreplay.ReplayBuffer`: the same ids (``t * num_envs + e``,
    ``t`` counted per env), the same sampleable transitions and, for every id, the same values
    bit for bit (n-step rewards and discounts, ``next_obs`` with final observations at episode
    ends, terminated vs truncated, frame stacks with either ``stack_pad``, ``next_fields``),
    the same laws for draws (uniform, the recency mix, without replacement; from a
    :class:`torch.Generator` on the device seeded by ``seed``, not NumPy's stream) and the same
    :meth:`clear`. Where it differs (as the JAX buffer, :class:`rlreplay.jax.JaxBuffer`):

    * An env keeps the final observations of at most ``finals_per_env`` ended episodes
      (default ``C // 4``, ``C = capacity // num_envs``). Ending one more while its ring still
      holds that many drops the env's oldest stored episode whole, as
      :meth:`rlreplay.ReplayBuffer.dequeue` would. ``finals_per_env=C`` never drops anything.
    * ``next_<obs>`` is given at every :meth:`add` (it is kept only where the step ends its
      episode): whether a step ends is a device value.
    * Nothing raises on device values: :meth:`sample` on a buffer where :meth:`can_sample` is
      False returns arbitrary rows with ``weights`` 0 (unless ``check=True``, which reads the
      count on the host and raises :class:`~rlreplay.EmptyBufferError`);
      :meth:`get_transitions` of ids that are not sampleable returns arbitrary values.
    * :meth:`dequeue` never blocks (one thread uses a buffer).
    * A ``rate_limiter`` never makes a call wait (one thread uses a buffer): a call it refuses
      raises :class:`~rlreplay.ReplayTimeout` at once. Its ``size`` is counted on the host
      from the steps each env holds, less its newest ``n_step`` (the core's sampleable count
      when no episode ended among them; see :mod:`rlreplay.torch.pacing`).
    * :meth:`abandon_episode` waits for the device (whether an episode runs is read on the
      host); until the next :meth:`clear`, uniform draws map past the holes it leaves.
    * ``transforms`` are functions of a :class:`DeviceBatch`; bindable ones
      (:class:`rlreplay.HindsightRelabel`) read a host buffer's parts and are refused
      (:mod:`rlreplay.torch.transforms`).
    * Not offered: memmap storage (:meth:`to_replay_buffer` gives a NumPy buffer that has it).

    Host synchronisation: given tensors on the device, :meth:`add` (``env_ids`` too),
    :meth:`sample`, :meth:`get_transitions`, :meth:`sample_sequences`, :meth:`get_sequences`,
    ``sample_episodes(..., max_length=L)``, :meth:`can_sample`, :attr:`num_sampleable`,
    :attr:`num_stored`, :attr:`num_episodes`, :attr:`env_steps_added`, :attr:`stored_bounds`
    and :meth:`clear` (and :meth:`DevicePrioritizedReplayBuffer.update_priorities`) read no
    device value on the host
    (no ``.item()``, ``.cpu()``, ``.tolist()``, ``bool()`` of a device tensor) and make no
    data-dependent shape: they queue work on the device and return. On a GPU, with
    ``torch.cuda.set_sync_debug_mode("error")`` they raise nothing (the CPU test suite counts
    such calls with a :class:`torch.overrides.TorchFunctionMode` and finds none). NumPy
    arrays and Python scalars given to them are copied to the device once. What waits for the
    device says so: :meth:`sampleable_ids`, ``sample(..., check=True)``, :meth:`dequeue`,
    :meth:`gather_all`, :meth:`sample_episodes` without ``max_length``, :meth:`stored_range`,
    :meth:`abandon_episode`, :meth:`to_replay_buffer` and :meth:`save`. A ``rate_limiter``
    and ``transforms`` (of torch ops) add no wait to the calls that make none.

    Args:
        capacity: Transitions stored over all envs; at least ``num_envs * (n_step +
            frame_stack)``. Each env keeps ``capacity // num_envs`` steps.
        fields: Name -> :class:`rlreplay.Field`, as for :class:`rlreplay.ReplayBuffer`
            (``reward`` must be float32 or float64).
        num_envs: ``E``: an :meth:`add` takes one step of each env (or of ``env_ids``).
        n_step: Window length.
        gamma: Discount in ``[0, 1]``.
        frame_stack: ``k``: sampled ``obs``/``next_obs`` are ``(B, k, *frame)`` stacks.
        stack_pad: ``"zero"`` or ``"first"``.
        next_fields: Non-observation fields also read at step ``t+m`` (zeros at episode ends).
        finals_per_env: Final observations kept per env (see above).
        device: Any torch device (``"cpu"``, ``"cuda:0"``, a :class:`torch.device`).
        seed: Seed of the buffer's :class:`torch.Generator` (``None``: a random seed).
        recent_ratio, recent_steps: ``ceil(recent_ratio * B)`` draws of a batch of ``B`` are
            uniform over the ``recent_steps`` newest sampleable transitions of each env.
        replacement: If False, a batch has no duplicates whenever enough transitions are
            sampleable (``O(E * C)`` per draw: a key per slot and a top-k on the device).
        rate_limiter: A :class:`rlreplay.RateLimiter` (``rr.MinSize``,
            ``rr.SampleToInsertRatio``) that :meth:`add` (one insert per env step) and
            :meth:`sample` / :meth:`sample_sequences` (one sample per row) ask first, with the
            core's counters and checks; it counts for this buffer only. Nothing waits for it
            (see above); :meth:`to_replay_buffer` and :meth:`save` carry its parameters and
            counters.
        transforms: Functions ``DeviceBatch -> DeviceBatch`` applied in order to every
            :meth:`sample` (see :mod:`rlreplay.torch.transforms`); bindable transforms are
            refused (:class:`~rlreplay.ConfigError`).

    Cost: :meth:`add` writes ``E`` rows per column plus ``O(E * frame_stack)`` bookkeeping;
    :meth:`sample` and :meth:`get_transitions` are ``O(B * (n_step + frame_stack))`` gathers
    (a fixed sequence of torch ops: on a GPU, launch-bound for small batches; about 25
    ops for a ``sample`` of ``n_step = 1`` with one observation field, and about 26 for an
    :meth:`add`, ``benchmarks/torch_device.py --count-ops``). Each observation
    field's step and final rows share one tensor, so ``next_<obs>`` (and a frame stack) is
    one gather, with no select over gathered rows. A buffer is
    not thread-safe (the core's is): use it from one thread, or lock around it.

    Example:
        >>> import numpy as np, torch, rlreplay as rr, rlreplay.torch as rrt
        >>> buf = rrt.DeviceReplayBuffer(64, {"obs": rr.Field((2,), np.float32)}, num_envs=2,
        ...                              n_step=2, seed=0)
        >>> ids = buf.add(obs=torch.zeros(2, 2), reward=torch.ones(2),
        ...               terminated=torch.tensor([True, False]),
        ...               truncated=torch.tensor([False, False]), next_obs=torch.ones(2, 2))
        >>> ids.tolist(), int(buf.num_sampleable)
        ([0, 1], 1)
        >>> batch = buf.sample(4)
        >>> batch.ids.tolist(), batch.next_obs[0].tolist()
        ([0, 0, 0, 0], [1.0, 1.0])
    """

    _prio: Priorities | None = None
    _pacing: DevicePacing | None = None

    def __init__(
        self,
        capacity: int,
        fields: Mapping[str, Field | tuple[Any, Any]],
        *,
        num_envs: int = 1,
        n_step: int = 1,
        gamma: float = 0.99,
        frame_stack: int = 1,
        stack_pad: str = "zero",
        next_fields: Sequence[str] = (),
        finals_per_env: int | None = None,
        device: Any = "cpu",
        seed: int | None = None,
        recent_ratio: float = 0.0,
        recent_steps: int = 1,
        replacement: bool = True,
        rate_limiter: RateLimiter | None = None,
        transforms: Sequence[DeviceTransform] = (),
    ) -> None:
        config = make_config(
            capacity, fields, num_envs=num_envs, n_step=n_step, gamma=gamma,
            frame_stack=frame_stack, stack_pad=stack_pad, next_fields=next_fields,
            finals_per_env=finals_per_env, prioritized=False, recent_ratio=recent_ratio,
            recent_steps=recent_steps, replacement=replacement,
        )  # fmt: skip
        self._setup(config, device, seed, rate_limiter, transforms)

    def _setup(
        self, config: DeviceConfig, device: Any, seed: int | None,
        rate_limiter: RateLimiter | None, transforms: Sequence[DeviceTransform] = (),
    ) -> None:  # fmt: skip
        try:
            import torch
        except ImportError as exc:
            raise ImportError(
                "rlreplay.torch needs PyTorch: pip install torch (any build: CPU, CUDA, ROCm)"
            ) from exc

        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
        ):
            raise ConfigError(f"seed: expected None or an int >= 0, got {seed!r}")
        DevicePacing.check(rate_limiter, config.num_envs)
        self._transforms = checked_all(transforms)
        self.config = config
        self._storage = TorchStorage(
            config.schema, config.num_envs, config.env_capacity, config.finals_per_env, device,
            joint_finals=True,
        )  # fmt: skip
        self.device: torch.device = self._storage.device
        self._ring = Ring(config, self.device)
        self._assembler = Assembler(config, self._storage, self._ring)
        self._budget = DeviceBudget(config, self.device)  # results' sizes, checked before draws
        self._gen = torch.Generator(device=self.device)
        if seed is None:
            self._gen.seed()
        else:
            self._gen.manual_seed(int(seed))
        self.seed = seed
        if config.prioritized:
            self._prio = Priorities(config, self._ring)
        self._pacing = None if rate_limiter is None else DevicePacing(rate_limiter, config)
        self._writes = Writes(config, self._storage, self._ring, self._prio, self._pacing)
        self._reads = Reads(
            config, self._storage, self._ring, self._assembler, self._budget, self._gen,
            self._prio, self._pacing, self._transforms,
        )  # fmt: skip
        if rate_limiter is not None:
            rate_limiter.bind(self)

    # ------------------------------------------------------------------ sizes
    capacity = property(lambda self: self.config.capacity, doc="Transitions over all envs.")
    num_envs = property(lambda self: self.config.num_envs, doc="``E``: envs stepping together.")
    env_capacity = property(lambda self: self.config.env_capacity, doc="``C``: steps per env.")
    n_step = property(lambda self: self.config.n_step, doc="Window length.")
    gamma = property(lambda self: self.config.gamma, doc="Discount.")
    frame_stack = property(lambda self: self.config.frame_stack, doc="Frames per stack.")
    stack_pad = property(lambda self: self.config.stack_pad, doc="Stack padding.")
    next_fields = property(lambda self: self.config.next_fields, doc="Fields also read next.")
    finals_per_env = property(lambda self: self.config.finals_per_env, doc="Final records.")
    schema = property(lambda self: self.config.schema, doc="The fields, built-ins included.")

    @property
    def steps_added(self) -> int:
        """Steps each env has added so far (a host int: the next step's ``t``), while every
        env has added as many (an :meth:`add` with ``env_ids`` may make them differ: then
        :attr:`env_steps_added`).

        Raises:
            ShapeError: The envs are counted per env (an :meth:`add` gave ``env_ids``) and
                their counts are not known equal on the host.
        """
        ring = self._ring
        if not ring.per_env:
            return ring.count
        counts = ring.host_counts
        if counts is not None and (counts == counts[0]).all():
            return int(counts[0])
        raise ShapeError(
            "steps_added: the envs have added different numbers of steps (add with env_ids); "
            "read env_steps_added, one count per env"
        )

    @property
    def env_steps_added(self) -> Tensor:
        """``(E,)`` int64 on the device: steps each env has added (its next step's ``t``)."""
        import torch

        ring = self._ring
        if ring.counts is None:
            return torch.full((self.config.num_envs,), ring.count, dtype=torch.int64,
                              device=self.device)  # fmt: skip
        return ring.counts.clone()

    @property
    def transforms(self) -> tuple[DeviceTransform, ...]:
        """The constructor's ``transforms``, applied in order to every :meth:`sample`."""
        return self._transforms

    @property
    def rate_limiter(self) -> RateLimiter | None:
        """The :class:`rlreplay.RateLimiter` that paces :meth:`add` against :meth:`sample` and
        :meth:`sample_sequences` (``None``: none); its ``stats`` are live. Nothing waits for
        it: a call it refuses raises :class:`~rlreplay.ReplayTimeout` at once. Its ``size``
        is counted on the host (see :mod:`rlreplay.torch.pacing`)."""
        return None if self._pacing is None else self._pacing.limiter

    @property
    def storage(self) -> TorchStorage:
        """The field columns (env ``e``'s ring in rows ``e * C .. e * C + C - 1``)."""
        return self._storage

    def __repr__(self) -> str:
        c = self.config
        return (
            f"{type(self).__name__}(capacity={c.capacity}, num_envs={c.num_envs}, "
            f"n_step={c.n_step}, frame_stack={c.frame_stack}, device={str(self.device)!r}, "
            f"fields={list(c.schema.fields)})"
        )

    # ------------------------------------------------------------------ inputs
    def _ids(self, ids: Any) -> Tensor:
        """Ids as flat int64 on the device (integers only)."""
        return self._reads.ids(ids)

    # ------------------------------------------------------------------ writes
    def add(self, *, env_ids: Any = None, timeout: float | None = None, **values: Any) -> Tensor:
        """Store one step of every env, or of the envs ``env_ids``.

        Args:
            env_ids: Which envs this step belongs to (default: all, in order), as
                :meth:`rlreplay.ReplayBuffer.add` takes them: distinct ints in ``[0,
                num_envs)``, in any order; every value then has a leading axis
                ``len(env_ids)``. A 1-D integer tensor (on the device: no host
                synchronisation), a NumPy array or a list. Host values (and a CPU tensor
                given to a buffer on another device) are checked in full (1-D, integers, in
                range, distinct); of a tensor on the buffer's device only its shape and dtype
                are checked (its values would have to be read on the host): out-of-range
                values are a device-side indexing error and duplicates leave the envs'
                bookkeeping undefined.
            **values: Every declared field, ``reward``, ``terminated``, ``truncated`` and
                ``next_<obs>`` for each observation field, each with a leading axis ``E``
                (``len(env_ids)`` with ``env_ids``; omittable when ``E == 1``): tensors (used
                as they are when on the device, cast there if their dtype differs; a CPU
                tensor is copied without waiting, so a *pinned* one must not be changed until
                the device has read it) or NumPy arrays / scalars (copied once).
                ``next_<obs>`` is kept only where the step ends its episode.
            timeout: Checked as the core checks it; with a ``rate_limiter``, a step it does
                not allow now raises :class:`~rlreplay.ReplayTimeout` at once (nothing waits).

        Returns:
            int64 ids of the stored transitions, ``(E,)`` (``(len(env_ids),)``) on the device.

        Raises:
            FieldError: A missing or unknown name.
            ShapeError: A value's shape is not ``(E, *field.shape)``.
            DTypeError: A value that NumPy's ``same_kind`` rule cannot cast.
            InvalidIdError: ``env_ids`` not a 1-D sequence of ints; host ``env_ids`` out of
                range or repeated.
            ReplayTimeout: The ``rate_limiter`` does not allow the step's inserts now
                (``num_envs`` of them, or ``len(env_ids)``).

        Nothing is changed when an error is raised (every value is checked first).

        Envs may thus add different numbers of steps (ids ``t_e * E + e`` with env ``e``'s
        own ``t_e``). From the first ``add`` with ``env_ids`` on, the buffer counts steps per
        env on the device (:mod:`rlreplay.torch.ring`): every later :meth:`add` costs about
        20 more small torch ops, and :attr:`steps_added` gives way to :attr:`env_steps_added`.
        ``env_ids`` naming every env in order (``range(num_envs)`` on the host) is a plain
        :meth:`add`.
        """
        return self._writes.add(env_ids, timeout, values)

    def clear(self) -> None:
        """Drop every stored transition, as :meth:`rlreplay.ReplayBuffer.clear` does.

        Ids keep counting, so ids issued before stay recognisably stale. An episode running
        across the call goes on: its later steps are stored and sampleable as those of an
        episode whose start was overwritten. A prioritized buffer keeps its largest priority
        and ``beta``'s step; a ``rate_limiter``'s size drops to 0 (its counts of inserts and
        samples stay). ``O(E)`` (prioritized: ``O(E * C)``, the trees are emptied).
        """
        self._ring.clear()
        if self._prio is not None:
            self._prio.clear()
        if self._pacing is not None:
            self._pacing.cleared()

    def abandon_episode(self, env_id: int = 0) -> Tensor:
        """Abandon env ``env_id``'s running episode: end it at its newest step, unobserved,
        as :meth:`rlreplay.ReplayBuffer.abandon_episode` does.

        No final observation and no ``terminated``/``truncated`` flag: the episode's steps
        whose ``n_step``-step windows are complete inside it stay sampleable as they are; the
        others (its last ``n_step`` steps) stay stored, for sequences, but are never
        sampleable: :meth:`sample` never draws them, a prioritized buffer gives them no
        mass and :meth:`~DevicePrioritizedReplayBuffer.update_priorities` ignores their ids.
        The next step added for the env starts a new episode; ``sample_sequences`` and
        ``get_sequences`` with ``within_episode`` stop at the cut (its ``next_known`` is
        False) and :meth:`sample_episodes` leaves the episode out. Conversions and
        checkpoints keep the cut (see :mod:`rlreplay.torch.holes`).

        Args:
            env_id: The env (an int in ``[0, num_envs)``).

        Returns:
            The id of the step that now ends the abandoned episode (an int64 tensor of shape
            ``(1,)`` on the device), or an empty one when no episode runs (no step added
            yet, or the newest step already ends its episode): then nothing changes. An
            episode whose steps are no longer stored is still abandoned (its id returned).

        Raises:
            InvalidIdError: ``env_id`` is not an env of this buffer.

        Waits for the device: whether an episode runs is read on the host. Until the next
        :meth:`clear`, uniform draws map positions past the holes (a few more torch ops per
        draw, one per hole an env holds) and a frame-stacked :meth:`add` checks the marks.

        Example:
            >>> import numpy as np, torch, rlreplay as rr, rlreplay.torch as rrt
            >>> buf = rrt.DeviceReplayBuffer(8, {"obs": rr.Field((), np.float32)}, n_step=2)
            >>> for t in range(4):
            ...     _ = buf.add(obs=t, reward=1.0, terminated=False, truncated=False,
            ...                 next_obs=t + 1)
            >>> buf.abandon_episode().tolist(), buf.sampleable_ids().tolist()
            ([3], [0, 1])
        """
        return self._writes.abandon(env_id)

    # ------------------------------------------------------------------ FIFO use
    def dequeue(
        self, n: int, env_ids: Any = None, *, block: bool = False, timeout: float | None = None
    ) -> DeviceBatch:
        """Remove and return the oldest ``n`` steps of each env (ALF ``dequeue``), as
        :meth:`rlreplay.ReplayBuffer.dequeue`: the same values, and the same steps stay.

        Args:
            n: Steps per env.
            env_ids: Which envs (default: all): distinct ints, host values or a tensor.
            block: Only False: a device buffer is used from one thread, so nothing could add
                the steps a blocking call would wait for.
            timeout: Checked as the core checks it (no call waits).

        Returns:
            A :class:`DeviceBatch` of raw per-step fields shaped ``(len(env_ids), n, ...)``,
            with ``next_<obs>``, ``mask`` (all True), ``next_known``, per-step ``ids`` and
            ``env_ids``.

        Raises:
            ConfigError: ``n`` not a positive int, ``block=True``, an invalid ``timeout``.
            InvalidIdError: ``env_ids`` not distinct ints in ``[0, num_envs)``.
            ShapeError: ``n`` is more than an env can hold.
            EmptyBufferError: A named env holds fewer than ``n`` steps (nothing is removed).

        Waits for the device: whether the envs hold ``n`` steps is read on the host. Steps
        removed are no longer sampleable (a prioritized buffer's leaves are recomputed,
        ``O(E * C)``); their ids become stale.
        """
        from rlreplay.torch import fifo

        return fifo.dequeue(self, n, env_ids, block=block, timeout=timeout)

    def gather_all(self) -> DeviceBatch:
        """Every stored step, shaped ``(E, T, ...)`` (ALF ``gather_all``), as
        :meth:`rlreplay.ReplayBuffer.gather_all`: ``T`` is the most steps any env holds,
        ``mask`` marks real steps where envs hold fewer; per-step ``ids`` and ``env_ids``.
        Waits for the device (``T`` is read on the host)."""
        from rlreplay.torch import fifo

        return fifo.gather_all(self)

    # ------------------------------------------------------------------ reads
    @property
    def num_sampleable(self) -> Tensor:
        """A 0-d int64 tensor: how many transitions :meth:`sample` draws from."""
        return self._ring.sizes().sum()

    def can_sample(self, batch_size: int = 1) -> Tensor:
        """A 0-d bool tensor: whether :meth:`sample` draws real transitions now.

        As :meth:`rlreplay.ReplayBuffer.sample`, a batch of any size is drawn (with
        replacement) once one transition is sampleable; a prioritized buffer also needs one
        of priority ``> 0``. For a warm-up size use ``num_sampleable >= n``.
        """
        positive_int("batch_size", batch_size)
        return self._reads.drawable()

    def sampleable(self, ids: Any) -> Tensor:
        """A bool tensor per id: whether the transition is sampleable now."""
        import torch

        idx = self._ids(ids)
        E = self.config.num_envs
        env = torch.remainder(idx, E)
        t = torch.div(idx, E, rounding_mode="floor")
        return (idx >= 0) & self._ring.sampleable(env, t)

    @property
    def num_stored(self) -> Tensor:
        """A 0-d int64 tensor: steps stored over all envs (no wait for the device)."""
        ring = self._ring
        return (ring.now - ring.head).sum()

    @property
    def stored_bounds(self) -> tuple[Tensor, Tensor]:
        """``(first, end)``: each env's stored steps ``first[e] .. end[e] - 1`` as ``(E,)``
        int64 tensors on the device (copies; no wait for the device)."""
        import torch

        ring = self._ring
        now = ring.now
        end = torch.full_like(ring.head, now) if isinstance(now, int) else now.clone()
        return ring.head.clone(), end

    def stored_range(self) -> StoredRange:
        """Each env's stored steps ``first[e] .. end[e] - 1``, as
        :meth:`rlreplay.ReplayBuffer.stored_range` gives them (int64 NumPy arrays of shape
        ``(num_envs,)``). Waits for the device."""
        ring = self._ring
        # Copies: on a CPU device ``.numpy()`` is a view of the buffer's own tensor.
        first = np.array(ring.head.cpu().numpy(), np.int64)
        return StoredRange(first, ring.env_counts())

    def sampleable_ids(self) -> Tensor:
        """Every sampleable id (int64 on the device), env after env, ascending within each,
        as :meth:`rlreplay.ReplayBuffer.sampleable_ids` orders them. Waits for the device
        (how many there are is read on the host)."""
        import torch

        ring = self._ring
        lo, hi = ring.lo.cpu().numpy(), ring.hi.cpu().numpy()
        E = self.config.num_envs
        parts = []
        for e in range(E):
            t = np.arange(lo[e], max(lo[e], hi[e]), dtype=np.int64)
            for start, end in [] if ring.holes is None else ring.holes.lists[e]:
                t = t[(t < start) | (t > end)]  # an abandoned episode's hole
            parts.append(t * E + e)
        return torch.from_numpy(np.concatenate(parts)).to(self.device)

    def get_transitions(self, ids: Any, *, stack_layout: str = "first") -> DeviceBatch:
        """Assemble the transitions ``ids`` (which should be sampleable: :meth:`sampleable`;
        rows of others hold arbitrary values), in their order.

        Args:
            ids: Transition ids (a tensor or host values).
            stack_layout: Where the stack axis of stacked observations (``obs`` and
                ``next_obs`` with ``frame_stack > 1``) goes, as
                :meth:`rlreplay.ReplayBuffer.get_transitions` lays it out: ``"first"``,
                ``(B, frame_stack, *frame)`` as :meth:`sample`'s; or ``"last"``, ``(B,
                *frame, frame_stack)``, contiguous (the same values, bit for bit; one copy
                of each stack on the device).

        Returns:
            A :class:`DeviceBatch` like :meth:`sample`'s (``weights`` ones, no
            ``probabilities``).

        Raises:
            ConfigError: ``stack_layout`` is neither ``"first"`` nor ``"last"``.
        """
        return self._reads.get_transitions(ids, stack_layout)

    def sample(
        self,
        batch_size: int,
        *,
        recent_ratio: float | None = None,
        recent_steps: int | None = None,
        replacement: bool | None = None,
        check: bool = False,
        timeout: float | None = None,
        transform: DeviceTransform | None = None,
    ) -> DeviceBatch:
        """Draw ``batch_size`` transitions uniformly (see the class docstring for the laws).

        Args:
            batch_size: Transitions to draw.
            recent_ratio, recent_steps, replacement: Override the buffer's draw options for
                this draw, as :meth:`rlreplay.ReplayBuffer.sample` does.
            check: Read on the host whether anything is sampleable and raise
                :class:`~rlreplay.EmptyBufferError` if not (one wait for the device). Without
                it (the default) nothing waits: an empty buffer gives arbitrary rows with
                ``weights`` 0.
            timeout: Checked as the core checks it; with a ``rate_limiter``, a batch it
                does not allow now raises :class:`~rlreplay.ReplayTimeout` at once (nothing
                waits: see :mod:`rlreplay.torch.pacing`).
            transform: A function ``DeviceBatch -> DeviceBatch`` applied after the buffer's
                ``transforms`` (see :mod:`rlreplay.torch.transforms`). If a transform raises,
                its exception passes through and the draw is rolled back (the generator is
                as before the call).

        Returns:
            A :class:`DeviceBatch`: the keys of :meth:`rlreplay.ReplayBuffer.sample`'s batch
            (``weights`` 1 where something was sampleable, else 0).

        Raises:
            ConfigError: ``batch_size`` not a positive int, a draw option out of range, or a
                ``transform`` that is not callable (or is bindable).
            EmptyBufferError: ``check`` and nothing sampleable.
            ReplayTimeout: The ``rate_limiter`` does not allow ``batch_size`` samples now.

        A refused call draws nothing and changes nothing.
        """
        return self._reads.sample(
            batch_size, recent_ratio, recent_steps, replacement, check, timeout, transform
        )

    def sample_sequences(
        self,
        batch_size: int,
        length: int,
        *,
        within_episode: bool = True,
        pad: bool = True,
        balance_envs: bool = False,
        beta: float | None = None,
        timeout: float | None = None,
        transform: DeviceTransform | None = None,
    ) -> DeviceBatch:
        """Draw ``batch_size`` sequences of ``length`` consecutive stored steps (R2D2, ALF),
        as :meth:`rlreplay.ReplayBuffer.sample_sequences` draws them (see
        :mod:`rlreplay.torch.sequences`).

        Starts are uniform over the stored steps (prioritized: by priority over the
        sampleable ones, with ``weights`` and ``probabilities`` as :meth:`sample`'s). Per-step
        fields are the raw stored ones, shaped ``(B, L, ...)``, zero on masked steps, plus
        each step's ``next_<obs>``; ``mask`` ``(B, L)`` marks real steps (a prefix).

        Args:
            batch_size: Sequences ``B``.
            length: Steps per sequence ``L``.
            within_episode: Stop sequences at episode ends.
            pad: If False, only starts whose ``L`` steps are all real are drawn (with
                ``within_episode`` or a prioritized buffer: ``O(E * C)`` per draw).
            balance_envs: Uniform buffers: an env uniform among those with a start, then a
                start uniform within it; rows ordered by env.
            beta: Prioritized buffers: the importance exponent of this draw (default: the
                schedule's, which then advances).
            timeout: As :meth:`sample`'s (a ``rate_limiter`` counts one sample per
                sequence).
            transform: A function ``DeviceBatch -> DeviceBatch`` applied to the result (the
                buffer's ``transforms`` are for transitions and are not applied here); if it
                raises, the draw is rolled back.

        Returns:
            A :class:`DeviceBatch`: per-step fields, ``next_<obs>``, ``mask``,
            ``next_known``, ``ids`` (first steps), ``env_ids``, ``weights`` (0 where no start
            exists) and, when prioritized, ``probabilities``.

        Raises:
            ConfigError: ``batch_size`` or ``length`` not a positive int, a flag that is not a
                bool, ``balance_envs`` for a prioritized buffer, ``beta`` for a uniform one.
            ReplayTimeout: The ``rate_limiter`` does not allow ``batch_size`` samples now.
        """
        return self._reads.sample_sequences(
            batch_size, length, within_episode, pad, balance_envs, beta, timeout, transform
        )

    @property
    def num_episodes(self) -> Tensor:
        """A 0-d int64 tensor: how many complete episodes (ended, every step still stored)
        :meth:`sample_episodes` draws from (no wait for the device)."""
        from rlreplay.torch.episodes import complete_records

        return complete_records(self._ring)[1].sum()

    def sample_episodes(self, n: int, *, max_length: int | None = None) -> DeviceBatch:
        """Draw ``n`` complete episodes (ended with a final observation, every step still
        stored) uniformly, with replacement, as :meth:`rlreplay.ReplayBuffer.sample_episodes`
        draws them (from the buffer's generator).

        Each row holds one episode's steps from its first: the keys of :meth:`get_sequences`
        (per-step fields, ``next_<obs>``, ``mask``, ``next_known``, ``ids`` and ``env_ids`` of
        the first steps) plus ``lengths``, each episode's length.

        Args:
            n: Episodes.
            max_length: Steps per row. ``None`` (the core's shapes): the longest drawn
                episode's length, read on the host (a wait for the device), and an
                :class:`~rlreplay.EmptyBufferError` when no complete episode is stored. Given
                (as the JAX buffer's): no wait, rows of ``max_length`` steps (an episode longer
                than that gives its first ``max_length`` steps, with its full ``lengths``), and
                arbitrary rows with ``lengths`` 0 where none is stored.

        Raises:
            ConfigError: ``n`` or ``max_length`` not a positive int, or a result above the
                size budget.
            EmptyBufferError: ``max_length=None`` and no complete episode is stored.
        """
        return self._reads.sample_episodes(n, max_length)

    def get_sequences(self, ids: Any, length: int, *, within_episode: bool = True) -> DeviceBatch:
        """The sequences of ``length`` steps starting at the stored steps ``ids``, as
        :meth:`rlreplay.ReplayBuffer.get_sequences` (no ``weights``); rows of ids that are
        not stored hold arbitrary values."""
        return self._reads.get_sequences(ids, length, within_episode)

    # ------------------------------------------------------------------ conversions
    def to_replay_buffer(self, *, seed: int | None = None) -> ReplayBuffer:
        """A NumPy :class:`rlreplay.ReplayBuffer` (:class:`rlreplay.PrioritizedReplayBuffer`
        for a prioritized buffer) holding the same ids, transitions and priorities, with the
        same configuration. Waits for the device (see :mod:`rlreplay.torch.convert`)."""
        from rlreplay.torch.convert import to_replay_buffer

        out: ReplayBuffer = to_replay_buffer(self, seed=seed)
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save a checkpoint in the NumPy core's format (:meth:`to_replay_buffer`, then its
        ``save``): :func:`rlreplay.load` reads it back as a NumPy buffer, and
        :func:`rlreplay.torch.load` as a device buffer. Waits for the device."""
        self.to_replay_buffer(seed=self.seed).save(path)
