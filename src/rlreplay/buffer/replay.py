"""The public replay buffer: composes the schema, storage, episode index and samplers.

:class:`ReplayBuffer` is assembled from one module per concern (see :mod:`rlreplay.buffer.host`):
writing (:mod:`rlreplay.buffer.writing`), FIFO use (:mod:`rlreplay.buffer.fifo`), sequences and
episodes (:mod:`rlreplay.buffer.episodes`), state (:mod:`rlreplay.buffer.state`) and sampling
(:mod:`rlreplay.buffer.sampling`); this module holds construction, the write hooks,
``close``/``clear`` and :func:`load`.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from rlreplay.buffer.budget import check_capacity
from rlreplay.buffer.copying import CopyMixin
from rlreplay.buffer.episodes import EpisodesMixin
from rlreplay.buffer.exports import IOMixin
from rlreplay.buffer.fifo import FifoMixin
from rlreplay.buffer.host import Array
from rlreplay.buffer.sampling import SamplingMixin
from rlreplay.buffer.state import StateMixin
from rlreplay.buffer.writing import WritingMixin
from rlreplay.checkpoint.file import CheckpointReader
from rlreplay.episodes.index import EpisodeIndex
from rlreplay.errors import (
    CheckpointError,
    ConfigError,
    ReplayClosed,
)
from rlreplay.io.frameworks import Output, buffer_output
from rlreplay.limits import RateLimiter
from rlreplay.sampling.base import Sampler
from rlreplay.sampling.registry import sampler_from_config
from rlreplay.sampling.uniform import draw_options
from rlreplay.sampling.uniform_sampler import UniformSampler
from rlreplay.spec.schema import Field, Schema, clip_pair, positive_int
from rlreplay.storage import Columns, make_backend
from rlreplay.transforms import Transform
from rlreplay.writing.writer import ReturnsConfig, StepWriter

__all__ = ["ReplayBuffer", "load"]


_INITIAL_FINALS = 16  # final-observation records per env before the first doubling


class ReplayBuffer(
    WritingMixin, FifoMixin, EpisodesMixin, StateMixin, CopyMixin, SamplingMixin, IOMixin
):
    """An episode-aware ring buffer of environment steps with n-step windows and frame stacks.

    Each env keeps its most recent ``capacity // num_envs`` steps. Every observation is stored
    once: the next observation of a step is the observation of the following step of the same
    env, except at an episode's end, where the final ``next_obs`` passed to :meth:`add` is kept.
    A sampled transition at step ``t`` carries the window ``t .. t+m-1`` with ``m = n_step``
    unless its episode ended sooner::

        reward   = sum_{j<m} gamma^j r_{t+j}
        next_obs = obs_{t+m}   (the final observation if the window reached the episode's end)
        discount = 0 if terminated inside the window else gamma^m;   steps = m

    A step is sampleable once its window is known and nothing it reads was overwritten; frame
    stacks never reach into another episode (``stack_pad`` fills before the first frame).

    Args:
        capacity: Transitions stored over all envs; at least ``num_envs * (n_step + frame_stack)``.
        fields: Name -> :class:`rlreplay.Field` (or ``(shape, dtype)``); at least one
            observation field (``obs`` always is one). ``reward`` (float32 scalar),
            ``terminated`` and ``truncated`` (bool) are built in; declaring ``reward`` changes
            its shape/dtype.
        num_envs: Parallel environments; with ``E > 1`` every :meth:`add` argument has a
            leading axis ``E`` (or ``len(env_ids)``).
        n_step: Window length ``n >= 1``.
        gamma: Discount in ``[0, 1]``.
        frame_stack: ``k >= 1``; with ``k > 1`` sampled ``obs``/``next_obs`` are
            ``(B, k, *frame)`` stacks of the single frames stored in ``obs``.
        stack_pad: ``"zero"`` or ``"first"``: what fills a stack before an episode's first frame.
        seed: Seed of the buffer's one :class:`numpy.random.Generator`.
        storage: ``"memory"`` or ``"memmap"`` (working files in ``path``).
        path: Directory for ``storage="memmap"``.
        next_fields: Non-observation fields to also read at step ``t+m`` (``next_action``,
            ``next_<extra>``); zeros where the window reached the episode's end.
        transforms: Functions ``Batch -> Batch`` applied, in order, to every sample (see
            :mod:`rlreplay.transforms`); code, not data: give them again to :func:`load`.
        record_episodic_return: When an episode completes, store every step's discounted
            return to its end (``gamma``, rewards clipped to ``reward_clip``); samples then
            carry ``discounted_return`` (``default_return`` for running episodes). A truncated
            episode counts as complete: its return runs to the truncation, with no bootstrap
            (as ALF's).
        reward_clip: ``(lo, hi)`` applied to rewards for ``discounted_return`` only.
        default_return: ``discounted_return`` of steps whose episode has not ended.
        recent_ratio: Fraction of each :meth:`sample` batch drawn from recent data:
            ``ceil(recent_ratio * B)`` draws uniform over the ``recent_steps`` newest
            sampleable transitions of each env (ALF ``recent_data_ratio``).
        recent_steps: How many newest transitions per env count as recent.
        replacement: If False, a batch has no duplicates whenever enough transitions are
            sampleable (ALF ``with_replacement``).
        rate_limiter: A :class:`rlreplay.RateLimiter` (``rr.MinSize``,
            ``rr.SampleToInsertRatio``) that :meth:`add`/:meth:`extend` (one insert per step)
            and :meth:`sample`/:meth:`sample_sequences` (one sample per item) wait on, with
            their ``timeout``; its ``size`` is :attr:`num_sampleable`. It counts for this
            buffer only; checkpoints keep its parameters and counters.
        as_: What :meth:`sample`, :meth:`sample_sequences`, :meth:`sample_episodes` and
            :meth:`iterate` return unless a call says otherwise (``as_=``): ``"numpy"`` (a
            :class:`Batch`), ``"torch"`` or ``"jax"`` (a :class:`~rlreplay.io.TensorBatch`;
            :mod:`rlreplay.io.frameworks`). ``device``: where those go (``"cpu"``, ``"cuda:0"``).
            Both are checked here and kept in checkpoints.
        sampler: Advanced: the :class:`~rlreplay.sampling.Sampler` that chooses each batch's
            transitions (default: a new :attr:`sampler_class`, a
            :class:`~rlreplay.sampling.UniformSampler`); for
            example ``rlreplay.sampling.PrioritizedSampler(alpha=0.6)``, which is what
            :class:`PrioritizedReplayBuffer` builds. A sampler belongs to one buffer.

    Cost: :meth:`add` is O(fields) plus O(1) bookkeeping; :meth:`sample` is O(B * window)
    vectorised gathers, independent of the buffer's size. All public methods are thread-safe
    (one lock).

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> buf = rr.ReplayBuffer(capacity=1000, fields={"obs": rr.Field((4,), np.float32),
        ...                       "action": rr.Field((), np.int64)}, n_step=3, seed=0)
        >>> for t in range(10):
        ...     _ = buf.add(obs=np.full(4, t, np.float32), action=t % 2, reward=1.0,
        ...                 next_obs=np.full(4, t + 1, np.float32), terminated=t == 9,
        ...                 truncated=False)
        >>> batch = buf.sample(4)
        >>> batch.obs.shape, batch.reward.dtype
        ((4, 4), dtype('float32'))
    """

    _registry: ClassVar[dict[str, type[ReplayBuffer]]] = {}
    #: The sampler a buffer of this class builds when ``sampler=`` is not given (a subclass
    #: with another default sets its own); a buffer whose sampler is of another class records
    #: that sampler in its configuration (checkpoints, copies).
    sampler_class: ClassVar[type[Any]] = UniformSampler

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        ReplayBuffer._registry[cls.__name__] = cls

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
        seed: int | None = None,
        storage: str = "memory",
        path: str | os.PathLike[str] | None = None,
        next_fields: Sequence[str] = (),
        transforms: Sequence[Transform] = (),
        record_episodic_return: bool = False,
        reward_clip: tuple[float, float] | None = None,
        default_return: float = -1000.0,
        recent_ratio: float = 0.0,
        recent_steps: int = 1,
        replacement: bool = True,
        rate_limiter: RateLimiter | None = None,
        as_: str = "numpy",
        device: Any = None,
        sampler: Sampler | None = None,
    ) -> None:
        self.schema = Schema.build(fields)
        if sampler is None:
            sampler = self.sampler_class()
        elif not isinstance(sampler, Sampler):
            raise ConfigError(
                f"sampler: expected an rlreplay.sampling.Sampler (UniformSampler, "
                f"PrioritizedSampler, ...), got {type(sampler).__name__}"
            )
        self._sampler: Sampler = sampler
        # A sampler with per-transition state (priorities) hears of every change of the
        # sampleable set: on every write, and when deferred steps are accounted for.
        self._tracks_sampleable = bool(sampler.tracks_sampleable)
        self._output: Output | None = buffer_output(as_, device)  # None: NumPy batches
        num_envs = positive_int("num_envs", num_envs)
        n_step = positive_int("n_step", n_step)
        frame_stack = positive_int("frame_stack", frame_stack)
        capacity = positive_int("capacity", capacity)
        if isinstance(gamma, bool) or not isinstance(gamma, int | float | np.number):
            raise ConfigError(f"gamma: expected a number in [0, 1], got {gamma!r}")
        gamma = float(gamma)
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"gamma: expected a value in [0, 1], got {gamma}")
        check_capacity(capacity, self.schema.fields)  # before anything is allocated
        if capacity < num_envs * (n_step + frame_stack):
            raise ConfigError(
                f"capacity: expected at least num_envs * (n_step + frame_stack) = "
                f"{num_envs} * ({n_step} + {frame_stack}) = {num_envs * (n_step + frame_stack)}"
                f", got {capacity}"
            )
        if frame_stack > 1 and "obs" not in self.schema:
            raise ConfigError("frame_stack: stacking applies to the 'obs' field; declare 'obs'")
        self._use_limiter(rate_limiter, storage, num_envs)
        next_fields = tuple(next_fields)
        for name in next_fields:
            f = self.schema.fields.get(name)
            if f is None or f.observation:
                raise ConfigError(
                    f"next_fields: {name!r} is not a declared non-observation field (observation "
                    f"fields always have next_<name>); declared: {list(self.schema.fields)}"
                )
        if stack_pad not in ("zero", "first"):
            raise ConfigError(f"stack_pad: expected 'zero' or 'first', got {stack_pad!r}")
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
        ):
            raise ConfigError(f"seed: expected a non-negative int or None, got {seed!r}")

        self.capacity = capacity
        self.num_envs = num_envs
        self.n_step = n_step
        self.gamma = gamma
        self.frame_stack = frame_stack
        self.stack_pad = stack_pad
        self.next_fields = next_fields
        self.seed = None if seed is None else int(seed)
        self._env_capacity = capacity // num_envs
        self._backend = make_backend(storage, path)
        self._finals0 = min(_INITIAL_FINALS, self._env_capacity)
        alloc = None
        if storage == "shared":
            # Writer processes address final records by a fixed ring of C per env (enough: a
            # record dies with its step), and the index lives in shared memory too.
            self._finals0, alloc = self._env_capacity, self._backend.allocate
        self._index = EpisodeIndex(
            num_envs, self._env_capacity, n_step, frame_stack, self._finals0, alloc
        )
        self._shared: Any = None  # rlreplay.sharing.handle.SharedState once share() was called
        self._cols = Columns(
            self.schema, num_envs, self._env_capacity, self._finals0, self._backend
        )
        self._rng = np.random.default_rng(self.seed)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)  # blocking add/dequeue wait on it
        self._waiting = 0
        self._closed = False
        self._all_envs = np.arange(num_envs, dtype=np.int64)
        self.record_episodic_return = bool(record_episodic_return)
        self.reward_clip = clip_pair("reward_clip", reward_clip)
        self.default_return = float(default_return)
        returns = None
        if self.record_episodic_return:
            if self.schema.fields["reward"].shape != ():
                raise ConfigError(
                    "record_episodic_return: needs a scalar reward, got reward shape "
                    f"{self.schema.fields['reward'].shape}"
                )
            column = self._cols.add_derived(
                "discounted_return", np.dtype(np.float32), self.default_return
            )
            returns = ReturnsConfig(column, gamma, self.reward_clip, self.default_return)
        self._writer = StepWriter(
            self.schema, self._index, self._cols, returns, observed=self._tracks_sampleable
        )
        # The per-step fast path defers the index's accounting; a subclass that tracks the
        # sampleable set (prioritized) hears about deferred steps when they are accounted for.
        # Installs this buffer's generated `add` (see _install_fast_add); not with a limiter.
        self._fast_add = self._limiter is None
        # ... again whenever the writer takes another path (weakly, as on_settle below).
        reinstall = weakref.WeakMethod(self._path_changed)

        def on_change() -> None:
            hook = reinstall()
            if hook is not None:
                hook()

        self._writer.on_change = on_change
        if self._tracks_sampleable:
            # Weakly: the index must not keep its buffer alive (a cycle waits for the collector).
            settled = weakref.WeakMethod(self._settled)

            def on_settle(before: Array, t0: int, n: int) -> None:
                hook = settled()
                if hook is not None:
                    hook(before, t0, n)

            self._index.on_settle = on_settle
        self.draw_options = draw_options(recent_ratio, recent_steps, replacement)
        sampler.bind(self._index, self.draw_options)
        self.transforms: tuple[Transform, ...] = tuple(transforms)
        for fn in self.transforms:
            self._bind(fn)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_spaces(
        cls, observation_space: Any, action_space: Any, *, capacity: int, **kwargs: Any
    ) -> ReplayBuffer:
        """Build a buffer whose fields come from gymnasium spaces.

        ``Box``, ``Discrete``, ``MultiDiscrete`` and ``MultiBinary`` are supported; a ``Dict``
        observation space gives one observation field per key. The action field is ``action``.

        Args:
            observation_space: A gymnasium space.
            action_space: A gymnasium space.
            capacity: As in the constructor.
            **kwargs: Any other constructor argument (``extra_fields={...}`` adds fields).
        """
        from rlreplay.spec.spaces import fields_from_spaces

        extra = kwargs.pop("extra_fields", {})
        fields: dict[str, Field | tuple[Any, Any]] = dict(
            fields_from_spaces(observation_space, action_space)
        )
        clash = sorted(set(fields) & set(extra))
        if clash:
            raise ConfigError(f"extra_fields: {clash} clash with the fields of the spaces")
        fields.update(extra)
        return cls(capacity, fields, **kwargs)

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        """Number of stored transitions."""
        with self._lock:
            if self._shared is not None:
                self._shared.fold(self)
            return self._index.stored

    @property
    def num_sampleable(self) -> int:
        """Number of transitions :meth:`sample` draws from."""
        with self._lock:
            if self._shared is not None:
                self._shared.fold(self)
            return int(self._index.sizes().sum())

    @property
    def nbytes(self) -> int:
        """Bytes allocated for stored data (columns, final observations and the index)."""
        with self._lock:
            return self._cols.nbytes + self._index.nbytes + self._sampler.nbytes

    @property
    def env_capacity(self) -> int:
        """Transitions each env keeps (``capacity // num_envs``)."""
        return self._env_capacity

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self.capacity}, num_envs={self.num_envs}, "
            f"n_step={self.n_step}, frame_stack={self.frame_stack}, len={len(self)}, "
            f"fields={list(self.schema.fields)})"
        )

    def _settled(self, before: Array, t0: int, n: int) -> None:
        """The index accounted for deferred plain steps ``t0 .. t0+n-1`` of every env (before
        anything reads it): the sampler hears of them."""
        self._sampler.on_settle(self._index, before, t0, n)

    def _notify_sampleable(self, before: Array, rows_env: Array, rows_t: Array) -> None:
        """Steps ``(rows_env, rows_t)`` were written and the sampleable set moved from
        ``before`` (an index :meth:`~EpisodeIndex.bounds` snapshot): the sampler hears of it."""
        changes = self._index.sampleable_changes(before)
        self._sampler.on_write(self._index, rows_env, rows_t, *changes)

    def close(self) -> None:
        """Flush storage and release it (a memmap directory becomes free for another buffer).

        Later calls that read or write the buffer raise :class:`rlreplay.ReplayClosed`.
        Closing twice is harmless.
        """
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._shared is not None:
                    self._shared.close()  # writers see the buffer closed
                self._backend.close()
                self._cond.notify_all()  # waiters wake up and raise ReplayClosed
                if self._limiter is not None:
                    self._limiter.close()  # so do the limiter's

    def __enter__(self) -> ReplayBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ReplayClosed(f"{type(self).__name__} is closed")
        if self._shared is not None:
            self._shared.fold(self)  # steps published by writer processes (storage="shared")

    def share(self, env_ids: Any = None) -> Any:
        """Hand envs to writer processes (``storage="shared"`` only); see :mod:`rlreplay.sharing`.

        Args:
            env_ids: The envs the handle's writer owns (default: every env). This process
                no longer writes them.

        Returns:
            A picklable :class:`rlreplay.sharing.handle.SharedHandle` for :func:`rlreplay.attach`.
        """
        from rlreplay.sharing.handle import share_buffer

        with self._lock:
            if self._closed:
                raise ReplayClosed(f"{type(self).__name__} is closed")
            return share_buffer(self, env_ids)

    def clear(self) -> None:
        """Drop every stored transition. Ids keep counting, so old ids stay recognisably stale."""
        with self._lock:
            self._check_open()
            before = self._index.bounds() if self._tracks_sampleable else None
            self._index.clear()
            if before is not None:
                empty = np.zeros(0, np.int64)
                self._notify_sampleable(before, empty, empty)
            self._limiter_resized()
            self._cond.notify_all()

    @classmethod
    def _from_checkpoint(cls, reader: CheckpointReader, overrides: dict[str, Any]) -> ReplayBuffer:
        meta = reader.meta
        config = dict(meta["config"])
        config["fields"] = Schema.from_json(config["fields"]).fields
        reader.require_data_only(config)
        if "rate_limiter" in config:  # its parameters (counters: in the state)
            config["rate_limiter"] = RateLimiter.from_json(config["rate_limiter"])
        if "as_" in overrides:  # another format: the file's device was for the file's format
            overrides.setdefault("device", None)
        if "sampler" in config:  # a sampler given to the constructor: a new one like it
            config["sampler"] = sampler_from_config(config["sampler"])
        config.update(overrides)
        capacity = config.pop("capacity")
        fields = config.pop("fields")
        # Nothing is allocated for counts the file could not hold (24: a slot's index row).
        reader.require_fit("capacity", capacity, 24 + sum(f.nbytes for f in fields.values()))
        obs_bytes = sum(f.nbytes for f in fields.values() if f.observation)
        reader.require_fit("finals_capacity", meta["state"]["finals_capacity"], 16 + obs_bytes)
        buf = cls(capacity, fields, **config)
        try:  # a refused file leaves no live buffer: a memmap directory is free again
            buf._load_meta(meta["state"])
            dest = buf._state_arrays()

            def destination(name: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Array:
                if name not in dest:
                    raise CheckpointError(f"checkpoint: unexpected array {name!r}")
                return dest[name]

            reader.read_into(destination)
            missing = set(dest) - {e["name"] for e in reader.table}
            if missing:
                raise CheckpointError(f"checkpoint: arrays {sorted(missing)} are missing")
            buf._after_load()
            kept = {k: v for k, v in meta["config"].items() if k not in overrides}
            reader.require_same("configuration", kept, {k: buf._config().get(k) for k in kept})
            state = dict(meta["state"])
            if "rate_limiter" in overrides:  # starts afresh unless it has the saved parameters
                state.pop("rate_limiter", None)
            reader.require_same("state", state, buf._state_meta())
            return buf
        except BaseException:
            buf._backend.close()  # (not buf.close(): a rate_limiter= override stays usable)
            raise


def load(
    path: str | os.PathLike[str], /, *, progress: bool | None = None, **overrides: Any
) -> ReplayBuffer:
    """Load a checkpoint written by :meth:`ReplayBuffer.save`.

    Args:
        path: The checkpoint file (positional: ``path=`` is the memmap directory override).
        progress: A tqdm bar (default: over 64 MiB of arrays, when stderr is a terminal).
        **overrides: Constructor arguments that are not data: ``storage``/``path`` to load
            into a memmap buffer (streamed, no copy in RAM), functions such as transforms,
            or the default output (``as_``, ``device``).

    Raises:
        CheckpointError: Missing, truncated, corrupted or unknown checkpoint.
    """
    reader = CheckpointReader(path, progress=progress)
    with reader.loading():  # any error of a hostile file's contents is a CheckpointError
        name = reader.meta.get("class")
        cls = ReplayBuffer if name == "ReplayBuffer" else ReplayBuffer._registry.get(str(name))
        if cls is None:
            raise CheckpointError(f"checkpoint {str(path)!r}: unknown buffer class {name!r}")
        return cls._from_checkpoint(reader, overrides)
