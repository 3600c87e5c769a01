"""A TorchRL-style replay buffer of TensorDicts, stored and sampled by the core buffer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

import rlreplay as rr
from rlreplay.integrations.torchrl.layout import Layout, breaks, byte_rows, to_numpy

if TYPE_CHECKING:
    # Imported where used (see rlreplay.integrations.torchrl.layout).
    from tensordict import TensorDictBase

__all__ = ["TensorDictPrioritizedReplayBuffer", "TensorDictReplayBuffer"]

Array = np.ndarray[Any, Any]

#: Version of :meth:`TensorDictReplayBuffer.state_dict`'s layout.
STATE_VERSION = 1


class TensorDictReplayBuffer:
    """TorchRL's ``TensorDictReplayBuffer`` interface over :class:`rlreplay.ReplayBuffer`.

    Give it a collector's TensorDicts and sample TensorDicts in TorchRL's key layout, for
    TorchRL's losses (``DQNLoss``, ``SACLoss``, ...)::

        from torchrl.collectors import Collector
        from rlreplay.integrations.torchrl import TensorDictReplayBuffer

        rb = TensorDictReplayBuffer(100_000, batch_size=128, n_step=3, gamma=0.99)
        for data in collector:           # batch dims [T] or [E, T], time last
            rb.extend(data)
            sample = rb.sample()         # ("next", "observation"), ("next", "reward"), ...
            loss(sample)["loss"].backward()

    or pass it as a collector's ``replay_buffer=`` (the collector then extends it itself).

    Like TorchRL's ``LazyTensorStorage``, the buffer takes its layout from the first
    TensorDict it is extended with (see :mod:`rlreplay.integrations.torchrl.layout`): every
    entry is stored, each observation once (its ``("next", ...)`` copy is the following
    step's, or the final one at an episode's end), so a buffer of pixel observations holds
    about half of what a TorchRL buffer holds. Samples have batch size ``[B]`` and the keys,
    per-step shapes and dtypes of the collector's data, plus ``"index"`` (int64 ids, for
    :meth:`update_priority`) and, when prioritized, ``"priority_weight"`` (float32
    importance weights, which TorchRL's losses apply).

    What differs from TorchRL's buffer over a ``LazyTensorStorage``:

    * Transitions stay in their trajectories: data with batch dims ``[E, T]`` is ``E`` envs
      of ``T`` steps (time last, as collectors give it), and a step becomes sampleable once
      its next observation is known (at once at an episode's end, else at the following
      step, possibly in the next :meth:`extend`). Steps that do not follow each other (a
      ``reshape(-1)`` of ``[E, T]`` data, a collector resetting at each batch) are detected by
      their observations and end their episode there, truncated.
    * n-step returns (``n_step > 1``) are computed at sample time, never across an episode's
      end: ``("next", "reward")`` is the discounted sum over ``m <= n_step`` steps,
      ``("next", <obs>)`` the observation ``m`` steps on (the final one where the episode
      ended), ``"steps_to_next_obs"`` is ``m`` (TorchRL's losses discount by
      ``gamma ** steps_to_next_obs``), and ``("next", "terminated")`` is true when the episode
      terminated inside the window, so the target does not bootstrap from a terminal state
      (TorchRL's ``MultiStep`` keeps the first step's flag).
    * Prioritized replay does not need TorchRL's compiled segment trees (see
      :class:`TensorDictPrioritizedReplayBuffer`).
    * ``index`` values are the core's transition ids (int64, increasing, never reused), not
      storage positions; an id of an overwritten transition is ignored by
      :meth:`update_priority`.

    Args:
        capacity: Transitions kept over all envs (TorchRL's ``max_size``); at least
            ``E * (n_step + 1)``.
        batch_size: The default of :meth:`sample`.
        n_step: Window length ``n >= 1``.
        gamma: Discount of the ``n``-step sums (give the loss's ``gamma``).
        prioritized: Sample by priority (proportional PER; see
            :class:`TensorDictPrioritizedReplayBuffer` for the options).
        priority_key: The entry holding priorities in the TensorDicts given to
            :meth:`update_tensordict_priority` and :meth:`extend` (TorchRL losses write
            ``"td_error"``).
        device: Where sampled TensorDicts go (default: the CPU).
        seed: Seed of the core's generator.
        **options: Passed to :class:`rlreplay.ReplayBuffer` (or
            :class:`rlreplay.PrioritizedReplayBuffer`): ``alpha``, ``beta``, ``beta_final``,
            ``beta_steps``, ``eps``, ``storage="memmap"`` with ``path``, ...

    Raises:
        ValueError: A bad option (``rlreplay.ConfigError``), raised at the first
            :meth:`extend`, where the core is built.

    Cost: :meth:`extend` is one core ``extend`` per env plus one comparison of each step's
    next observation with the following step's observation; :meth:`sample` is one core
    ``sample`` and one tensor per entry (no copy from NumPy to torch on the CPU).
    """

    def __init__(
        self,
        capacity: int,
        *,
        batch_size: int | None = None,
        n_step: int = 1,
        gamma: float = 0.99,
        prioritized: bool = False,
        priority_key: str = "td_error",
        device: torch.device | str | None = None,
        seed: int | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise rr.ConfigError(f"capacity: expected a positive int, got {capacity!r}")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise rr.ConfigError(f"batch_size: expected a positive int or None, got {batch_size!r}")
        self.capacity = capacity
        self.n_step = int(n_step)
        self.gamma = float(gamma)
        self.prioritized = bool(prioritized)
        self.priority_key = priority_key
        self.device = None if device is None else torch.device(device)
        self.seed = seed
        self.options = dict(options)
        self._batch_size = batch_size
        self.core: rr.ReplayBuffer | None = None
        self.layout: Layout | None = None
        self._write_count = 0
        # Per env: whether its newest step's episode is still running, and that step's next
        # observations (to end it there when the next extend does not continue it).
        self._open = np.zeros(0, bool)
        self._last_next: dict[str, Array] = {}

    # ------------------------------------------------------------------ TorchRL's properties
    @property
    def batch_size(self) -> int | None:
        """The default number of transitions of :meth:`sample`."""
        return self._batch_size

    @property
    def write_count(self) -> int:
        """Transitions written since construction or :meth:`empty` (collectors read it)."""
        return self._write_count

    def __len__(self) -> int:
        """Transitions stored (sampleable or waiting for their next observation)."""
        return 0 if self.core is None else len(self.core)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self.capacity}, n_step={self.n_step}, "
            f"prioritized={self.prioritized}, size={len(self)}, batch_size={self._batch_size})"
        )

    # ------------------------------------------------------------------ writing
    def _build(self, data: TensorDictBase) -> rr.ReplayBuffer:
        layout = Layout.of(data, ignore=(self.priority_key,))
        envs = int(data.batch_size[0]) if layout.batch_dims == 2 else 1
        options: dict[str, Any] = {
            "num_envs": envs, "n_step": self.n_step, "gamma": self.gamma, "seed": self.seed,
            **self.options,
        }  # fmt: skip
        if self.prioritized:
            core: rr.ReplayBuffer = rr.PrioritizedReplayBuffer(
                self.capacity, layout.fields(), **options
            )
        else:
            core = rr.ReplayBuffer(self.capacity, layout.fields(), **options)
        self.layout, self.core = layout, core
        self._open = np.zeros(envs, bool)
        self._last_next = {}
        return core

    def extend(self, data: TensorDictBase, *, update_priority: bool | None = None) -> torch.Tensor:
        """Store a collector's transitions (batch dims ``[T]``, or ``[E, T]`` with time last).

        Sets ``data["index"]`` to the ids of the stored transitions (as TorchRL's buffer sets
        its indices). When the buffer is prioritized and ``data`` holds ``priority_key``,
        those priorities are given to the new transitions.

        Args:
            data: Transitions with the entries of the first ``extend``.
            update_priority: Use ``data[priority_key]`` as priorities (default: yes).

        Returns:
            The int64 ids, shaped as ``data``'s batch dims.

        Raises:
            ValueError: ``data`` not shaped as the first extend, a missing entry, or an
                unsafe cast (``rlreplay.ShapeError``, ``FieldError``, ``DTypeError``).
            TypeError: ``data`` not a TensorDict.
        """
        from tensordict import TensorDictBase

        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"{type(self).__name__}.extend: expected a TensorDict of transitions, got "
                f"{type(data).__name__}"
            )
        core = self.core if self.core is not None else self._build(data)
        assert self.layout is not None  # set with the core
        self.layout.check(data)
        values = self.layout.arrays(data)
        names = [e.name for e in self.layout.obs]
        if self.layout.batch_dims == 1:
            ids = self._extend_env(core, 0, values, names)
        else:
            ids = np.stack(
                [
                    self._extend_env(core, e, {k: v[e] for k, v in values.items()}, names)
                    for e in range(int(data.batch_size[0]))
                ]
            )
        index = torch.from_numpy(ids)
        self._write_count += int(ids.size)
        data.set("index", index.to(data.device) if data.device is not None else index)
        if update_priority is not False and self.prioritized:
            priority = data.get(self.priority_key, None)
            if priority is not None:
                self.update_priority(index, priority)
        return index

    def add(self, data: TensorDictBase) -> int:
        """Store one transition (batch size ``[]``; a one-step :meth:`extend`).

        Returns:
            Its id.
        """
        return int(self.extend(data.unsqueeze(0))[0])

    def _extend_env(
        self, core: rr.ReplayBuffer, env: int, values: dict[str, Array], names: list[str]
    ) -> Array:
        """Write one env's ``T`` steps, ending its episode wherever the steps do not follow
        each other (before the first one included)."""
        if self._open[env]:
            first = {n: values[n][:1] for n in names}
            last = {n: self._last_next[n][env : env + 1] for n in names}
            if any(
                (byte_rows(first[n]) != byte_rows(last[n])).any() for n in names
            ):  # the new steps do not continue the stored episode
                core.end_episode(env, **{f"next_{n}": last[n][0] for n in names})
                self._open[env] = False
        cuts = breaks(values, names)
        ids = np.empty(values["reward"].shape[0], np.int64)
        start = 0
        for stop in (*(int(c) + 1 for c in cuts), ids.size):
            if stop == start:
                continue
            part: dict[str, Any] = {k: v[start:stop] for k, v in values.items()}
            ids[start:stop] = core.extend(env_id=env, **part)
            if stop != ids.size:  # a break: the step's successor is not stored next
                core.end_episode(env, **{f"next_{n}": part[f"next_{n}"][-1] for n in names})
            start = stop
        ended = bool(values["terminated"][-1] | values["truncated"][-1])
        self._open[env] = not ended
        for n in names:
            stored = self._last_next.get(n)
            row = values[f"next_{n}"][-1]
            if stored is None:
                stored = np.zeros((self._open.size, *row.shape), row.dtype)
                self._last_next[n] = stored
            stored[env] = row
        return ids

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Draw transitions (uniformly, or by priority) as a TensorDict of batch size ``[B]``.

        Args:
            batch_size: Number of transitions (default: the constructor's ``batch_size``).
            return_info: Return ``(tensordict, info)`` with ``info`` holding ``"index"`` (and
                ``"priority_weight"``), as TorchRL's buffer does.

        Raises:
            ValueError: No batch size given here nor to the constructor
                (``rlreplay.ConfigError``), or nothing sampleable yet
                (``rlreplay.EmptyBufferError``).
        """
        size = batch_size if batch_size is not None else self._batch_size
        if size is None:
            raise rr.ConfigError(
                "sample: expected a batch_size, here or in the constructor; got neither"
            )
        if self.core is None or self.layout is None:
            raise rr.EmptyBufferError(
                "sample: nothing is stored yet; extend the buffer with a collector's data first"
            )
        batch = self.core.sample(size)
        assert isinstance(batch, rr.Batch)  # the core's default output
        td = self.layout.tensordict(
            batch, n_step=self.n_step, weights=self.prioritized, device=None
        )
        if self.device is not None and self.device.type != "cpu":
            td = td.to(self.device, non_blocking=True)
        if not return_info:
            return td
        info = {"index": td.get("index")}
        if self.prioritized:
            info["priority_weight"] = td.get("priority_weight")
        return td, info

    # ------------------------------------------------------------------ priorities
    def update_priority(self, index: Any, priority: Any) -> None:
        """Set the priorities of sampled transitions (``index``: a sample's ``"index"``).

        A no-op for a uniform buffer, as in TorchRL. ``priority`` holds one number per
        index, or several (reduced by their max, TorchRL's default reduction).

        Raises:
            ValueError: A negative or non-finite priority, or an id this buffer never
                issued (``rlreplay.PriorityError`` / ``InvalidIdError``).
        """
        core = self.core
        if not isinstance(core, rr.PrioritizedReplayBuffer):
            return
        ids = to_numpy(torch.as_tensor(index)).reshape(-1)
        values = to_numpy(torch.as_tensor(priority)).astype(np.float64)
        if values.ndim == 0:
            values = np.full(ids.shape, float(values))
        values = values.reshape(ids.size, -1).max(axis=1)
        core.update_priorities(ids, values)

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Set priorities from a sampled TensorDict after a loss wrote ``priority_key``
        (``"td_error"``) into it: ``data["index"]`` gets ``data[priority_key]``.

        A no-op for a uniform buffer, as in TorchRL.

        Raises:
            KeyError: ``data`` lacks ``"index"`` or ``priority_key``.
        """
        if not self.prioritized:
            return
        self.update_priority(data.get("index"), data.get(self.priority_key))

    # ------------------------------------------------------------------ state
    def empty(self, empty_write_count: bool = True) -> None:
        """Drop every stored transition (the layout is kept)."""
        if self.core is not None:
            self.core.clear()
            self._open[:] = False
        if empty_write_count:
            self._write_count = 0

    def state_dict(self) -> dict[str, Any]:
        """The buffer's full state: the core's (data, generator, priorities) and the
        tracking of each env's running episode. The layout is rebuilt from ``"example"``, a
        one-step TensorDict of zeros."""
        if self.core is None or self.layout is None:
            return {"version": STATE_VERSION, "core": None, "write_count": self._write_count}
        return {
            "version": STATE_VERSION,
            "core": self.core.state_dict(),
            "example": self._example(),
            "write_count": self._write_count,
            "open": self._open.copy(),
            "last_next": {k: v.copy() for k, v in self._last_next.items()},
        }

    def _example(self) -> dict[str, Any]:
        """A zero TensorDict of one step per env with this layout, as a plain dict."""
        assert self.layout is not None and self.core is not None
        lead = (1,) if self.layout.batch_dims == 1 else (self.core.num_envs, 1)
        out: dict[Any, Any] = {}
        for e in (*self.layout.obs, *self.layout.step):
            out[e.key] = torch.zeros(*lead, *e.shape, dtype=e.dtype)
        for e in self.layout.obs:
            out[("next", *e.key)] = torch.zeros(*lead, *e.shape, dtype=e.dtype)
        for e in self.layout.next_only:
            out[("next", *e.key)] = torch.zeros(*lead, *e.shape, dtype=e.dtype)
        shape, dtype = self.layout.reward
        out[("next", "reward")] = torch.zeros(*lead, *shape, dtype=dtype)
        for key, per_step in self.layout.flags:
            out[("next", key)] = torch.zeros(*lead, *per_step, dtype=torch.bool)
        return {"batch_size": lead, "entries": out}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take back a state from :meth:`state_dict` (of a buffer built with the same
        arguments).

        Raises:
            ValueError: A state of another version (``rlreplay.CheckpointError``).
        """
        from tensordict import TensorDict

        if state.get("version") != STATE_VERSION:
            raise rr.CheckpointError(
                f"expected a state of version {STATE_VERSION}, got {state.get('version')!r}"
            )
        self._write_count = int(state["write_count"])
        if state["core"] is None:
            self.core, self.layout = None, None
            return
        example = TensorDict(batch_size=state["example"]["batch_size"])
        for key, value in state["example"]["entries"].items():
            example.set(key, value)
        # The core checks that the state's configuration is its own: take the saved seed
        # (the generator's state is restored anyway).
        self.seed = state["core"]["config"]["seed"]
        core = self._build(example)
        core.load_state_dict(state["core"])
        self._open = np.asarray(state["open"], bool).copy()
        self._last_next = {k: np.asarray(v).copy() for k, v in state["last_next"].items()}


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """:class:`TensorDictReplayBuffer` sampling by priority (proportional PER), for TorchRL's
    losses: they write ``"td_error"`` into the sample and apply its ``"priority_weight"``.

    ::

        rb = TensorDictPrioritizedReplayBuffer(100_000, alpha=0.6, beta=0.4, batch_size=128)
        sample = rb.sample()
        loss(sample)["loss"].backward()     # DQNLoss writes sample["td_error"]
        rb.update_tensordict_priority(sample)

    A transition is drawn with probability ``p ** alpha / sum(p ** alpha)``, where ``p`` is
    the last priority given (``+ eps``) or, for new transitions, the largest priority so far;
    ``"priority_weight"`` is ``(N * P) ** -beta`` divided by that of the least likely stored
    transition (``(p / p_min) ** -beta``, as TorchRL's sampler). Priorities live in the
    core's NumPy/Numba sum tree, so this works where TorchRL's compiled segment trees are
    missing (a torchrl wheel built against another torch release).

    Args:
        capacity: As in :class:`TensorDictReplayBuffer`.
        alpha: Prioritization exponent.
        beta: Importance-sampling exponent.
        eps: Added to every priority given.
        **options: As in :class:`TensorDictReplayBuffer` (``batch_size``, ``n_step``,
            ``gamma``, ``beta_final``, ``beta_steps``, ...).

    Cost: :meth:`update_priority` is O(B log capacity).
    """

    def __init__(
        self,
        capacity: int,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-8,
        **options: Any,
    ) -> None:
        options.setdefault("beta_final", beta)
        super().__init__(capacity, prioritized=True, alpha=alpha, beta=beta, eps=eps, **options)
