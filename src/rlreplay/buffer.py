"""The public replay buffer: composes the schema, storage, episode index and samplers."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from rlreplay.assemble import assemble_transitions
from rlreplay.batch import Batch
from rlreplay.checkpoint import CheckpointReader, write_checkpoint
from rlreplay.codegen import define
from rlreplay.episodes import (
    COUNT,
    HEAD,
    HI,
    LO,
    EpisodeIndex,
    expand_ranges,
    sampleable_delta,
)
from rlreplay.errors import (
    CheckpointError,
    ConfigError,
    EmptyBufferError,
    FieldError,
    InvalidIdError,
    ReplayClosed,
    ReplayTimeout,
    ShapeError,
)
from rlreplay.sampling.uniform import (
    DrawOptions,
    draw_mixed,
    draw_options,
    draw_uniform,
)
from rlreplay.sequences import draw_sequence_starts, gather_runs, run_lengths
from rlreplay.spec import Field, Schema, clip_pair, positive_int
from rlreplay.storage import Columns, make_backend
from rlreplay.transforms import BindableTransform, Transform, apply_transform
from rlreplay.writer import MISSING, Prepared, ReturnsConfig, StepWriter

__all__ = ["ReplayBuffer", "load"]

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
    #: Subclasses that keep per-transition sampling state (priorities) set this to be told, on
    #: every write, which transitions became sampleable and which stopped being so.
    _tracks_sampleable: ClassVar[bool] = False

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
    ) -> None:
        self.schema = Schema.build(fields)
        num_envs = positive_int("num_envs", num_envs)
        n_step = positive_int("n_step", n_step)
        frame_stack = positive_int("frame_stack", frame_stack)
        capacity = positive_int("capacity", capacity)
        if isinstance(gamma, bool) or not isinstance(gamma, int | float | np.number):
            raise ConfigError(f"gamma: expected a number in [0, 1], got {gamma!r}")
        gamma = float(gamma)
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"gamma: expected a value in [0, 1], got {gamma}")
        if capacity < num_envs * (n_step + frame_stack):
            raise ConfigError(
                f"capacity: expected at least num_envs * (n_step + frame_stack) = "
                f"{num_envs} * ({n_step} + {frame_stack}) = {num_envs * (n_step + frame_stack)}"
                f", got {capacity}"
            )
        if frame_stack > 1 and "obs" not in self.schema:
            raise ConfigError("frame_stack: stacking applies to the 'obs' field; declare 'obs'")
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
        self._index = EpisodeIndex(num_envs, self._env_capacity, n_step, frame_stack, self._finals0)
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
        self._fast_add = True  # installs this buffer's generated `add` (see _install_fast_add)
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
        from rlreplay.spaces import fields_from_spaces

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
            return self._index.stored

    @property
    def num_sampleable(self) -> int:
        """Number of transitions :meth:`sample` draws from."""
        with self._lock:
            return int(self._index.sizes().sum())

    @property
    def nbytes(self) -> int:
        """Bytes allocated for stored data (columns, final observations and the index)."""
        with self._lock:
            index = sum(a.nbytes for a in self._index.state_arrays().values())
            return self._cols.nbytes + index

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

    # ------------------------------------------------------------------ writing
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
        """Give this buffer its own ``add``, generated for its fields, that tries the fast path.

        The generated function has one keyword parameter per field and ``next_<obs>`` (so a
        call binds its values straight to them, with no ``**values`` dict and no lookups) and
        takes the options and unknown names in ``**_options``. A call with no options stores the
        values under the lock as :attr:`StepWriter.add_plain` does, with the writer's code for
        it inlined (:meth:`StepWriter.store_source`; generated again when the writer changes
        path); whatever that does not store goes on to the general path (:meth:`add` below),
        which behaves as documented there. About 0.4 µs less per call than one
        ``add(**values)`` method for both, and 0.13 µs less than calling ``add_plain``.

        The function reaches the buffer through a weak proxy: a buffer dropped by its last
        reference is freed at once, not by the cycle collector. A subclass that defines its own
        ``add`` keeps it (no generated function); its ``super().add(...)`` is the general path.
        """
        writer, names = self._writer, self._writer.arg_names
        buf = weakref.proxy(self)
        store, scope = writer.store_source(names, "_out")  # names: fields, never "_..."
        scope.update({
            "_MISSING": MISSING, "_acquire": self._lock.acquire, "_release": self._lock.release,
            "_cond": self._cond, "_buf": buf,
            "_writer": writer, "_nd": np.ndarray, "_general": ReplayBuffer.add,
            "_given": lambda *args: {n: v for n, v in zip(names, args, strict=True)
                                     if v is not MISSING},
        })  # fmt: skip
        args = ", ".join(names)
        lines = [
            f"def add(*, {', '.join(f'{n}=_MISSING' for n in names)}, **_options):",
            "    if not _options:",
            "        _acquire()  # the lock, as `with` would take it (0.14 µs less per call)",
            "        try:",
            "            if not _buf._closed:",
            *(f"                {line}" for line in store),
            "                if type(_out) is _nd:  # stored: the ids",
            "                    if _buf._waiting:",
            "                        _cond.notify_all()",
            "                    return _out",
            "                if _out:  # an int: valid as given, but for the general store",
            f"                    _prep = _writer.prepared_plain(_given({args}), _out)",
            "                    return _buf._commit(_prep, False, None)",
            "        finally:",
            "            _release()",
            f"    _options.update(_given({args}))",
            "    return _general(_buf, **_options)",
        ]
        add = define(lines, "add", scope, "<rlreplay add>")
        add.__doc__ = ReplayBuffer.add.__doc__
        add.__qualname__ = f"{type(self).__name__}.add"
        self.__dict__["add"] = add

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
            timeout: With ``block``, the most seconds to wait (``None``: for ever).
            **values: One value per field (``obs``, ``action``, ..., ``reward``, ``terminated``,
                ``truncated``), and ``next_<name>`` for every observation field when a step
                ends its episode (ignored on other steps).

        Returns:
            int64 ids of the stored transitions, one per env written.

        Raises:
            FieldError: Unknown or missing field, or a missing ``next_obs`` at an episode end.
            ShapeError: A value of the wrong shape, or bad ``env_ids``.
            DTypeError: An unsafe cast.
            ReplayTimeout: ``block`` and no room within ``timeout``.
            ReplayClosed: The buffer is (or got) closed.
        """
        # The general path. A buffer normally answers `add` with its generated function
        # (_install_fast_add), which comes here for what the fast path does not store.
        env_ids = values.pop("env_ids", None)
        block = bool(values.pop("block", False))
        timeout = values.pop("timeout", None)
        with self._lock:
            self._check_open()
            return self._commit(self._writer.prepare_step(values, env_ids), block, timeout)

    def extend(
        self, *, env_id: int = 0, block: bool = False, timeout: float | None = None, **values: Any
    ) -> Array:
        """Store ``T`` consecutive steps of one env in one call (leading axis ``T``).

        Args:
            env_id: The env the steps belong to.
            block: Wait for room for all ``T`` steps instead of overwriting (as in :meth:`add`).
            timeout: With ``block``, the most seconds to wait.
            **values: As in :meth:`add`, each with a leading axis ``T``.

        Returns:
            int64 ids of the ``T`` transitions.
        """
        with self._lock:
            self._check_open()
            return self._commit(self._writer.prepare_extend(values, env_id), block, timeout)

    def end_episode(self, env_id: int = 0, **final: Any) -> Array:
        """End env ``env_id``'s running episode at its newest stored step, as truncated.

        For callers that learn only afterwards that an episode was cut (a collection loop that
        stops, a reset without a terminal flag, a front-end whose API gives no final
        observation with the step): the newest step becomes the episode's last, flagged
        ``truncated``, with ``final`` as its next observation, so its windows become known and
        the next :meth:`add` starts a new episode.

        Args:
            env_id: The env.
            **final: ``next_<name>`` for every observation field (e.g. ``next_obs=...``).

        Returns:
            The id of the step that now ends the episode (shape ``(1,)``).

        Raises:
            InvalidIdError: The env stores no step, or its newest step already ends an episode.
            FieldError: Not exactly the ``next_<name>`` values.
        """
        with self._lock:
            self._check_open()
            before = self._index.bounds() if self._tracks_sampleable else None
            ids = self._writer.end_episode(env_id, final)
            if before is not None:
                empty = np.zeros(0, np.int64)
                self._notify_sampleable(before, empty, empty)
            if self._waiting:
                self._cond.notify_all()
            return ids

    def _commit(self, prep: Prepared, block: bool, timeout: float | None) -> Array:
        """Store a validated call (after waiting for room if ``block``); tell the hooks."""
        if timeout is not None:
            _check_timeout(timeout)
        if block:
            self._wait_for_room(prep.rows_env, timeout)
        before = self._index.bounds() if self._tracks_sampleable else None
        ids = self._writer.store(prep)
        if before is not None:
            self._notify_sampleable(before, prep.rows_env, ids // self.num_envs)
        if self._waiting:
            self._cond.notify_all()
        return ids

    # ------------------------------------------------------------------ waiting (FIFO use)
    def _wait(self, ready: Callable[[], bool], timeout: float | None, what: str) -> None:
        """Wait (releasing the lock) until ``ready()``; ``queue.Queue`` timeout semantics."""
        if ready():
            return
        self._waiting += 1
        try:
            done = self._cond.wait_for(lambda: self._closed or ready(), timeout)
        finally:
            self._waiting -= 1
        self._check_open()
        if not done:
            raise ReplayTimeout(f"{what}: not possible within timeout={timeout} s")

    def _wait_for_room(self, rows_env: Array, timeout: float | None) -> None:
        need = np.bincount(rows_env, minlength=self.num_envs)
        if need.max() > self._env_capacity:
            raise ShapeError(
                f"block: {int(need.max())} steps for one env can never fit its "
                f"{self._env_capacity} slots; split the call"
            )
        room = self._env_capacity - need

        def ready() -> bool:
            return bool((self._index.stored_per_env() <= room).all())

        self._wait(ready, timeout, "add(block=True)")

    def _settled(self, before: Array, t0: int, n: int) -> None:
        """The write hook for deferred plain steps ``t0 .. t0+n-1`` of every env.

        Called by the index when it accounts for them, which happens before anything reads
        it (the prioritized buffer also settles before reading its priorities).
        """
        first = max(t0, t0 + n - self._env_capacity)  # earlier ones were overwritten since
        E = self.num_envs
        rows_t = np.repeat(np.arange(first, t0 + n, dtype=np.int64), E)
        rows_env = np.tile(np.arange(E, dtype=np.int64), t0 + n - first)
        self._notify_sampleable(before, rows_env, rows_t)

    def _notify_sampleable(self, before: Array, rows_env: Array, rows_t: Array) -> None:
        self._on_write(rows_env, rows_t, *sampleable_delta(before, self._index.bounds()))

    def _on_write(
        self,
        rows_env: Array,
        rows_t: Array,
        removed_env: Array,
        removed_t: Array,
        added_env: Array,
        added_t: Array,
    ) -> None:
        """Hook for subclasses with ``_tracks_sampleable``: called after writes.

        Steps stored by the per-step fast path are reported together, when the index accounts
        for them (:meth:`EpisodeIndex.settle`: before anything reads the index, at the latest
        after 4096 of them); every other write is reported as it happens. Either way the hook
        has run before any read of the buffer sees the steps.

        Args:
            rows_env: Env of each step just written.
            rows_t: Absolute step of each step just written.
            removed_env: Env of each transition that is no longer sampleable (overwritten,
                cleared, or its frame stack lost); apply these before ``added``, since an
                added transition may reuse a removed one's slot.
            removed_t: Their absolute steps.
            added_env: Env of each transition that just became sampleable.
            added_t: Their absolute steps.
        """

    def close(self) -> None:
        """Flush storage and release it (a memmap directory becomes free for another buffer).

        Later calls that read or write the buffer raise :class:`rlreplay.ReplayClosed`.
        Closing twice is harmless.
        """
        with self._lock:
            if not self._closed:
                self._closed = True
                self._backend.close()
                self._cond.notify_all()  # waiters wake up and raise ReplayClosed

    def __enter__(self) -> ReplayBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ReplayClosed(f"{type(self).__name__} is closed")

    def clear(self) -> None:
        """Drop every stored transition. Ids keep counting, so old ids stay recognisably stale."""
        with self._lock:
            self._check_open()
            before = self._index.bounds() if self._tracks_sampleable else None
            self._index.clear()
            if before is not None:
                empty = np.zeros(0, np.int64)
                self._notify_sampleable(before, empty, empty)
            self._cond.notify_all()

    # ------------------------------------------------------------------ sampling
    def sample(
        self,
        batch_size: int,
        *,
        transform: Transform | None = None,
        recent_ratio: float | None = None,
        recent_steps: int | None = None,
        replacement: bool | None = None,
    ) -> Batch:
        """Draw ``batch_size`` transitions uniformly, with replacement, from the sampleable ones.

        Args:
            batch_size: Number of transitions.
            transform: A function ``Batch -> Batch`` applied after the buffer's ``transforms``.
            recent_ratio: Overrides the constructor's ``recent_ratio`` for this call.
            recent_steps: Overrides the constructor's ``recent_steps`` for this call.
            replacement: Overrides the constructor's ``replacement`` for this call.

        Returns:
            A :class:`Batch` with every declared field, ``reward``, ``next_<obs>``,
            ``terminated``, ``truncated``, ``discount``, ``steps``, ``ids``, ``env_ids`` and
            ``weights`` (ones).

        Raises:
            EmptyBufferError: Nothing is sampleable yet.
        """
        batch_size = positive_int("batch_size", batch_size)
        opts = self.draw_options
        if recent_ratio is not None or recent_steps is not None or replacement is not None:
            opts = draw_options(
                opts.recent_ratio if recent_ratio is None else recent_ratio,
                opts.recent_steps if recent_steps is None else recent_steps,
                opts.replacement if replacement is None else replacement,
            )
        with self._lock:
            self._check_open()
            env_ids, t, extra = self._draw(batch_size, opts)
            return self._transformed(self._batch(env_ids, t, extra), transform)

    def get_transitions(self, ids: Any) -> Batch:
        """Assemble the transitions with the given ids (each must be sampleable now).

        Args:
            ids: Transition ids, as returned by :meth:`add` or found in ``batch.ids``.

        Returns:
            A :class:`Batch` like :meth:`sample`'s, in the order of ``ids``.

        Raises:
            InvalidIdError: An id never issued, overwritten, or not sampleable (yet).
        """
        with self._lock:
            self._check_open()
            env_ids, t, _ = self._index.split_ids(ids)
            if env_ids.ndim != 1:
                raise InvalidIdError(f"ids: expected a 1-D array, got shape {env_ids.shape}")
            env = self._index.env
            bad = (t < env[env_ids, LO]) | (t >= env[env_ids, HI])
            if bad.any():
                raise InvalidIdError(
                    f"ids: {np.asarray(ids)[bad][:5].tolist()} are not sampleable (overwritten, "
                    "or their window or frame stack is not complete)"
                )
            return self._batch(env_ids, t, {"weights": np.ones(t.shape[0], np.float32)})

    # ------------------------------------------------------------------ runs of steps
    def sample_sequences(
        self,
        batch_size: int,
        length: int,
        *,
        within_episode: bool = True,
        pad: bool = True,
        balance_envs: bool = False,
        transform: Transform | None = None,
    ) -> Batch:
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
                ``transforms`` are for transitions and are not applied here).

        Returns:
            A :class:`Batch` with per-step fields, ``next_<obs>``, ``next_known``, ``mask``,
            ``ids`` (first steps, ``(B,)``), ``env_ids`` and ``weights``.

        Raises:
            EmptyBufferError: No start can be drawn.
        """
        batch_size = positive_int("batch_size", batch_size)
        length = positive_int("length", length)
        with self._lock:
            self._check_open()
            env_ids, t0, extra = self._draw_starts(
                batch_size, length, within_episode, pad, balance_envs
            )
            n_real = run_lengths(self._index, env_ids, t0, length, within_episode)
            data = gather_runs(self._cols, self._index, env_ids, t0, n_real, length)
            data["ids"] = self._index.ids(env_ids, t0)
            data["env_ids"] = env_ids
            data.update(extra)
            batch = Batch(data)
            if transform is not None:
                self._bind(transform)
                batch = apply_transform(transform, batch)
            return batch

    def get_sequences(self, ids: Any, length: int, *, within_episode: bool = True) -> Batch:
        """The sequences of ``length`` steps starting at the stored steps ``ids``.

        The deterministic counterpart of :meth:`sample_sequences` (same fields and masking).

        Raises:
            InvalidIdError: An id never issued or overwritten.
        """
        length = positive_int("length", length)
        with self._lock:
            env_ids, t0, _ = self._stored_steps(ids)
            if env_ids.ndim != 1:
                raise InvalidIdError(f"ids: expected a 1-D array, got shape {env_ids.shape}")
            n_real = run_lengths(self._index, env_ids, t0, length, within_episode)
            data = gather_runs(self._cols, self._index, env_ids, t0, n_real, length)
            data["ids"] = self._index.ids(env_ids, t0)
            data["env_ids"] = env_ids
            return Batch(data)

    def _draw_starts(
        self, batch_size: int, length: int, within_episode: bool, pad: bool, balance_envs: bool
    ) -> tuple[Array, Array, dict[str, Array]]:
        """Choose sequence starts; subclasses override (prioritized starts)."""
        env_ids, t0 = draw_sequence_starts(
            self._index, self._rng, batch_size, length,
            within_episode=within_episode, pad=pad, balance_envs=balance_envs,
        )  # fmt: skip
        return env_ids, t0, {"weights": np.ones(batch_size, np.float32)}

    def sample_episodes(self, n: int) -> Batch:
        """Draw ``n`` complete episodes uniformly (with replacement) among those fully stored.

        Returns:
            A :class:`Batch` of per-step fields shaped ``(n, T_max, ...)`` with ``mask``,
            ``lengths``, ``ids`` (first steps), ``env_ids`` and ``next_<obs>``.

        Raises:
            EmptyBufferError: No complete episode is stored.
        """
        n = positive_int("n", n)
        with self._lock:
            self._check_open()
            first, sizes = self._index.complete_episode_records()
            if not sizes.any():
                raise EmptyBufferError("sample_episodes: no complete episode is stored")
            env_ids, fid = draw_uniform(first, sizes, n, self._rng)
            end = self._index.final_owner[
                env_ids * self._index.finals_capacity + fid % self._index.finals_capacity
            ]
            start = self._index.ep_start[self._index.slots(env_ids, end)]
            lengths = end - start + 1
            data = gather_runs(self._cols, self._index, env_ids, start, lengths, int(lengths.max()))
            data.update(ids=self._index.ids(env_ids, start), env_ids=env_ids, lengths=lengths)
            return Batch(data)

    def get_episode(self, id: int) -> Batch:
        """The stored steps of the episode holding step ``id`` (leading axis: its steps).

        A running episode gives its steps so far; an episode cut by overwriting gives its
        stored part. Fields are raw per-step values plus ``next_<obs>``, ``next_known``,
        ``ids`` and ``env_ids`` per step.

        Raises:
            InvalidIdError: ``id`` never issued or overwritten.
        """
        with self._lock:
            env_ids, _, slots = self._stored_steps(np.array([id]))
            start = np.maximum(self._index.ep_start[slots], self._index.env[env_ids, HEAD])
            end = self._index.ep_end[slots]
            last = np.where(end >= 0, end, self._index.env[env_ids, COUNT] - 1)
            lengths = last - start + 1
            data = gather_runs(self._cols, self._index, env_ids, start, lengths, int(lengths[0]))
            data.pop("mask")
            out = {k: v[0] for k, v in data.items()}
            steps = start[0] + np.arange(int(lengths[0]))
            out["ids"] = self._index.ids(np.full_like(steps, env_ids[0]), steps)
            out["env_ids"] = np.full_like(steps, env_ids[0])
            return Batch(out)

    # ------------------------------------------------------------------ FIFO use
    def dequeue(
        self,
        n: int,
        env_ids: Any = None,
        *,
        block: bool = False,
        timeout: float | None = None,
    ) -> Batch:
        """Remove and return the oldest ``n`` steps of each env (ALF ``dequeue``).

        Args:
            n: Steps per env.
            env_ids: Which envs (default: all).
            block: Wait until every named env holds ``n`` steps (``queue.Queue.get``).
            timeout: With ``block``, the most seconds to wait (``None``: for ever).

        Returns:
            Raw per-step fields shaped ``(len(env_ids), n, ...)``, with ``next_<obs>``,
            ``next_known``, per-step ``ids`` and ``env_ids``.

        Raises:
            EmptyBufferError: Not enough steps and ``block`` is False.
            ReplayTimeout: ``block`` and not enough steps within ``timeout``.
            ReplayClosed: The buffer is (or got) closed.
        """
        n = positive_int("n", n)
        with self._lock:
            self._check_open()
            envs = self._all_envs if env_ids is None else self._writer.check_env_ids(env_ids)

            def ready() -> bool:
                return bool((self._index.stored_per_env()[envs] >= n).all())

            _check_timeout(timeout)
            if n > self._env_capacity:
                raise ShapeError(
                    f"n: {n} steps per env can never be stored (env_capacity "
                    f"{self._env_capacity}); dequeue at most that many"
                )
            if not block and not ready():
                have = self._index.stored_per_env()[envs].tolist()
                raise EmptyBufferError(f"dequeue: {n} steps per env requested, envs hold {have}")
            self._wait(ready, timeout, "dequeue(block=True)")
            data = self._runs_from_heads(envs, np.full(envs.shape[0], n), n)
            before = self._index.bounds() if self._tracks_sampleable else None
            self._index.dequeue(envs, n)
            if before is not None:
                empty = np.zeros(0, np.int64)
                self._notify_sampleable(before, empty, empty)
            self._cond.notify_all()
            return Batch(data)

    def gather_all(self) -> Batch:
        """Every stored step, shaped ``(E, T, ...)`` (ALF ``gather_all``).

        ``T`` is the most steps any env holds; ``mask`` marks real steps where envs hold
        fewer. Per-step ``ids`` and ``env_ids`` are included.
        """
        with self._lock:
            self._check_open()
            stored = self._index.stored_per_env()
            return Batch(self._runs_from_heads(self._all_envs, stored, int(stored.max())))

    def _runs_from_heads(self, envs: Array, n_real: Array, length: int) -> dict[str, Array]:
        heads = self._index.env[envs, HEAD]
        data = gather_runs(self._cols, self._index, envs, heads, n_real, length)
        steps = heads[:, None] + np.arange(length)
        data["ids"] = self._index.ids(envs[:, None], steps)
        data["env_ids"] = np.repeat(envs[:, None], length, axis=1)
        return data

    # ------------------------------------------------------------------ episodic queries
    def _stored_steps(self, ids: Any) -> tuple[Array, Array, Array]:
        """``(env_ids, t, slots)`` of stored steps; overwritten or never-issued ids raise."""
        self._check_open()
        env_ids, t, stale = self._index.split_ids(ids)
        if stale.any():
            raise InvalidIdError(
                f"ids: {np.asarray(ids)[stale][:5].tolist()} were overwritten (or cleared); "
                "their data is gone"
            )
        return env_ids, t, self._index.slots(env_ids, t)

    def episode_begin(self, ids: Any) -> Array:
        """Ids of the first steps of the episodes holding ``ids`` (same shape).

        The returned ids may be stale (an episode's first step can be overwritten while later
        steps of it are still stored): they are ids, not slots.

        Raises:
            InvalidIdError: A query id that was never issued or is itself overwritten.
        """
        with self._lock:
            env_ids, _, slots = self._stored_steps(ids)
            return self._index.ids(env_ids, self._index.ep_start[slots])

    def steps_to_episode_end(self, ids: Any) -> Array:
        """How many steps follow each id in its episode (0 at the last step, -1 if unfinished).

        Raises:
            InvalidIdError: An id that was never issued or is overwritten.
        """
        with self._lock:
            _, t, slots = self._stored_steps(ids)
            end = self._index.ep_end[slots]
            out: Array = np.where(end >= 0, end - t, -1)
            return out

    def get_field(self, name: str, ids: Any) -> Array:
        """The stored value of field ``name`` at each step in ``ids`` (raw: no stacking).

        Raises:
            FieldError: ``name`` is not a stored field.
            InvalidIdError: An id that was never issued or is overwritten.
        """
        with self._lock:
            if name not in self.schema.fields:
                raise FieldError(f"get_field: unknown field {name!r}; stored: {self.schema.names}")
            _, _, slots = self._stored_steps(ids)
            out: Array = self._cols.steps[name][slots]
            return out

    def sampleable_ids(self) -> Array:
        """Ids of every sampleable transition, env by env in time order."""
        with self._lock:
            self._check_open()
            env_ids, t = expand_ranges(self._index.env[:, LO], self._index.sizes())
            return self._index.ids(env_ids, t)

    def _draw(self, batch_size: int, opts: DrawOptions) -> tuple[Array, Array, dict[str, Array]]:
        """Choose ``(env_ids, t)`` to sample, plus per-draw arrays such as ``weights``.

        Subclasses override this (prioritized sampling); the base draws uniformly, mixing in
        recent data and avoiding duplicates as ``opts`` asks.
        """
        sizes = self._index.sizes()
        total = int(sizes.sum())
        if not total:
            raise EmptyBufferError(
                f"sample: nothing is sampleable yet ({len(self)} stored transitions; a "
                f"transition becomes sampleable once its {self.n_step}-step window is known)"
            )
        env = self._index.env
        if opts.recent_ratio == 0 and opts.replacement:
            env_ids, t = draw_uniform(env[:, LO], sizes, batch_size, self._rng, total)
        else:
            env_ids, t = draw_mixed(
                env[:, LO], env[:, HI], batch_size, self._rng,
                recent_ratio=opts.recent_ratio, recent_steps=opts.recent_steps,
                replacement=opts.replacement,
            )  # fmt: skip
        return env_ids, t, {"weights": np.ones(batch_size, np.float32)}

    def _bind(self, fn: Transform) -> None:
        if not callable(fn):
            raise ConfigError(f"transforms: expected callables Batch -> Batch, got {fn!r}")
        if isinstance(fn, BindableTransform):
            fn.bind(self)

    def _transformed(self, batch: Batch, transform: Transform | None) -> Batch:
        for fn in self.transforms:
            batch = apply_transform(fn, batch)
        if transform is not None:
            self._bind(transform)
            batch = apply_transform(transform, batch)
        return batch

    def _batch(self, env_ids: Array, t: Array, extra: dict[str, Array]) -> Batch:
        data = assemble_transitions(
            self._cols,
            self._index,
            env_ids,
            t,
            n_step=self.n_step,
            gamma=self.gamma,
            frame_stack=self.frame_stack,
            zero_pad=self.stack_pad == "zero",
            next_fields=self.next_fields,
        )
        data["env_ids"] = env_ids
        data.update(extra)
        return Batch(data)

    # ------------------------------------------------------------------ state
    def _config(self) -> dict[str, Any]:
        return {
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

    def _state_meta(self) -> dict[str, Any]:
        """Scalars of the state (JSON-able); subclasses extend it."""
        return {
            "finals_capacity": self._index.finals_capacity,
            "rng": self._rng.bit_generator.state,
        }

    def _state_arrays(self) -> dict[str, Array]:
        """Arrays of the state (live views); subclasses extend it."""
        out = {f"index/{k}": v for k, v in self._index.state_arrays().items()}
        out.update({f"columns/{k}": v for k, v in self._cols.state_arrays().items()})
        return out

    def _load_meta(self, meta: Mapping[str, Any]) -> None:
        """Prepare for a state's arrays (resize what they size) and restore its scalars."""
        finals = int(meta["finals_capacity"])
        self._index.set_finals_capacity(finals)
        self._cols.set_finals_capacity(finals)
        self._rng.bit_generator.state = meta["rng"]

    def _after_load(self) -> None:
        """Rebuild what is derived from the state after its arrays were restored in place.

        Called at the end of :meth:`load_state_dict` and of loading a checkpoint; the base keeps
        nothing derived. Subclasses rebuild caches here (e.g. segment trees from priorities).
        """

    def state_dict(self) -> dict[str, Any]:
        """The full state: ``{"class", "config", "meta", "arrays"}`` (arrays are copies)."""
        with self._lock:
            return {
                "class": type(self).__name__,
                "config": self._config(),
                "meta": self._state_meta(),
                "arrays": {k: np.array(v) for k, v in self._state_arrays().items()},
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a buffer with the same configuration."""
        with self._lock:
            if state["config"] != self._config():
                raise CheckpointError(
                    "load_state_dict: the state's configuration differs from this buffer's: "
                    f"{state['config']} != {self._config()}"
                )
            self._load_meta(state["meta"])
            dest = self._state_arrays()
            for name, arr in state["arrays"].items():
                dest[name][...] = arr
            self._after_load()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write a checkpoint of everything (contents, cursors, episodes, RNG) to one file.

        The write is atomic (temporary file, fsync, rename), versioned and checksummed. After
        :func:`rlreplay.load`, the same further calls give exactly the same samples.
        """
        with self._lock:
            self._check_open()
            self._backend.flush()
            meta = {
                "class": type(self).__name__,
                "config": self._config(),
                "state": self._state_meta(),
            }
            write_checkpoint(path, meta, self._state_arrays())

    @classmethod
    def _from_checkpoint(cls, reader: CheckpointReader, overrides: dict[str, Any]) -> ReplayBuffer:
        meta = reader.meta
        config = dict(meta["config"])
        config["fields"] = Schema.from_json(config["fields"]).fields
        config.update(overrides)
        capacity = config.pop("capacity")
        fields = config.pop("fields")
        buf = cls(capacity, fields, **config)
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
        return buf


def load(path: str | os.PathLike[str], /, **overrides: Any) -> ReplayBuffer:
    """Load a checkpoint written by :meth:`ReplayBuffer.save`.

    Args:
        path: The checkpoint file (positional: ``path=`` is the memmap directory override).
        **overrides: Constructor arguments that are not data: ``storage``/``path`` to load
            into a memmap buffer (streamed, no copy in RAM), or functions such as transforms.

    Raises:
        CheckpointError: Missing, truncated, corrupted or unknown checkpoint.
    """
    reader = CheckpointReader(path)
    name = reader.meta.get("class")
    cls = ReplayBuffer if name == "ReplayBuffer" else ReplayBuffer._registry.get(str(name))
    if cls is None:
        raise CheckpointError(f"checkpoint {str(path)!r}: unknown buffer class {name!r}")
    return cls._from_checkpoint(reader, overrides)


def _check_timeout(timeout: float | None) -> None:
    """``queue.Queue`` rules: ``None`` or a non-negative number, checked on every call."""
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0
    ):
        raise ConfigError(f"timeout: expected None or a non-negative number, got {timeout!r}")
