"""Stand-in for ``reagent.replay_memory.circular_replay_buffer``: ReAgent's buffer over rlreplay.

ReAgent's ``ReplayBuffer`` (a descendant of Dopamine's circular replay buffer) numbers its
memory by *slots* of one ring of ``replay_capacity`` rows. Each episode starts with
``stack_size - 1`` all-zero *padding rows*, counted in ``add_count``, so that a frame stack
read from consecutive slots is zero before the episode's first frame. A slot is *valid*
(sampleable) when its n-step window is known, and not among the ``stack_size - 1`` oldest
slots just past the write cursor (their stacks would read overwritten rows).

This adapter keeps only that slot bookkeeping and hands every step to one
:class:`rlreplay.ReplayBuffer` (the *core*), which does all the replay work:

============================  =================================================================
ReAgent                       core
============================  =================================================================
``observation``               field ``obs`` (one frame), ``frame_stack=stack_size``,
                              ``stack_pad="zero"`` (what the padding rows give); states
                              read with ``get_transitions(ids, stack_layout="last")``
``action``, ``reward``        fields ``action``, ``reward`` (declared shapes and dtypes)
extra storage ``name``        field ``extra_<name>``
``terminal``                  ``terminated`` with a zero *placeholder* final observation (ReAgent
                              takes no next observation; its ``next_state`` after a terminal is
                              undefined)
``update_horizon``, ``gamma`` ``n_step``, ``gamma``
``next_action``/``next_<x>``  ``next_fields=("action", "extra_<x>", ...)``: the field at ``t+m``
``next_reward``               ``"reward"`` in ``next_fields`` too (zeros after a terminal)
padding rows                  not stored: the slot maps to no core id
slot ``s``                    core id ``_slot_id[s]`` (``-1`` for padding / never written)
uniform draws                 ``core.sample`` (draws of slots not valid here are redrawn)
stacks of other fields,       ``core.get_sequences`` runs stacked by the core's
timeline windows              ``assemble.stack_frames``
============================  =================================================================

The core keeps ``replay_capacity`` real steps, at least as many as the ring holds (the ring
also holds padding rows), so every step a slot names is still stored there and every slot
``add`` marks valid is one the core can assemble; other slots (set valid by hand, or named in
``indices=``) are read from the ring as reagent 0.1 reads them (``_slotread``). Built
without ``observation_shape`` (ReAgent's later API), the buffer builds its core at the first
add, from the elements that add shows.

Private modules: ``_state`` (the buffer's attributes and hooks, declared once, and the
element types), ``_ring`` (the ring's counters and validity marks, the base class),
``_slots`` (writing rows and marking validity, slot draws), ``_assembly`` (returned
elements: stacks, timeline format), ``_elements`` (declared and inferred elements),
``_checkpoint`` (Dopamine's file layout) and ``_persist`` (``save``/``load``), ``_draws``
(reagent 0.1's draws without ``seed=``), ``_args`` (user arguments, ReAgent's casts) and
``_errors`` (errors that are also ReAgent's ``AssertionError``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rlreplay import ConfigError, Field
from rlreplay import ReplayBuffer as CoreReplayBuffer
from rlreplay.compat.reagent import _args, _assembly, _draws, _elements, _slotread, _slots
from rlreplay.compat.reagent._assembly import EXTRA, _Batch
from rlreplay.compat.reagent._checkpoint import CHECKPOINT_DURATION, STORE_FILENAME_PREFIX
from rlreplay.compat.reagent._errors import NotFoundError
from rlreplay.compat.reagent._persist import CheckpointFiles
from rlreplay.compat.reagent._ranges import RangeReaders
from rlreplay.compat.reagent._ring import SlotRing
from rlreplay.compat.reagent._state import ReplayElement, shape_type

if TYPE_CHECKING:
    import torch

__all__ = [
    "CHECKPOINT_DURATION",
    "STORE_FILENAME_PREFIX",
    "NotFoundError",
    "ReplayBuffer",
    "ReplayElement",
    "invalid_range",
    "shape_type",
]

Array = np.ndarray[Any, Any]


def invalid_range(cursor: int, replay_capacity: int, stack_size: int, update_horizon: int) -> Array:
    """Dopamine's slots around the cursor: ``cursor - N, ..., cursor + K - 1`` (mod capacity).

    The ``update_horizon`` (``N``) slots before the cursor and the ``stack_size`` (``K``) on
    and after it, as ReAgent's module function.

    Raises:
        AssertionError: ``cursor >= replay_capacity``, as ReAgent asserts.
    """
    assert cursor < replay_capacity
    n = update_horizon
    return np.array([(cursor - n + i) % replay_capacity for i in range(stack_size + n)])


class ReplayBuffer(SlotRing, RangeReaders, CheckpointFiles):
    """ReAgent's circular replay buffer: uniform sampling of n-step transitions with stacks.

    Stores transitions (state, action, reward, next_state, terminal and any extra contents)
    and builds frame stacks and n-step windows at sample time. For a sampled slot holding step
    ``t`` whose window has ``m = min(update_horizon, steps to the episode's end)`` steps::

        reward      = sum_{j<m} gamma^j r_{t+j}
        next_state  = state at t+m   (its newest frame is a zero placeholder if t+m-1 is terminal)
        terminal    = whether step t+m-1 is terminal
        next_action = action at t+m, next_reward = reward at t+m, next_<x> = x at t+m
                      (zeros when the window reached a terminal: undefined in ReAgent)

    Invariants: ``add_count`` counts every row written, padding rows included; slot
    ``add_count % replay_capacity`` is the cursor; a slot is valid exactly as ReAgent marks it
    (see :meth:`add`) unless :meth:`set_index_valid_status` changed it; a slot valid by
    ``add``'s marks holds one episode's steps in the slots 0.1 reads for it.

    Cost: :meth:`add` is O(stack_size + update_horizon) bookkeeping plus one core ``add``;
    sampling ``B`` transitions is O(B * (stack_size + update_horizon)) gathers in the core.

    Args:
        observation_shape: Shape of one observation (a frame), a tuple (an int ``n``, as
            later ReAgent versions take it, is ``(n,)``). ``None`` (omitted):
            ReAgent's later API; every element whose shape and dtype are not given is
            inferred from the first :meth:`add`, extras from its other keyword arguments.
        stack_size: Number of frames in a state (stacked on the last axis).
        replay_capacity: Rows in the ring (padding rows included); at least
            ``update_horizon + stack_size``.
        batch_size: Default batch size of :meth:`sample_transition_batch`.
        return_everything_as_stack: Also stack action, reward and extras over the
            ``stack_size`` steps ending at each sampled step (``reward`` is then raw rewards;
            ``terminal`` and ``step`` stay ``(B, 1)``).
        return_as_timeline_format: Return ``reward``, ``next_state``, ``next_action``,
            ``next_reward`` and ``next_<x>`` as lists (one tensor per transition) of the ``m``
            per-step values of the window, like ReAgent's timeline output.
        update_horizon: ``n`` of n-step returns.
        gamma: Discount in ``[0, 1]``.
        max_sample_attempts: Draws that may be rejected (slot not valid here) before sampling
            switches to an exact draw among valid slots (prioritized: before it fails).
        extra_storage_types: ``ReplayElement``\\ s of extra per-step contents.
        observation_dtype: Observation dtype (default ``np.uint8``).
        action_shape: Action shape (default ``()``, a scalar).
        action_dtype: Action dtype (default ``np.int32``).
        reward_shape: Reward shape (default ``()``, a scalar).
        reward_dtype: Reward dtype (default ``np.float32``).
        terminal_dtype: reagent 0.1's dtype of the stored terminal flags (default ``np.uint8``;
            keyword only, as the seed's version has no such argument). Sampled ``terminal``
            stays a bool tensor.
        seed: rlreplay extension: seed of the buffer's own NumPy ``Generator``. ``None`` (as in
            ReAgent): reagent 0.1's draws on its generators, NumPy's global one (uniform) or
            Python's ``random`` (prioritized), so the same seeds and adds give 0.1's batches.

    Raises:
        AssertionError: ``observation_shape`` is neither a tuple nor an int (also
            :class:`rlreplay.ConfigError`).
        ValueError: An argument out of range, or the timeline format with
            ``update_horizon == 1`` (:class:`rlreplay.ConfigError`).

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.reagent import ReplayBuffer
        >>> buf = ReplayBuffer(observation_shape=(3,), stack_size=1, replay_capacity=100,
        ...                    batch_size=4, update_horizon=2, observation_dtype=np.float32)
        >>> for t in range(10):
        ...     buf.add(np.full(3, t, np.float32), t % 2, 1.0, t == 9)
        >>> batch = buf.sample_transition_batch()
        >>> batch.state.shape, batch.reward.shape, batch.terminal.dtype
        (torch.Size([4, 3]), torch.Size([4, 1]), torch.bool)
    """

    _prioritized: ClassVar[bool] = False

    def __init__(
        self,
        observation_shape: tuple[int, ...] | int | None = None,
        stack_size: int = 1,
        replay_capacity: int = 10000,
        batch_size: int = 1,
        return_everything_as_stack: bool = False,
        return_as_timeline_format: bool = False,
        update_horizon: int = 1,
        gamma: float = 0.99,
        max_sample_attempts: int = 1000,
        extra_storage_types: list[shape_type] | None = None,
        observation_dtype: Any = None,
        action_shape: tuple[int, ...] | None = None,
        action_dtype: Any = None,
        reward_shape: tuple[int, ...] | None = None,
        reward_dtype: Any = None,
        *,
        terminal_dtype: Any = None,
        seed: int | None = None,
    ) -> None:
        # ReAgent's first check: assert isinstance(observation_shape, tuple).
        self._inferring = observation_shape is None
        if not self._inferring:
            _args.observation_shape(observation_shape)
        # ReAgent takes stack_size 0 (empty stacks), batch_size 0 (empty batches) and
        # max_sample_attempts 0 (no redraw); update_horizon 0 makes its sampling fail.
        self._stack_size = _args.positive_int("stack_size", stack_size, 0)
        self._replay_capacity = _args.positive_int("replay_capacity", replay_capacity)
        self._batch_size = _args.positive_int("batch_size", batch_size, 0)
        self._update_horizon = _args.positive_int("update_horizon", update_horizon, 0)
        self._max_sample_attempts = _args.positive_int(
            "max_sample_attempts", max_sample_attempts, 0
        )
        if self._replay_capacity < self._update_horizon + self._stack_size:
            raise ConfigError(
                "There is not enough capacity to cover update_horizon and stack_size: "
                f"replay_capacity={replay_capacity} < update_horizon + stack_size = "
                f"{self._update_horizon + self._stack_size}"
            )
        if return_as_timeline_format and self._update_horizon <= 1:
            raise ConfigError(
                "Pointless to return as timeline format when update_horizon "
                f"({update_horizon}) is 1."
            )
        self._gamma = float(gamma)
        self._return_everything_as_stack = bool(return_everything_as_stack)
        self._return_as_timeline_format = bool(return_as_timeline_format)
        self._cumulative_discount_vector = np.array(
            [math.pow(self._gamma, j) for j in range(self._update_horizon)], np.float32
        )
        self._seed = _args.seed(seed)
        self._declared = _elements.declare(
            observation_shape,
            extra_storage_types,
            self._reserved_names(),
            observation_dtype=observation_dtype,
            action_shape=action_shape,
            action_dtype=action_dtype,
            reward_shape=reward_shape,
            reward_dtype=reward_dtype,
            terminal_dtype=terminal_dtype,
        )
        # An inferring buffer holds placeholders for the elements until its first add.
        elements = _elements.declared_elements(self._declared)
        _elements.setup(self, elements, frozenset(), final=not self._inferring)
        self._reset()

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def create_from_env(
        cls,
        env: Any,
        *,
        replay_memory_size: int,
        batch_size: int,
        stack_size: int = 1,
        store_log_prob: bool = True,
        **kwargs: Any,
    ) -> ReplayBuffer:
        """A buffer shaped for a gymnasium (or gym) env.

        The observation space must be a ``Box`` or ``Discrete`` space, the action space a
        ``Box`` or ``Discrete`` space (its shape and dtype are used; ``Discrete`` gives a scalar
        action). With ``store_log_prob`` an extra ``ReplayElement("log_prob", (), np.float32)``
        is stored. Reward is a float32 scalar.

        Args:
            env: The environment (only ``observation_space`` and ``action_space`` are read).
            replay_memory_size: ``replay_capacity``.
            batch_size: Default batch size.
            stack_size: Frames per state.
            store_log_prob: Store the action's log-probability as extra ``log_prob``.
            **kwargs: Any other constructor argument (``update_horizon``, ``seed``, ...).

        Raises:
            ValueError: An unsupported space (:class:`rlreplay.ConfigError`).
        """
        extra = list(kwargs.pop("extra_storage_types", None) or [])
        if store_log_prob:
            extra.append(ReplayElement("log_prob", (), np.float32))
        return cls(
            stack_size=stack_size,
            replay_capacity=replay_memory_size,
            batch_size=batch_size,
            extra_storage_types=extra,
            **_args.env_elements(env),
            **kwargs,
        )

    def _reserved_names(self) -> set[str]:
        names = {"observation", "action", "reward", "terminal", "state", "indices"}
        names |= {"sampling_probabilities", "priority"} if self._prioritized else set()
        return names | {"next_" + n for n in ("state", "action", "reward")}

    def _core_fields(self) -> dict[str, Field]:
        fields = {
            "obs": Field(self._observation_shape, self._observation_dtype, observation=True),
            "action": Field(self._action_shape, self._action_dtype),
            "reward": Field(self._reward_shape, self._reward_dtype),
        }
        for e in self._extra_storage_types:
            fields[EXTRA + e.name] = Field(e.shape, e.type)
        return fields

    def _make_core(self) -> CoreReplayBuffer:
        return CoreReplayBuffer(self._core_capacity(), self._core_fields(), **self._core_args())

    def _core_capacity(self) -> int:
        """The core's capacity: ``replay_capacity``, or more where ``stack_size`` or
        ``update_horizon`` is 0 (the core still stacks one frame and reads one step)."""
        return max(self._replay_capacity, max(self._update_horizon, 1) + max(self._stack_size, 1))

    def _core_args(self) -> dict[str, Any]:
        return {
            "n_step": max(self._update_horizon, 1),  # 0: built, but sampling raises (0.1)
            "gamma": self._gamma,
            "frame_stack": max(self._stack_size, 1),  # 0: stacks emptied on return
            "stack_pad": "zero",
            # Without seed= the draws come from NumPy's / Python's global generators (_draws),
            # not from the core's, which then needs no seed of its own.
            "seed": 0 if self._seed is None else self._seed,
            # next_reward too: the reward at t+m, 0 where the window reached a terminal (the
            # only way an episode ends here), as ReAgent's next_reward of a batch
            "next_fields": (
                "action",
                "reward",
                *(EXTRA + e.name for e in self._extra_storage_types),
            ),
        }

    def _reset(self) -> None:
        """Empty the buffer: a fresh core (same seed) and fresh slot bookkeeping."""
        if self._initialized:
            self._core = self._make_core()
        seed = 0 if self._seed is None else self._seed
        self._rng = np.random.default_rng([seed, 1])  # the exact fallback draw only
        self._reset_ring()

    # ------------------------------------------------------------------ signatures
    def get_storage_signature(self) -> list[shape_type]:
        """Returns a default list of elements to be stored in this replay memory.

        Returns:
            ``observation``, ``action``, ``reward``, ``terminal`` (uint8, or as inferred) and
            the extras; empty for a buffer that infers them before its first add.
        """
        if not self._initialized:
            return []
        # made once per set of elements (_elements.setup forgets it): add reads it twice
        kept = self.__dict__.get("_storage_signature")
        if kept is None:
            kept = self._storage_signature = (
                ReplayElement("observation", self._observation_shape, self._observation_dtype),
                ReplayElement("action", self._action_shape, self._action_dtype),
                ReplayElement("reward", self._reward_shape, self._reward_dtype),
                ReplayElement("terminal", (), self._terminal_dtype),
                *self._extra_storage_types,
            )
        return list(kept)  # a new list each call, as 0.1's (a caller may extend it)

    def get_add_args_signature(self) -> list[shape_type]:
        """The signature of the add function: the storage signature (in this class)."""
        return self.get_storage_signature()

    def get_transition_elements(self, batch_size: int | None = None) -> list[Any]:
        """Returns a 'type signature' for :meth:`sample_transition_batch`.

        Elements, in order: ``state``, ``action``, ``reward``, ``next_state``, ``next_action``,
        ``next_reward``, ``terminal``, ``indices``, ``step`` (the window length ``m``), then
        ``<x>``, ``next_<x>`` for each extra (and ``sampling_probabilities`` when prioritized).
        Shapes are the nominal ones, ``(batch_size, *shape)`` with a trailing ``stack_size``
        axis on states (and with ``return_everything_as_stack`` on action, reward and extras;
        ``terminal`` and ``step`` stay ``(batch_size,)``); the returned tensors drop a trailing
        stack axis of size 1 and turn ``(batch_size,)`` into ``(batch_size, 1)``.

        A buffer built without ``observation_shape`` answers as ReAgent's later buffer does:
        the element *names* only (before its first add, without extras).

        Args:
            batch_size: Number of transitions; ``None`` uses the default batch size.
        """
        b = self._batch_size if batch_size is None else batch_size
        specs = self._transition_specs(b)
        return [e.name for e in specs] if self._inferring else specs

    def _transition_specs(self, b: int) -> list[shape_type]:
        return _elements.transition_specs(self, b)

    # ------------------------------------------------------------------ writing
    def add(
        self, observation: Any, action: Any, reward: Any, terminal: Any, *args: Any, **kwargs: Any
    ) -> None:
        """Adds a transition to the replay memory.

        The next observation of a transition is the observation added next, so it is not
        passed. The first add of an episode (the buffer is empty or the previous add was
        terminal) first writes ``stack_size - 1`` zero padding rows. Validity, as ReAgent marks
        it: the new slot is invalid; the slot ``update_horizon`` rows back in the same episode
        becomes valid; the ``stack_size - 1`` slots past the cursor become invalid; a terminal
        step makes the last ``min(update_horizon, episode length)`` slots valid. When the ring
        is full the oldest row is overwritten.

        Values are stored as ReAgent's arrays store them, with NumPy's assignment casts
        (float64 zeros into a uint8 observation, a float action into int32). A buffer built
        without ``observation_shape`` infers its elements from its first add (the keys
        beyond the four are its extras) and then asserts, as ReAgent's later buffer does,
        that every value it was left to infer keeps the first value's shape and dtype.

        Args:
            observation: Array of shape ``observation_shape``.
            action: The action (``action_shape``).
            reward: The reward (``reward_shape``).
            terminal: Whether the transition was terminal (``1``/``True``) or not.
            *args: Extra contents, in the order of ``extra_storage_types``.
            **kwargs: Extra contents by name (instead of positionally).

        Raises:
            ValueError: Wrong number of arguments, or a wrong shape (:class:`rlreplay.ShapeError`).
            KeyError: An extra given by a name that is not stored (:class:`rlreplay.FieldError`).
            AssertionError: Of an inferred element, a value of another shape or dtype than
                at the first add (also a :class:`rlreplay.ShapeError`).
        """
        given = (observation, action, reward, terminal, *args)
        fresh = not self._initialized
        if fresh:
            self._initialize(given[:4], kwargs)
        try:
            kwargs = self._add_kwargs(kwargs)
            signature = self.get_add_args_signature()
            values = _args.parse_add_args(signature, given, kwargs, self._inferred)
            step = self._convert_step(values)  # checks everything before anything is written
        except Exception:
            if fresh:  # a refused first add leaves the elements to infer, as before it
                elements = _elements.declared_elements(self._declared)
                _elements.setup(self, elements, frozenset(), final=False)
            raise
        if self.is_empty() or self._episode_ended:
            for _ in range(self._stack_size - 1):
                _slots.write_padding(self)
        _slots.write_step(self, step, values)

    def _check_add_types(self, *args: Any, **kwargs: Any) -> None:
        """ReAgent's check of an add's arguments (count and shapes), writing nothing.

        Raises:
            ValueError: Wrong number of arguments ("Add expects ...") or a wrong shape.
            KeyError: An unknown element name.
        """
        kwargs = self._add_kwargs(kwargs)
        signature = self.get_add_args_signature()
        values = _args.parse_add_args(signature, args, kwargs, self._inferred)
        self._convert_step(values)

    def _initialize(self, values: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Infer the elements from a first add and build the core (ReAgent's later API)."""
        elements, inferred = _elements.infer(self, values, kwargs)
        _elements.setup(self, elements, inferred, final=True)
        self._core = self._make_core()
        self._terminal_rows = np.zeros(self._replay_capacity, self._terminal_dtype)

    def _add_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Hook: the keyword arguments of an add as the signature takes them."""
        return kwargs

    def _convert_step(self, values: Sequence[Any]) -> dict[str, Any]:
        """Core keyword arguments for one step, cast as ReAgent's arrays cast them."""
        return _args.convert_step(
            self._core.schema,
            self.get_storage_signature(),
            self._extra_storage_types,
            self._blank_obs,
            values,
        )

    def _on_step_written(self, new_id: int, values: Sequence[Any]) -> None:
        """Hook: a real step got core id ``new_id`` (the prioritized buffer sets its priority)."""

    # ------------------------------------------------------------------ sampling
    def sample_index_batch(self, batch_size: int) -> torch.Tensor:
        """Returns a batch of valid indices sampled uniformly (with replacement).

        Draws come from the core's uniform sampler; a draw whose slot is not valid here is
        redrawn, and after ``max_sample_attempts`` redraws the rest are drawn exactly among the
        valid slots. The result is uniform over the valid slots either way.

        Args:
            batch_size: Number of indices.

        Returns:
            1-D int64 tensor of slot indices.

        Raises:
            RuntimeError: There are no valid indices to sample.
        """
        import torch

        return torch.from_numpy(
            _slots.sample_slots(
                self, _elements.batch_size_of(self, batch_size, "sample_index_batch")
            )
        )

    def _global_draw(self, batch_size: int) -> Array:
        """Slots drawn as reagent 0.1 draws them (a buffer built without ``seed=``)."""
        return _draws.uniform(self, batch_size)

    def _sample_exhausted(self, count: int, batch_size: int) -> Array:
        """Draw ``count`` slots exactly among the valid slots (``O(replay_capacity)``).

        Rejection left each accepted draw uniform over the valid slots the core can draw,
        which are all the valid slots while none was set valid by the user; finishing with
        exact draws over them keeps the whole batch uniform, as 0.1's law.
        """
        valid = np.flatnonzero(self._is_valid)
        if valid.size == 0:
            raise RuntimeError(
                f"Cannot sample {batch_size} since there are no valid indices so far."
            )
        out: Array = valid[self._rng.integers(0, valid.size, size=count)]
        return out

    def _forced_draw(self, batch_size: int) -> Array:
        """Seeded draws while a slot set valid by hand is valid: uniform over the valid slots."""
        return self._sample_exhausted(batch_size, batch_size)

    def load(self, checkpoint_dir: Any, suffix: Any) -> None:
        """Restore the buffer from the files :meth:`save` (or ReAgent) wrote (see ``_persist``);
        valid slots whose rows the core cannot give (set valid by hand) are known as such."""
        super().load(checkpoint_dir, suffix)
        if self._initialized and self._update_horizon > 0:
            every = np.arange(self._replay_capacity)
            self._forced[:] = self._is_valid & ~_slotread.intact(self, every)
            self._num_forced = int(self._forced.sum())

    def sample_transition_batch(self, batch_size: int | None = None, indices: Any = None) -> Any:
        """Returns a batch of transitions (including any extra contents) as a namedtuple.

        Elements and their order are those of :meth:`get_transition_elements`. Tensors are
        reshaped: ``state`` is 2-D (``(B, *observation_shape)``) unless ``stack_size > 1``, when
        frames are stacked on a last axis; scalar values come as ``(B, 1)``. ``terminal`` is a
        bool tensor, ``indices`` int64. When the transition is terminal ``next_state`` has
        undefined contents (here: the episode's frames with a zero newest frame).

        ``indices`` (the slots sampled) are valid only until the next :meth:`add`.

        Args:
            batch_size: Number of transitions; ``None`` uses the default, also with ``indices``.
            indices: Slots to return, as a tensor, array or list; ``None`` samples them
                uniformly with :meth:`sample_index_batch`.

        Any slot may be named, valid or not, and every row is reagent 0.1's read of the slots,
        whatever they hold (padding, rows never written as zeros, stale rows past the cursor).

        Raises:
            IndexError: An index outside ``[-replay_capacity, replay_capacity)``.
            AssertionError: ``batch_size`` (or the default) differs from ``len(indices)``.
            RuntimeError: No valid index to sample (``indices=None``).
            NotImplementedError: ``return_everything_as_stack`` with ``update_horizon > 1``
                (without the timeline format), after drawing the indices, as 0.1.
        """
        slots, given = _slots.choose_slots(self, batch_size, indices)
        _slots.refuse_unsampleable(self)  # after the draw, as 0.1
        check = indices is not None or self._num_forced > 0  # drawn by add's marks: intact
        batch = _slots.gather(self, slots, check=check)._replace(given=given)
        arrays = self._transition_arrays(batch)
        names = self._batch_type._fields  # the elements of _transition_specs, in order
        _assembly.warn_complex(self._complex_store, names)
        return self._batch_type(*[_assembly.to_torch(arrays[name]) for name in names])

    def sample_transition_batch_tensor(
        self, batch_size: int | None = None, indices: Any = None
    ) -> Any:
        """reagent 0.1's name of :meth:`sample_transition_batch`, which returns tensors here.

        0.1's ``sample_transition_batch`` returned NumPy arrays and this method their tensors
        (state 2-D unless ``stack_size > 1``, scalars ``(B, 1)``); the seed's version returns
        those tensors from ``sample_transition_batch`` itself.
        """
        return self.sample_transition_batch(batch_size=batch_size, indices=indices)

    def sample_all_valid_transitions(self) -> Any:
        """Every valid slot once, in slot order (as :meth:`sample_transition_batch`)."""
        valid = np.flatnonzero(self._is_valid)
        return self.sample_transition_batch(batch_size=int(valid.size), indices=valid)

    # ------------------------------------------------------------------ assembling
    def _transition_arrays(self, batch: _Batch) -> dict[str, Any]:
        """Element name -> NumPy array (or list of arrays in timeline format)."""
        if batch.raw is None:  # every row from the core
            return _assembly.transition_arrays(self, batch)
        return _slotread.mixed_arrays(self, batch)  # some rows read from the slots

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(observation_shape={self._observation_shape}, "
            f"stack_size={self._stack_size}, replay_capacity={self._replay_capacity}, "
            f"add_count={self._add_count}, size={self.size})"
        )
