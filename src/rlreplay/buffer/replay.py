"""The public replay buffer: a façade that builds the parts and forwards to them.

:class:`ReplayBuffer` checks its constructor's arguments, builds the parts (storage columns,
episode index, sampler, writer, and the parts that use them: :mod:`~rlreplay.buffer.writing`,
:mod:`~rlreplay.buffer.sampling`, :mod:`~rlreplay.buffer.episodes`,
:mod:`~rlreplay.buffer.fifo`, :mod:`~rlreplay.buffer.state`), holds the lock
(:mod:`~rlreplay.buffer.sync`) and the random generator, and answers each public call itself
(``add``, ``sample``, the lifecycle) or through the part named in its class body
(``dequeue = forward("_fifo", Fifo.dequeue)``: :mod:`~rlreplay.buffer.forwarding`).
Loading a checkpoint file is :func:`rlreplay.load` (:mod:`rlreplay.buffer.loading`).
"""

from __future__ import annotations

import copy
import inspect
import os
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, cast, overload

import numpy as np

from rlreplay.batch import Batch
from rlreplay.buffer import exports, on_device
from rlreplay.buffer.budget import ResultBudget
from rlreplay.buffer.copying import clone, reduce
from rlreplay.buffer.episodes import Queries
from rlreplay.buffer.events import SampleableEvents
from rlreplay.buffer.fifo import Fifo
from rlreplay.buffer.forwarding import bind_forwarded, forward, forwarded_names
from rlreplay.buffer.geometry import Geometry
from rlreplay.buffer.pacing import Pacing
from rlreplay.buffer.sampling import Draws, binder
from rlreplay.buffer.state import BufferState
from rlreplay.buffer.sync import Atomic, Sync, check_timeout
from rlreplay.buffer.writing import WritePath
from rlreplay.episodes.index import EpisodeIndex
from rlreplay.errors import ConfigError, ReplayClosed
from rlreplay.io.frameworks import Output, TensorBatch, buffer_output, choose_output
from rlreplay.limits import RateLimiter
from rlreplay.sampling.base import Sampler
from rlreplay.sampling.uniform import draw_options
from rlreplay.sampling.uniform_sampler import UniformSampler
from rlreplay.spec import arguments
from rlreplay.spec.schema import Field, Schema, clip_pair, positive_int
from rlreplay.storage import Columns, make_backend
from rlreplay.transforms import Transform
from rlreplay.writing.writer import ReturnsConfig, StepWriter

if TYPE_CHECKING:
    pass

__all__ = ["ReplayBuffer"]

Array = np.ndarray[Any, Any]

_INITIAL_FINALS = 16  # final-observation records per env before the first doubling


class ReplayBuffer:
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
        storage: ``"memory"`` or ``"memmap"`` (working files in ``path``); ``"shared"``
            (writer processes: :meth:`share`); ``"torch"`` makes a
            :class:`rlreplay.torch.DeviceReplayBuffer` on ``device`` instead (columns, episode
            index and priorities as tensors there; see :mod:`rlreplay.buffer.on_device`).
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

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # storage="torch": the device buffer (rlreplay.torch), made by this constructor.
        if "storage" in kwargs and on_device.routes(cls, kwargs):
            return on_device.device_buffer(cls, args, kwargs)
        return super().__new__(cls)

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
        output = buffer_output(as_, device)  # None: NumPy batches
        g = Geometry.checked(
            self.schema, capacity=capacity, num_envs=num_envs, n_step=n_step, gamma=gamma,
            frame_stack=frame_stack, stack_pad=stack_pad, next_fields=next_fields, seed=seed,
        )  # fmt: skip
        Pacing.check(rate_limiter, storage=storage, num_envs=g.num_envs)
        self.capacity, self.num_envs, self.n_step, self.gamma = (
            g.capacity,
            g.num_envs,
            g.n_step,
            g.gamma,
        )
        self.frame_stack, self.stack_pad = g.frame_stack, g.stack_pad
        self.next_fields, self.seed = g.next_fields, g.seed
        self.record_episodic_return = bool(record_episodic_return)
        self.reward_clip = clip_pair("reward_clip", reward_clip)
        self.default_return = float(default_return)
        self.draw_options = draw_options(recent_ratio, recent_steps, replacement)
        self._output: Output | None = output
        self._build(storage, path, sampler, rate_limiter)
        for fn in transforms:
            self._bind(fn)
        self._draws.transforms = tuple(transforms)

    def _build(
        self,
        storage: str,
        path: str | os.PathLike[str] | None,
        sampler: Sampler,
        rate_limiter: RateLimiter | None,
    ) -> None:
        """Build the parts, each given the parts it uses (the constructor's arguments are
        checked)."""
        E, C = self.num_envs, self.capacity // self.num_envs
        self._env_capacity = C
        self._sync = sync = Sync(type(self).__name__)
        self._lock, self._cond = sync.lock, sync.cond
        self._backend = make_backend(storage, path)
        self._finals0 = min(_INITIAL_FINALS, C)
        alloc = None
        if storage == "shared":
            # Writer processes address final records by a fixed ring of C per env (enough: a
            # record dies with its step), and the index lives in shared memory too.
            self._finals0, alloc = C, self._backend.allocate
        self._index = index = EpisodeIndex(
            E, C, self.n_step, self.frame_stack, self._finals0, alloc
        )
        self._pacing = Pacing(rate_limiter, sync, lambda: int(index.sizes().sum()))
        self._cols = cols = Columns(self.schema, E, C, self._finals0, self._backend)
        self._rng = rng = np.random.default_rng(self.seed)
        returns = None
        if self.record_episodic_return:
            if self.schema.fields["reward"].shape != ():
                raise ConfigError(
                    "record_episodic_return: needs a scalar reward, got reward shape "
                    f"{self.schema.fields['reward'].shape}"
                )
            column = cols.add_derived(
                "discounted_return", np.dtype(np.float32), self.default_return
            )
            returns = ReturnsConfig(column, self.gamma, self.reward_clip, self.default_return)
        self._sampler = sampler
        self._events = events = SampleableEvents(index, sampler)
        self._writer = writer = StepWriter(
            self.schema, index, cols, returns, observed=events.tracks
        )
        self._budget = budget = ResultBudget(
            self.schema.fields, len(cols.derived), self.frame_stack, self.next_fields
        )
        bind = binder(self)
        self._writes = WritePath(writer, index, events, sync, self._pacing)
        self._draws = Draws(
            cols, index, sampler, rng, sync, budget, bind, n_step=self.n_step,
            gamma=self.gamma, frame_stack=self.frame_stack, stack_pad=self.stack_pad,
            next_fields=self.next_fields,
        )  # fmt: skip
        self._queries = Queries(
            self.schema, cols, index, sampler, rng, sync, self._pacing, budget, bind,
            self._output,
        )  # fmt: skip
        self._fifo = Fifo(cols, index, writer, events, sync, self._pacing)
        config = weakref.WeakMethod(self._config)  # (parts never keep their buffer alive)
        self._state = BufferState(
            index, cols, sampler, rng, sync, self._pacing, self._backend,
            lambda: config()(), type(self).__name__,  # type: ignore[misc]
        )  # fmt: skip
        sampler.bind(index, self.draw_options)
        if rate_limiter is not None:
            rate_limiter.bind(self)
        # `add` is this buffer's generated function (see _install_fast_add), again whenever the
        # writer takes another path; not with a limiter (a write waits for it before the lock).
        reinstall = weakref.WeakMethod(self._path_changed)

        def on_change() -> None:
            hook = reinstall()
            if hook is not None:
                hook()

        writer.on_change = on_change
        self._fast_add = rate_limiter is None
        bind_forwarded(self, _FORWARDED)  # the parts' methods themselves: no forwarding call

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

    @classmethod
    def from_minari(
        cls,
        dataset_or_id: Any,
        *,
        capacity: int | None = None,
        progress: bool | None = None,
        **kwargs: Any,
    ) -> Self:
        """A new buffer holding every episode of a local Minari dataset (never downloads).

        Args:
            dataset_or_id: A :class:`minari.MinariDataset` or a local dataset's id.
            capacity: Default: the dataset's step count.
            progress: tqdm progress bar (default: when stderr is a terminal).
            **kwargs: ``n_step``, ``frame_stack``, ``gamma``, ``seed``, ``infos=False``, and
                any other constructor argument (see :func:`rlreplay.io.minari.from_minari`).
        """
        from rlreplay.io.minari import from_minari

        target = cast(Any, cls)
        buf = from_minari(target, dataset_or_id, capacity=capacity, progress=progress, **kwargs)
        return cast("Self", buf)

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        """Number of stored transitions."""
        with self._lock:
            if self._sync.shared is not None:
                self._sync.shared.fold()
            return self._index.stored

    @property
    def num_sampleable(self) -> int:
        """Number of transitions :meth:`sample` draws from."""
        with self._lock:
            if self._sync.shared is not None:
                self._sync.shared.fold()
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

    @property
    def transforms(self) -> tuple[Transform, ...]:
        """The constructor's ``transforms``, applied in order to every sample."""
        return self._draws.transforms

    @property
    def rate_limiter(self) -> RateLimiter | None:
        """The :class:`rlreplay.RateLimiter` that paces :meth:`add`/:meth:`extend` against
        ``sample``/``sample_sequences`` (``None``: no limiter); its ``stats`` are live.

        Those calls wait for it without holding the buffer's lock; inside ``atomic()`` they
        would wait holding it, so the other side could not store or draw what frees them
        (they then end only by their ``timeout``).
        """
        return self._pacing.limiter

    @property
    def output(self) -> tuple[str, Any]:
        """``(as_, device)``: what the sampling calls return by default (see the constructor).

        Example:
            >>> import numpy as np, rlreplay as rr
            >>> rr.ReplayBuffer(8, {"obs": rr.Field((), np.float32)}).output
            ('numpy', None)
        """
        default = self._output
        return ("numpy", None) if default is None else (default.as_, default.device)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self.capacity}, num_envs={self.num_envs}, "
            f"n_step={self.n_step}, frame_stack={self.frame_stack}, len={len(self)}, "
            f"fields={list(self.schema.fields)})"
        )

    # ------------------------------------------------------------------ writing
    def add(self, **values: Any) -> Array:
        """Store one environment step (of every env, or of the envs in ``env_ids``).

        ``add(*, env_ids=None, block=False, timeout=None, **values)``. The three options are
        keyword arguments like the fields (their names are reserved). Every buffer answers
        ``add`` with a function generated for its fields (one keyword parameter each), which
        stores a step of plain values on the fast path and hands everything else here.

        Args:
            env_ids: Which envs this step belongs to (unique ints in ``[0, num_envs)``); every
                value then has a leading axis ``len(env_ids)``. Default: all envs (leading axis
                ``num_envs`` when ``num_envs > 1``, none when ``num_envs == 1``).
            block: Wait for room in every named env instead of overwriting its oldest steps
                (FIFO use with :meth:`dequeue`), like :meth:`queue.Queue.put`.
            timeout: The most seconds to wait, for room with ``block`` and for the
                ``rate_limiter`` (``None``: for ever).
            **values: One value per field (``obs``, ``action``, ..., ``reward``, ``terminated``,
                ``truncated``), and ``next_<name>`` for every observation field when a step
                ends its episode (ignored on other steps).

        Returns:
            int64 ids of the stored transitions, one per env written.

        Raises:
            FieldError: Unknown or missing field, or a missing ``next_obs`` at an episode end.
            ShapeError: A value of the wrong shape, or bad ``env_ids``.
            DTypeError: An unsafe cast.
            ReplayTimeout: ``block`` and no room, or the ``rate_limiter`` did not let the
                step in, within ``timeout`` (nothing is stored).
            ReplayClosed: The buffer is (or got) closed.
        """
        # The general path. A buffer normally answers `add` with its generated function
        # (_install_fast_add), which comes here for what the fast path does not store.
        return self._writes.add(**values)

    extend = forward("_writes", WritePath.extend)
    end_episode = forward("_writes", WritePath.end_episode)
    abandon_episode = forward("_writes", WritePath.abandon_episode)

    @property
    def _fast_add(self) -> bool:
        """Whether ``add`` takes the per-step fast path (tests turn it off for a reference)."""
        return "add" in self.__dict__

    @_fast_add.setter
    def _fast_add(self, on: bool) -> None:
        if not on:
            self.__dict__.pop("add", None)
        elif type(self).add is ReplayBuffer.add:  # a subclass's own add stays in charge
            self._install_fast_add()

    def _path_changed(self) -> None:
        """The writer took another path: inline the new one (unless ``add`` is not generated)."""
        if self._fast_add:
            self._install_fast_add()

    def _install_fast_add(self) -> None:
        """Answer ``add`` with the function generated for this buffer's fields
        (:meth:`WritePath.generated_add`). A subclass that defines its own ``add`` keeps it
        (no generated function); its ``super().add(...)`` is the general path."""
        self.__dict__["add"] = self._writes.generated_add(
            ReplayBuffer.add.__doc__, f"{type(self).__name__}.add"
        )

    # ------------------------------------------------------------------ sampling
    @overload
    def sample(
        self, batch_size: int, *, transform: Transform | None = ...,
        recent_ratio: float | None = ..., recent_steps: int | None = ...,
        replacement: bool | None = ..., timeout: float | None = ...,
        out: Batch | None = ..., as_: Literal["numpy"] | None = ..., device: Any = ...,
    ) -> Batch: ...  # fmt: skip
    @overload
    def sample(
        self, batch_size: int, *, transform: Transform | None = ...,
        recent_ratio: float | None = ..., recent_steps: int | None = ...,
        replacement: bool | None = ..., timeout: float | None = ...,
        out: None = ..., as_: Literal["torch", "jax"], device: Any = ...,
    ) -> TensorBatch: ...  # fmt: skip
    def sample(
        self,
        batch_size: int,
        *,
        transform: Transform | None = None,
        recent_ratio: float | None = None,
        recent_steps: int | None = None,
        replacement: bool | None = None,
        timeout: float | None = None,
        out: Batch | None = None,
        as_: str | None = None,
        device: Any = None,
    ) -> Batch | TensorBatch:
        """Draw ``batch_size`` transitions uniformly, with replacement, from the sampleable ones.

        Args:
            batch_size: Number of transitions; the batch must fit the size budget
                (:func:`rlreplay.spec.size_budget`, the machine's memory).
            transform: A function ``Batch -> Batch`` applied after the buffer's ``transforms``.
                If a transform (this one or the buffer's) raises, its exception passes
                through and the draw is rolled back: the generator (and a prioritized
                buffer's ``beta`` schedule) is as before the call.
            recent_ratio: Overrides the constructor's ``recent_ratio`` for this call.
            recent_steps: Overrides the constructor's ``recent_steps`` for this call.
            replacement: Overrides the constructor's ``replacement`` for this call.
            timeout: The most seconds to wait for the ``rate_limiter`` (``None`` or ``inf``:
                for ever; checked with or without a limiter, see
                :func:`rlreplay.buffer.check_timeout`).
            out: A batch of ``batch_size`` from an earlier ``sample`` of this buffer, to be
                overwritten in place and returned (no allocation). Without it every call
                returns fresh arrays that share nothing with earlier batches. NumPy only.
            as_: ``"numpy"``, ``"torch"`` or ``"jax"`` (default: the constructor's ``as_``).
            device: Where torch/JAX arrays go (default: the constructor's ``device`` if ``as_``
                is the constructor's); converted after the buffer's lock is released.

        Returns:
            A :class:`Batch` with every declared field, ``reward``, ``next_<obs>``,
            ``terminated``, ``truncated``, ``discount``, ``steps``, ``ids``, ``env_ids`` and
            ``weights`` (ones); with ``as_="torch"``/``"jax"`` a
            :class:`~rlreplay.io.TensorBatch` of the same keys.

        Raises:
            EmptyBufferError: Nothing is sampleable yet.
            ReplayTimeout: The ``rate_limiter`` did not allow ``batch_size`` samples in time.
            ReplayClosed: The buffer is (or got) closed.
            ConfigError: ``batch_size`` not a positive int or its batch above the size
                budget, a bad ``timeout`` or option, a ``transform`` that is not callable, an
                unknown ``as_``, an unusable ``device``, or ``out`` with torch/JAX.

        A call refused with an rlreplay error draws nothing and changes nothing.
        """
        batch_size = positive_int("batch_size", batch_size)
        if batch_size * self._budget.transition > arguments.SIZE_BUDGET:
            self._budget.check("batch_size", batch_size, batch_size, "sample")
        if timeout is not None:
            timeout = check_timeout(timeout)
        output = self._output
        if as_ is not None or device is not None:  # (the NumPy default: two identity tests)
            output = choose_output(output, as_, device)
        if output is not None and out is not None:
            raise ConfigError(
                f"out: refills a NumPy batch, so it needs as_='numpy'; got as_={output.as_!r} "
                "(drop out=, or pass as_='numpy')"
            )
        if transform is not None and not callable(transform):
            raise ConfigError(f"transform: expected a callable Batch -> Batch, got {transform!r}")
        opts = self.draw_options
        if recent_ratio is not None or recent_steps is not None or replacement is not None:
            opts = draw_options(
                opts.recent_ratio if recent_ratio is None else recent_ratio,
                opts.recent_steps if recent_steps is None else recent_steps,
                opts.replacement if replacement is None else replacement,
            )
        limiter = self._pacing.limiter
        if limiter is not None:  # waits without the lock: writers need it to pay for samples
            limiter.await_sample(batch_size, timeout)
        draws = self._draws
        try:
            with self._lock:
                self._sync.check_open()
                if transform is not None or draws.transforms:
                    batch = draws.draw_transformed(batch_size, opts, out, transform)
                else:
                    batch = draws.draw(batch_size, opts, out)
        except BaseException:
            if limiter is not None:
                limiter.cancel_sample(batch_size)  # nothing was drawn: nothing to pay for
            raise
        return batch if output is None else output(batch)

    get_transitions = forward("_draws", Draws.get_transitions)

    @overload
    def sample_sequences(
        self, batch_size: int, length: int, *, within_episode: bool = ..., pad: bool = ...,
        balance_envs: bool = ..., transform: Transform | None = ..., timeout: float | None = ...,
        as_: Literal["numpy"] | None = ..., device: Any = ...,
    ) -> Batch: ...  # fmt: skip
    @overload
    def sample_sequences(
        self, batch_size: int, length: int, *, within_episode: bool = ..., pad: bool = ...,
        balance_envs: bool = ..., transform: Transform | None = ..., timeout: float | None = ...,
        as_: Literal["torch", "jax"], device: Any = ...,
    ) -> TensorBatch: ...  # fmt: skip
    def sample_sequences(
        self,
        batch_size: int,
        length: int,
        *,
        within_episode: bool = True,
        pad: bool = True,
        balance_envs: bool = False,
        transform: Transform | None = None,
        timeout: float | None = None,
        as_: str | None = None,
        device: Any = None,
    ) -> Batch | TensorBatch:
        """Draw ``batch_size`` sequences of ``length`` consecutive stored steps (R2D2, ALF).

        Start steps are drawn uniformly over stored steps (by priority in a prioritized
        buffer). Per-step fields are the raw stored ones, shaped ``(B, L, ...)`` (``obs`` is a
        single frame even with frame stacking), plus each step's ``next_<obs>``; ``mask``
        ``(B, L)`` marks real steps and is always a prefix. With ``within_episode`` a sequence
        stops at its episode's last step; otherwise it runs on into the next episode (the
        per-step ``terminated``/``truncated`` flags show where). Steps past the newest stored
        step of the env are masked; a sequence never crosses the write cursor or another env.

        Args:
            batch_size: Number of sequences ``B``.
            length: Steps per sequence ``L`` (longer than ``env_capacity`` only pads more).
            within_episode: Stop sequences at episode ends.
            pad: If False, only starts whose ``L`` steps are all real are drawn (found by
                rejection; a buffer where such starts are very rare falls back to one scan).
            balance_envs: Pick each sequence's env uniformly among the envs that have a
                start, then its start uniformly within that env (ALF ``get_batch``), instead
                of uniformly over all stored steps. Rows come ordered by env.
            transform: A function ``Batch -> Batch`` applied to the result (the buffer's
                ``transforms`` are for transitions and are not applied here). If it raises,
                the draw is rolled back (as in :meth:`~rlreplay.ReplayBuffer.sample`).
            timeout: The most seconds to wait for the ``rate_limiter`` (one sample per
                sequence; ``None`` or ``inf``: for ever).
            as_: ``"numpy"``, ``"torch"`` or ``"jax"`` (default: the buffer's; see
                :meth:`~rlreplay.ReplayBuffer.sample`).
            device: Where torch/JAX arrays go (default: see :meth:`~rlreplay.ReplayBuffer.sample`).

        Returns:
            A :class:`Batch` with per-step fields, ``next_<obs>``, ``next_known``, ``mask``,
            ``ids`` (first steps, ``(B,)``), ``env_ids`` and ``weights`` (a
            :class:`~rlreplay.io.TensorBatch` of them for torch/JAX).

        Raises:
            EmptyBufferError: No start can be drawn.
            ReplayTimeout: The ``rate_limiter`` did not allow ``batch_size`` samples in time.
            ConfigError: ``batch_size`` or ``length`` not a positive int, ``B * L`` steps
                above the size budget (:func:`rlreplay.spec.size_budget`), a bad ``timeout``
                or flag, a ``transform`` that is not callable, an unknown ``as_`` or an
                unusable ``device``; nothing is drawn then.
        """
        return self._queries.sample_sequences(
            batch_size, length, within_episode=within_episode, pad=pad,
            balance_envs=balance_envs, transform=transform, timeout=timeout, as_=as_,
            device=device,
        )  # fmt: skip

    get_sequences = forward("_queries", Queries.get_sequences)

    @overload
    def sample_episodes(
        self, n: int, *, as_: Literal["numpy"] | None = ..., device: Any = ...
    ) -> Batch: ...
    @overload
    def sample_episodes(
        self, n: int, *, as_: Literal["torch", "jax"], device: Any = ...
    ) -> TensorBatch: ...
    def sample_episodes(
        self, n: int, *, as_: str | None = None, device: Any = None
    ) -> Batch | TensorBatch:
        """Draw ``n`` complete episodes uniformly (with replacement) among those fully stored.

        Args:
            n: Number of episodes.
            as_: ``"numpy"``, ``"torch"`` or ``"jax"`` (default: the buffer's; see
                :meth:`~rlreplay.ReplayBuffer.sample`).
            device: Where torch/JAX arrays go (default: see :meth:`~rlreplay.ReplayBuffer.sample`).

        Returns:
            A :class:`Batch` of per-step fields shaped ``(n, T_max, ...)`` with ``mask``,
            ``lengths``, ``ids`` (first steps), ``env_ids`` and ``next_<obs>`` (a
            :class:`~rlreplay.io.TensorBatch` of them for torch/JAX).

        Raises:
            EmptyBufferError: No complete episode is stored.
            ConfigError: ``n`` not a positive int, or ``n`` episodes above the size budget
                (:func:`rlreplay.spec.size_budget`: checked with ``n`` rings of an env when
                those fit, else with the drawn episodes' longest, the draw then rolled back),
                an unknown ``as_`` or an unusable ``device``.
        """
        return self._queries.sample_episodes(n, as_=as_, device=device)

    get_episode = forward("_queries", Queries.get_episode)
    stored_range = forward("_queries", Queries.stored_range)
    episode_begin = forward("_queries", Queries.episode_begin)
    steps_to_episode_end = forward("_queries", Queries.steps_to_episode_end)
    get_field = forward("_queries", Queries.get_field)
    sampleable_ids = forward("_queries", Queries.sampleable_ids)

    # ------------------------------------------------------------------ FIFO use
    def atomic(self) -> Atomic[Self]:
        """Hold the buffer's lock across several calls: no other thread reads or writes between.

        Every public method already takes the lock for its own duration; ``with buf.atomic():``
        makes a group of calls one step for every other thread (e.g. read
        :meth:`stored_range`, then fetch by ids that are then still stored). The lock is
        re-entrant: the calls inside, and nested ``atomic()`` blocks of the same thread, take
        it again without deadlock.

        A blocking call inside (``add(block=True)``, ``dequeue(block=True)``) releases the lock
        while it waits, as :meth:`threading.Condition.wait` does (so other threads can make the
        room or the data it waits for), and takes it back before returning: the block is
        atomic before and after such a wait, not across it. The context neither checks nor
        changes whether the buffer is open: calls inside raise :class:`rlreplay.ReplayClosed`
        as usual.

        Returns:
            A context manager whose ``with ... as b`` gives this buffer.

        Example:
            >>> import numpy as np, rlreplay as rr
            >>> buf = rr.ReplayBuffer(8, {"obs": rr.Field((), np.float32)})
            >>> with buf.atomic():
            ...     ids = buf.extend(obs=np.arange(3, dtype=np.float32), reward=np.zeros(3),
            ...                      terminated=[False, False, True], truncated=[False] * 3,
            ...                      next_obs=np.zeros(3, np.float32))
            ...     first, end = buf.stored_range()
            >>> first.tolist(), end.tolist(), ids.tolist()
            ([0], [3], [0, 1, 2])
        """
        return Atomic(self, self._lock)

    dequeue = forward("_fifo", Fifo.dequeue)
    gather_all = forward("_fifo", Fifo.gather_all)

    # ------------------------------------------------------------------ state
    @property
    def rng(self) -> np.random.Generator:
        """The buffer's one random generator, from which every draw of the buffer comes.

        Its state is part of the buffer's state (:meth:`state_dict`, :meth:`save`): a
        front-end or transform that draws from it (under ``atomic()``, as the buffer's own draws
        happen under its lock) stays reproducible across a checkpoint and reload.
        """
        return self._rng

    def config(self) -> dict[str, Any]:
        """The buffer's configuration as JSON-able data: its constructor's arguments that are
        data (not functions such as transforms), as checkpoints record them and
        :meth:`state_dict` gives them under ``"config"``.

        Two buffers with equal configurations hold, sample and save alike given the same
        calls (with equal seeds); a sharded service uses it to check that a loaded shard fits.
        """
        with self._lock:
            return self._config()

    def _config(self) -> dict[str, Any]:
        config = {
            "capacity": self.capacity,
            "fields": self.schema.to_json(),
            "num_envs": self.num_envs,
            "n_step": self.n_step,
            "gamma": self.gamma,
            "frame_stack": self.frame_stack,
            "stack_pad": self.stack_pad,
            "seed": self.seed,
            "next_fields": list(self.next_fields),
            "record_episodic_return": self.record_episodic_return,
            "reward_clip": None if self.reward_clip is None else list(self.reward_clip),
            "default_return": self.default_return,
            "recent_ratio": self.draw_options.recent_ratio,
            "recent_steps": self.draw_options.recent_steps,
            "replacement": self.draw_options.replacement,
        }
        config.update(self._sampler_config())
        limiter = self._pacing.limiter
        if limiter is not None:  # absent otherwise: files without a limiter unchanged
            config["rate_limiter"] = limiter.to_json()
        if self._output is not None:  # the default of as_/device; NumPy buffers' files unchanged
            config.update(as_=self._output.as_, device=self._output.device)
        return config

    def _sampler_config(self) -> dict[str, Any]:
        """The sampler's part of the configuration: nothing for a sampler of the class's
        default ``sampler_class`` built without arguments, else ``{"sampler": {"name": ...,
        **config}}`` (a class whose constructor builds its sampler from its own arguments
        records them its own way)."""
        sampler = self._sampler
        if type(sampler) is type(self).sampler_class and not sampler.config():
            return {}
        return {"sampler": {"name": sampler.name, **sampler.config()}}

    # (bind=False: the state part reads the configuration from the buffer, kept alive by the call)
    state_dict = forward("_state", BufferState.state_dict, bind=False)
    load_state_dict = forward("_state", BufferState.load_state_dict, bind=False)
    save = forward("_state", BufferState.save, bind=False)

    # ------------------------------------------------------------------ copies (pickle, copy)
    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by value (see :mod:`rlreplay.buffer.copying`)."""
        return reduce(self)

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        """Take the transforms of a pickle (the rest was rebuilt by ``_unpickle``)."""
        self._set_transforms(tuple(state["transforms"]))

    def _set_transforms(self, transforms: tuple[Any, ...]) -> None:
        for fn in transforms:
            self._bind(fn)
        self._draws.transforms = transforms

    def __copy__(self) -> Any:
        """An independent buffer with the same contents and state (``copy.copy``).

        A buffer is a container of data, as an array is: its shallow copy copies the data too
        (two buffers cannot share a ring's cursors). Each transform is copied shallowly.
        """
        return clone(self, None, copy.copy)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """An independent buffer with the same contents and state; transforms deep-copied."""
        return clone(self, memo, lambda fn: copy.deepcopy(fn, memo))

    # ------------------------------------------------------------------ exports
    to_arrow = exports.to_arrow
    to_pandas = exports.to_pandas
    to_parquet = exports.to_parquet
    to_minari = exports.to_minari
    iterate = exports.iterate

    # ------------------------------------------------------------------ lifecycle
    def _bind(self, fn: Transform) -> None:
        self._draws.bind(fn)

    def _check_open(self) -> None:
        self._sync.check_open()

    def close(self) -> None:
        """Flush storage and release it (a memmap directory becomes free for another buffer).

        Later calls that read or write the buffer raise :class:`rlreplay.ReplayClosed`.
        Closing twice is harmless.
        """
        with self._lock:
            if self._sync.close():
                self._backend.close()
                if self._pacing.limiter is not None:
                    self._pacing.limiter.close()  # its waiters wake up too

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
            if self._sync.closed:
                raise ReplayClosed(f"{type(self).__name__} is closed")
            return share_buffer(self, env_ids)

    def clear(self) -> None:
        """Drop every stored transition. Ids keep counting, so old ids stay recognisably stale."""
        with self._lock:
            self._sync.check_open()
            before = self._events.before()
            self._index.clear()
            self._events.after(before)
            self._pacing.resized()
            self._cond.notify_all()


_FORWARDED = forwarded_names(ReplayBuffer)
# help(), IDEs and inspect.signature read a class's signature from its own __new__ first: show
# the constructor's arguments, not __new__'s (*args, **kwargs).
ReplayBuffer.__new__.__signature__ = inspect.signature(ReplayBuffer.__init__)  # type: ignore[attr-defined]
