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
                              ``stack_pad="zero"`` (what the padding rows give)
``action``, ``reward``        fields ``action``, ``reward`` (declared shapes and dtypes)
extra storage ``name``        field ``extra_<name>``
``terminal``                  ``terminated`` with a zero *placeholder* final observation (ReAgent
                              takes no next observation; its ``next_state`` after a terminal is
                              undefined)
``update_horizon``, ``gamma`` ``n_step``, ``gamma``
``next_action``/``next_<x>``  ``next_fields=("action", "extra_<x>", ...)``: the field at ``t+m``
padding rows                  not stored: the slot maps to no core id
slot ``s``                    core id ``_slot_id[s]`` (``-1`` for padding / never written)
uniform draws                 ``core.sample`` (draws of slots not valid here are redrawn)
stacks of other fields,       ``core.get_sequences`` runs stacked by the core's
timeline windows              ``assemble.stack_frames``
============================  =================================================================

The core keeps ``replay_capacity`` real steps, at least as many as the ring holds (the ring
also holds padding rows), so every step a slot names is still stored there and every valid slot
is one the core can assemble.
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from rlreplay.assemble import stack_frames
from rlreplay.batch import Batch
from rlreplay.buffer import ReplayBuffer as CoreReplayBuffer
from rlreplay.errors import (
    CheckpointError,
    ConfigError,
    EmptyBufferError,
    FieldError,
    InvalidIdError,
    ShapeError,
)
from rlreplay.spec import Field

if TYPE_CHECKING:
    import torch

__all__ = [
    "CHECKPOINT_DURATION",
    "STORE_FILENAME_PREFIX",
    "NotFoundError",
    "ReplayBuffer",
    "ReplayElement",
    "shape_type",
]

Array = np.ndarray[Any, Any]

shape_type = collections.namedtuple("shape_type", ["name", "shape", "type"])
#: ``ReplayElement(name, shape, type)``: one stored or returned element (ReAgent's alias).
ReplayElement = shape_type

#: Prefix of the checkpoint files of stored arrays (cannot collide with attribute names).
STORE_FILENAME_PREFIX = "$store$_"
#: A checkpoint file is deleted when one this many iterations newer is written.
CHECKPOINT_DURATION = 4

_namedtuple: Any = collections.namedtuple  # element names are known only at run time
_EXTRA = "extra_"  # prefix of extra storage fields in the core (never clashes with its names)


class NotFoundError(CheckpointError, FileNotFoundError):
    """Not all files of a checkpoint were found (``load``).

    Subclasses :class:`rlreplay.CheckpointError` (a ``ValueError``) and ``FileNotFoundError``.
    """


class _Batch(NamedTuple):
    """Core data for a batch of slots (internal)."""

    slots: Array
    ids: Array
    core: Batch


class ReplayBuffer:
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
    (see :meth:`add`) unless :meth:`set_index_valid_status` changed it; every valid slot holds a
    step the core can assemble.

    Cost: :meth:`add` is O(stack_size + update_horizon) bookkeeping plus one core ``add``;
    sampling ``B`` transitions is O(B * (stack_size + update_horizon)) gathers in the core.

    Args:
        observation_shape: Shape of one observation (a frame).
        stack_size: Number of frames in a state (stacked on the last axis).
        replay_capacity: Rows in the ring (padding rows included); at least
            ``update_horizon + stack_size``.
        batch_size: Default batch size of :meth:`sample_transition_batch`.
        return_everything_as_stack: Also stack action, reward, terminal and extras over the
            ``stack_size`` steps ending at each sampled step (``reward`` is then raw rewards).
        return_as_timeline_format: Return ``reward``, ``next_state``, ``next_action``,
            ``next_reward`` and ``next_<x>`` as lists (one tensor per transition) of the ``m``
            per-step values of the window, like ReAgent's timeline output.
        update_horizon: ``n`` of n-step returns.
        gamma: Discount in ``[0, 1]``.
        max_sample_attempts: Draws that may be rejected (slot not valid here) before sampling
            switches to an exact draw among valid slots (prioritized: before it fails).
        extra_storage_types: ``ReplayElement``\\ s of extra per-step contents.
        observation_dtype: Observation dtype.
        action_shape: Action shape (``()``: a scalar).
        action_dtype: Action dtype.
        reward_shape: Reward shape (``()``: a scalar).
        reward_dtype: Reward dtype.
        seed: rlreplay extension: seed of the sampler. ``None`` draws one from NumPy's global
            random state, so ``np.random.seed`` before construction makes sampling repeatable.

    Raises:
        ValueError: An argument out of range (:class:`rlreplay.ConfigError`).

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
        observation_shape: tuple[int, ...],
        stack_size: int,
        replay_capacity: int,
        batch_size: int,
        return_everything_as_stack: bool = False,
        return_as_timeline_format: bool = False,
        update_horizon: int = 1,
        gamma: float = 0.99,
        max_sample_attempts: int = 1000,
        extra_storage_types: list[shape_type] | None = None,
        observation_dtype: Any = np.uint8,
        action_shape: tuple[int, ...] = (),
        action_dtype: Any = np.int32,
        reward_shape: tuple[int, ...] = (),
        reward_dtype: Any = np.float32,
        *,
        seed: int | None = None,
    ) -> None:
        self._stack_size = _positive_int("stack_size", stack_size)
        self._replay_capacity = _positive_int("replay_capacity", replay_capacity)
        self._batch_size = _positive_int("batch_size", batch_size)
        self._update_horizon = _positive_int("update_horizon", update_horizon)
        self._max_sample_attempts = _positive_int("max_sample_attempts", max_sample_attempts)
        if self._replay_capacity < self._update_horizon + self._stack_size:
            raise ConfigError(
                "There is not enough capacity to cover update_horizon and stack_size: "
                f"replay_capacity={replay_capacity} < update_horizon + stack_size = "
                f"{self._update_horizon + self._stack_size}"
            )
        self._gamma = float(gamma)
        self._observation_shape = _shape("observation_shape", observation_shape)
        self._observation_dtype = np.dtype(observation_dtype)
        self._action_shape = _shape("action_shape", action_shape)
        self._action_dtype = np.dtype(action_dtype)
        self._reward_shape = _shape("reward_shape", reward_shape)
        self._reward_dtype = np.dtype(reward_dtype)
        self._terminal_dtype = np.dtype(np.uint8)
        self._return_everything_as_stack = bool(return_everything_as_stack)
        self._return_as_timeline_format = bool(return_as_timeline_format)
        self._extra_storage_types = _extras(extra_storage_types, self._reserved_names())
        self._state_shape = (*self._observation_shape, self._stack_size)
        self._cumulative_discount_vector = np.array(
            [math.pow(self._gamma, j) for j in range(self._update_horizon)], np.float32
        )
        if seed is None:
            # Draw the seed from NumPy's global state: np.random.seed() then repeats samples,
            # as ReAgent users expect from seeding their process.
            seed = int(np.random.randint(0, 2**31 - 1))  # noqa: NPY002
        elif isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ConfigError(f"seed: expected a non-negative int or None, got {seed!r}")
        self._seed = int(seed)
        self._blank_obs = np.zeros(self._observation_shape, self._observation_dtype)
        self._batch_type: Any = _namedtuple(
            "filler", [e.name for e in self.get_transition_elements()]
        )
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
        obs_space, action_space = env.observation_space, env.action_space
        obs_shape, obs_dtype = _space_shape_dtype("observation_space", obs_space)
        action_shape, action_dtype = _space_shape_dtype("action_space", action_space)
        extra = list(kwargs.pop("extra_storage_types", None) or [])
        if store_log_prob:
            extra.append(ReplayElement("log_prob", (), np.float32))
        return cls(
            observation_shape=obs_shape,
            stack_size=stack_size,
            replay_capacity=replay_memory_size,
            batch_size=batch_size,
            observation_dtype=obs_dtype,
            action_shape=action_shape,
            action_dtype=action_dtype,
            reward_shape=(),
            reward_dtype=np.float32,
            extra_storage_types=extra,
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
            fields[_EXTRA + e.name] = Field(e.shape, e.type)
        return fields

    def _make_core(self) -> CoreReplayBuffer:
        return CoreReplayBuffer(self._replay_capacity, self._core_fields(), **self._core_args())

    def _core_args(self) -> dict[str, Any]:
        return {
            "n_step": self._update_horizon,
            "gamma": self._gamma,
            "frame_stack": self._stack_size,
            "stack_pad": "zero",
            "seed": self._seed,
            "next_fields": ("action", *(_EXTRA + e.name for e in self._extra_storage_types)),
        }

    def _reset(self) -> None:
        """Empty the buffer: a fresh core (same seed) and fresh slot bookkeeping."""
        cap = self._replay_capacity
        self._core = self._make_core()
        self._rng = np.random.default_rng([self._seed, 1])  # the exact fallback draw only
        self._add_count = 0
        self._slot_id = np.full(cap, -1, np.int64)  # core id held by each slot
        self._id_slot = np.full(cap, -1, np.int64)  # slot of core id i, at i % cap
        self._is_valid = np.zeros(cap, np.bool_)
        self._num_valid_indices = 0
        self._num_transitions_in_current_episode = 0
        self._episode_ended = True  # the next add starts an episode (with padding rows)

    # ------------------------------------------------------------------ counters
    @property
    def add_count(self) -> int:
        """Rows written so far, including the padding rows at episode starts."""
        return self._add_count

    def cursor(self) -> int:
        """Index to the location where the next transition will be written."""
        return self._add_count % self._replay_capacity

    def is_empty(self) -> bool:
        """Is the Replay Buffer empty?"""
        return self._add_count == 0

    def is_full(self) -> bool:
        """Is the Replay Buffer full?"""
        return self._add_count >= self._replay_capacity

    @property
    def size(self) -> int:
        """Number of valid (sampleable) slots."""
        return self._num_valid_indices

    @property
    def invalid_range(self) -> Array:
        """Dopamine's slots around the cursor: ``cursor - n .. cursor + stack_size - 1``."""
        cap, n = self._replay_capacity, self._update_horizon
        return (self.cursor() - n + np.arange(self._stack_size + n)) % cap

    def is_valid_transition(self, index: int) -> bool:
        """Whether slot ``index`` is valid (sampleable)."""
        return bool(self._is_valid[self._slot_index(index)])

    def set_index_valid_status(self, idx: int, is_valid: bool) -> None:
        """Mark slot ``idx`` valid or not (for conditional sampling); keeps :attr:`size` right.

        A slot marked valid that holds no transition the core can assemble (a padding row, a
        slot never written, a window not known yet) counts in :attr:`size` but is never drawn,
        and asking for it explicitly raises ``ValueError``.
        """
        idx = self._slot_index(idx)
        was = bool(self._is_valid[idx])
        if is_valid and not was:
            self._num_valid_indices += 1
        elif was and not is_valid:
            self._num_valid_indices -= 1
        self._is_valid[idx] = bool(is_valid)

    # ------------------------------------------------------------------ signatures
    def get_storage_signature(self) -> list[shape_type]:
        """Returns a default list of elements to be stored in this replay memory.

        Returns:
            ``observation``, ``action``, ``reward``, ``terminal`` (uint8) and the extras.
        """
        return [
            ReplayElement("observation", self._observation_shape, self._observation_dtype),
            ReplayElement("action", self._action_shape, self._action_dtype),
            ReplayElement("reward", self._reward_shape, self._reward_dtype),
            ReplayElement("terminal", (), self._terminal_dtype),
            *self._extra_storage_types,
        ]

    def get_add_args_signature(self) -> list[shape_type]:
        """The signature of the add function: the storage signature (in this class)."""
        return self.get_storage_signature()

    def get_transition_elements(self, batch_size: int | None = None) -> list[shape_type]:
        """Returns a 'type signature' for :meth:`sample_transition_batch`.

        Elements, in order: ``state``, ``action``, ``reward``, ``next_state``, ``next_action``,
        ``next_reward``, ``terminal``, ``indices``, then ``<x>``, ``next_<x>`` for each extra.
        Shapes are the nominal ones, ``(batch_size, *shape)`` with a trailing ``stack_size``
        axis on states (and on everything with ``return_everything_as_stack``); the returned
        tensors drop a trailing stack axis of size 1 and turn ``(batch_size,)`` into
        ``(batch_size, 1)``.

        Args:
            batch_size: Number of transitions; ``None`` uses the default batch size.
        """
        b = self._batch_size if batch_size is None else batch_size
        k = (self._stack_size,) if self._return_everything_as_stack else ()
        a = (b, *self._action_shape, *k)
        r = (b, *self._reward_shape, *k)
        elements = [
            ReplayElement("state", (b, *self._state_shape), self._observation_dtype),
            ReplayElement("action", a, self._action_dtype),
            ReplayElement("reward", r, self._reward_dtype),
            ReplayElement("next_state", (b, *self._state_shape), self._observation_dtype),
            ReplayElement("next_action", a, self._action_dtype),
            ReplayElement("next_reward", r, self._reward_dtype),
            ReplayElement("terminal", (b, *k), np.dtype(np.bool_)),
            ReplayElement("indices", (b,), np.dtype(np.int64)),
        ]
        for e in self._extra_storage_types:
            for prefix in ("", "next_"):
                elements.append(ReplayElement(prefix + e.name, (b, *e.shape, *k), e.type))
        return elements

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
            TypeError: A value that cannot be cast safely (:class:`rlreplay.DTypeError`).
        """
        values = self._parse_add_args((observation, action, reward, terminal, *args), kwargs)
        step = self._convert_step(values)  # validates everything before anything is written
        if self.is_empty() or self._episode_ended:
            for _ in range(self._stack_size - 1):
                self._write_padding()
        self._write_step(step, values)

    def _parse_add_args(self, given: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The add arguments in signature order, with ReAgent's count and shape checks."""
        signature = self.get_add_args_signature()
        if len(given) + len(kwargs) != len(signature):
            raise ShapeError(
                f"Add expects {len(signature)} elements ({[e.name for e in signature]}), "
                f"received {len(given) + len(kwargs)}"
            )
        values = list(given)
        for element in signature[len(given) :]:
            if element.name not in kwargs:
                raise FieldError(f"add: missing {element.name!r}; given by name: {sorted(kwargs)}")
            values.append(kwargs[element.name])
        for value, element in zip(values, signature, strict=True):
            if element.name == "priority" and value is None:
                continue
            shape = np.shape(value)
            if shape != tuple(element.shape):
                raise ShapeError(
                    f"{element.name}: arg has shape {shape}, expected {tuple(element.shape)}"
                )
        return values

    def _convert_step(self, values: Sequence[Any]) -> dict[str, Any]:
        """Core keyword arguments for one step, converted (and so validated) by its schema."""
        obs, action, reward, terminal = values[:4]
        done = bool(np.asarray(terminal).item())
        step: dict[str, Any] = {
            "obs": obs,
            "action": action,
            "reward": reward,
            "terminated": done,
            "truncated": False,
        }
        for element, value in zip(self._extra_storage_types, values[4:], strict=False):
            step[_EXTRA + element.name] = value
        if done:
            # ReAgent has no next observation: a terminal's next_state is undefined there. The
            # core needs a final observation, so it gets this zero placeholder.
            step["next_obs"] = self._blank_obs
        schema = self._core.schema
        return {name: schema.convert(name, v, ()) for name, v in step.items()}

    def _write_padding(self) -> None:
        """Write one zero padding row: counted in add_count, stored nowhere."""
        cur = self.cursor()
        self._release(cur)
        self._slot_id[cur] = -1
        self.set_index_valid_status(cur, False)
        self._add_count += 1

    def _write_step(self, step: dict[str, Any], values: Sequence[Any]) -> None:
        """Store one real step in the core and mark validity exactly as ReAgent's ``add``."""
        cap, n = self._replay_capacity, self._update_horizon
        new_id = int(self._core.add(**step)[0])
        if self._episode_ended:
            self._num_transitions_in_current_episode = 0
        cur = self.cursor()
        self.set_index_valid_status(cur, False)
        if self._num_transitions_in_current_episode >= n:
            self.set_index_valid_status((cur - n) % cap, True)
        self._release(cur)
        self._slot_id[cur] = new_id
        self._id_slot[new_id % cap] = cur
        self._on_step_written(new_id, values)
        self._add_count += 1
        self._num_transitions_in_current_episode += 1
        done = bool(step["terminated"])
        self._episode_ended = done
        # The stacks of the oldest stack_size - 1 slots would read the row just overwritten.
        for i in range(self._stack_size - 1):
            self.set_index_valid_status((self.cursor() + i) % cap, False)
        if done:
            for i in range(min(n, self._num_transitions_in_current_episode)):
                self.set_index_valid_status((self.cursor() - i - 1) % cap, True)

    def _release(self, slot: int) -> None:
        """Forget the step slot ``slot`` held (it is being overwritten)."""
        old = int(self._slot_id[slot])
        if old >= 0 and self._id_slot[old % self._replay_capacity] == slot:
            self._id_slot[old % self._replay_capacity] = -1

    def _on_step_written(self, new_id: int, values: Sequence[Any]) -> None:
        """Hook: a real step got core id ``new_id`` (the prioritized buffer sets its priority)."""

    # ------------------------------------------------------------------ slots and ids
    def _slot_index(self, index: Any) -> int:
        arr = np.asarray(index.cpu() if hasattr(index, "cpu") else index)
        if arr.size != 1 or arr.dtype.kind not in "iu":
            raise InvalidIdError(f"index: expected one int slot, got {index!r}")
        i = int(arr.reshape(-1)[0])
        if not 0 <= i < self._replay_capacity:
            raise InvalidIdError(
                f"index: expected a slot in [0, {self._replay_capacity}), got {index!r}"
            )
        return i

    def _as_slots(self, indices: Any) -> Array:
        """Slot numbers from a tensor/array/list of any shape, flattened to int64."""
        arr = np.asarray(indices.cpu() if hasattr(indices, "cpu") else indices).reshape(-1)
        if arr.size and arr.dtype.kind not in "iu":
            raise InvalidIdError(f"indices: expected integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64)
        bad = (arr < 0) | (arr >= self._replay_capacity)
        if bad.any():
            raise InvalidIdError(
                f"indices: expected slots in [0, {self._replay_capacity}), got "
                f"{arr[bad][:5].tolist()}"
            )
        return arr

    def _slots_of_ids(self, ids: Array) -> Array:
        """Slot of each core id, or -1 if no slot holds it any more."""
        slots = self._id_slot[ids % self._replay_capacity]
        held = slots >= 0
        held[held] = self._slot_id[slots[held]] == ids[held]
        out: Array = np.where(held, slots, -1)
        return out

    def _gather(self, slots: Array) -> _Batch:
        """Core transitions of the given slots (each must hold an assemblable step)."""
        ids = self._slot_id[slots]
        empty = ids < 0
        if empty.any():
            raise InvalidIdError(
                f"indices: slots {slots[empty][:5].tolist()} hold no transition (padding rows "
                "or never written)"
            )
        try:
            core = self._core.get_transitions(ids)
        except InvalidIdError as exc:
            raise InvalidIdError(
                f"indices: some of slots {slots[:8].tolist()} cannot be assembled (window not "
                f"known yet, or frames overwritten): {exc}"
            ) from None
        return _Batch(slots, ids, core)

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

        return torch.from_numpy(self._sample_slots(_positive_int("batch_size", batch_size)))

    def _sample_slots(self, batch_size: int) -> Array:
        if self._num_valid_indices == 0:
            raise RuntimeError(
                f"Cannot sample {batch_size} since there are no valid indices so far."
            )
        out = np.empty(batch_size, np.int64)
        todo = np.arange(batch_size)
        rejected = 0
        while todo.size and rejected <= self._max_sample_attempts:
            try:
                ids = self._core.sample(int(todo.size)).ids
            except EmptyBufferError:
                break
            slots = self._slots_of_ids(ids)
            ok = slots >= 0
            ok[ok] = self._is_valid[slots[ok]]
            out[todo[ok]] = slots[ok]
            todo = todo[~ok]
            rejected += int(todo.size)
        if todo.size:
            out[todo] = self._sample_exhausted(int(todo.size), batch_size)
        return out

    def _sample_exhausted(self, count: int, batch_size: int) -> Array:
        """Draw ``count`` slots exactly among the valid slots the core can assemble.

        Rejection left each accepted draw uniform over that set, so finishing with exact draws
        over the same set keeps the whole batch uniform.
        """
        drawable = self._drawable_slots()
        if drawable.size == 0:
            raise RuntimeError(
                f"Cannot sample {batch_size}: the {self._num_valid_indices} valid indices hold "
                "no transition that can be assembled (padding rows or windows not known yet)"
            )
        out: Array = drawable[self._rng.integers(0, drawable.size, size=count)]
        return out

    def _drawable_slots(self) -> Array:
        valid = np.flatnonzero(self._is_valid)
        ids = self._slot_id[valid]
        ok = np.isin(ids, self._core.sampleable_ids()) & (ids >= 0)
        out: Array = valid[ok]
        return out

    def sample_transition_batch(self, batch_size: int | None = None, indices: Any = None) -> Any:
        """Returns a batch of transitions (including any extra contents) as a namedtuple.

        Elements and their order are those of :meth:`get_transition_elements`. Tensors are
        reshaped: ``state`` is 2-D (``(B, *observation_shape)``) unless ``stack_size > 1``, when
        frames are stacked on a last axis; scalar values come as ``(B, 1)``. ``terminal`` is a
        bool tensor, ``indices`` int64. When the transition is terminal ``next_state`` has
        undefined contents (here: the episode's frames with a zero newest frame).

        ``indices`` (the slots sampled) are valid only until the next :meth:`add`.

        Args:
            batch_size: Number of transitions; ``None`` uses the default (or ``len(indices)``).
            indices: Slots to return, as a tensor, array or list; ``None`` samples them
                uniformly with :meth:`sample_index_batch`.

        Raises:
            ValueError: An index is out of range or names a slot that holds no transition the
                buffer can assemble (a padding row, a window not known yet), or ``batch_size``
                differs from ``len(indices)``.
            RuntimeError: No valid index to sample (``indices=None``).
        """
        slots = self._choose_slots(batch_size, indices)
        batch = self._gather(slots)
        arrays = self._transition_arrays(batch)
        return self._batch_type(
            *(_to_torch(arrays[e.name]) for e in self.get_transition_elements())
        )

    def _choose_slots(self, batch_size: int | None, indices: Any) -> Array:
        if indices is None:
            b = self._batch_size if batch_size is None else _positive_int("batch_size", batch_size)
            return self._sample_slots(b)
        slots = self._as_slots(indices)
        if batch_size is not None and batch_size != slots.size:
            raise ShapeError(f"batch_size={batch_size} but {slots.size} indices were given")
        return slots

    def sample_all_valid_transitions(self) -> Any:
        """Every valid slot once, in slot order (as :meth:`sample_transition_batch`)."""
        valid = np.flatnonzero(self._is_valid)
        return self.sample_transition_batch(batch_size=int(valid.size), indices=valid)

    # ------------------------------------------------------------------ assembling
    def _core_name(self, name: str) -> str:
        return {"observation": "obs", "action": "action", "reward": "reward"}.get(
            name, _EXTRA + name
        )

    def _transition_arrays(self, batch: _Batch) -> dict[str, Any]:
        """Element name -> NumPy array (or list of arrays in timeline format)."""
        tb, ids = batch.core, batch.ids
        k = self._stack_size
        stack_all = self._return_everything_as_stack and k > 1
        m = tb.steps
        ended = tb.terminated
        extras = [e.name for e in self._extra_storage_types]
        # next_reward: the reward at t+m (0 where the window reached a terminal).
        next_reward = np.zeros((ids.size, *self._reward_shape), self._reward_dtype)
        go_on = ~ended
        if go_on.any():
            next_reward[go_on] = self._core.get_field("reward", ids[go_on] + m[go_on])
        out: dict[str, Any] = {
            "state": _stack_last(tb.obs, k),
            "next_state": _stack_last(tb.next_obs, k),
            "action": tb.action,
            "reward": tb.reward.astype(self._reward_dtype, copy=False),
            "next_action": tb.next_action,
            "next_reward": next_reward,
            "terminal": ended,
            "indices": batch.slots,
        }
        for x in extras:
            out[x] = tb[_EXTRA + x]
            out["next_" + x] = tb["next_" + _EXTRA + x]
        if stack_all:
            names = ["action", "reward", *extras]
            now = self._field_stacks(ids, [self._core_name(x) for x in names])
            last = self._field_stacks(ids + m - 1, [self._core_name(x) for x in names])
            for x in names:
                c = self._core_name(x)
                out[x] = _stack_last(now[c], k)
                out["next_" + x] = _stack_last(_shift_in(last[c], out["next_" + x]), k)
            term = np.zeros((ids.size, k), np.bool_)
            term[:, -1] = ended
            out["terminal"] = term
        if self._return_as_timeline_format:
            out.update(self._timeline(batch, stack_all, extras))
        return out

    def _field_stacks(self, ids: Array, names: list[str]) -> dict[str, Array]:
        """``(B, k, ...)`` stacks of raw core fields over steps ``ids-k+1 .. ids``.

        Frames before the episode's first step are zero (what ReAgent's padding rows hold). The
        raw runs come from ``core.get_sequences`` and are stacked by the core's
        :func:`rlreplay.assemble.stack_frames`.
        """
        k, b = self._stack_size, ids.size
        if b == 0:
            fields = self._core.schema.fields
            return {c: np.zeros((0, k, *fields[c].shape), fields[c].dtype) for c in names}
        start = np.maximum(ids - (k - 1), self._core.episode_begin(ids))
        runs = self._core.get_sequences(start, k, within_episode=True)
        base = np.arange(b, dtype=np.int64) * k
        last = ids - start  # where step `ids` sits in its run
        zero = np.zeros(b, np.int64)
        out = {}
        for c in names:
            col = runs[c].reshape(b * k, *runs[c].shape[2:])
            out[c] = stack_frames(col, base, last, zero, k, k, True)
        return out

    def _timeline(self, batch: _Batch, stack_all: bool, extras: list[str]) -> dict[str, Any]:
        """ReAgent's timeline format: per transition, the ``m`` per-step values of its window.

        ``reward[i]`` holds the rewards at ``t .. t+m-1``; ``next_state[i]``, ``next_action[i]``,
        ``next_reward[i]`` and ``next_<x>[i]`` hold the values at ``t+1 .. t+m`` (at a terminal
        the last of them is the zero placeholder / zeros). Each is a ``(m, ...)`` array.
        """
        tb, ids = batch.core, batch.ids
        k, n = self._stack_size, self._update_horizon
        m = tb.steps
        runs = self._core.get_sequences(ids, n + 1, within_episode=True)  # raw t .. t+n
        offs = np.concatenate([[0], np.cumsum(m)])
        targets = np.repeat(ids, m) + np.arange(int(offs[-1])) - np.repeat(offs[:-1], m)
        stacked = (["obs"] if k > 1 else []) + (
            [self._core_name(x) for x in ("action", "reward", *extras)] if stack_all else []
        )
        stacks = self._field_stacks(targets, stacked) if stacked else {}

        def window(c: str, nxt: bool) -> list[Array]:
            rows = []
            for i in range(ids.size):
                lo, mi = int(offs[i]), int(m[i])
                if c not in stacks:
                    raw = (
                        runs["next_obs"][i, :mi] if c == "obs" else runs[c][i, int(nxt) : mi + nxt]
                    )
                    rows.append(raw)
                    continue
                own = stacks[c][lo : lo + mi]
                if not nxt:
                    rows.append(_stack_last(own, k))
                    continue
                newest = runs["next_obs"][i, mi - 1] if c == "obs" else runs[c][i, mi]
                after = _shift_in(own[-1:], newest[None])
                rows.append(_stack_last(np.concatenate([own[1:], after]), k))
            return rows

        out: dict[str, Any] = {
            "reward": window("reward", False),
            "next_state": window("obs", True),
            "next_action": window("action", True),
            "next_reward": window("reward", True),
        }
        for x in extras:
            out["next_" + x] = window(_EXTRA + x, True)
        return out

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_arrays(self) -> dict[str, Array]:
        """Attribute name -> array, in Dopamine's layout (store arrays per slot, scalars)."""
        cap = self._replay_capacity
        ids = self._slot_id
        held = ids >= 0
        arrays: dict[str, Array] = {}
        for e in self.get_storage_signature():
            arr = np.zeros((cap, *e.shape), e.type)
            if held.any():
                name = "terminated" if e.name == "terminal" else self._core_name(e.name)
                arr[held] = self._core.get_field(name, ids[held])
            arrays[STORE_FILENAME_PREFIX + e.name] = arr
        arrays["add_count"] = np.array(self._add_count, np.int64)
        arrays["invalid_range"] = self.invalid_range
        arrays["_is_valid"] = self._is_valid.copy()
        return arrays

    def _required_files(self) -> list[str]:
        names = [STORE_FILENAME_PREFIX + e.name for e in self.get_storage_signature()]
        return [*names, "add_count"]

    def save(self, checkpoint_dir: str | os.PathLike[str], iteration_number: int) -> None:
        """Save the buffer as one gzipped ``.npy`` file per attribute (Dopamine's layout).

        Files, for iteration ``N``: ``$store$_<element>_ckpt.N.gz`` per storage element (one
        row per slot, padding rows zero), ``add_count_ckpt.N.gz``, ``invalid_range_ckpt.N.gz``
        and ``_is_valid_ckpt.N.gz`` (the validity mask, which ReAgent does not save). Arrays
        only, written with ``allow_pickle=False``; each file is written to a temporary name
        and renamed. The files of iteration ``N - 4`` are deleted, as in Dopamine. A missing
        ``checkpoint_dir`` is created.

        Args:
            checkpoint_dir: Directory of the checkpoint files.
            iteration_number: Suffix of the file names.
        """
        iteration_number = int(iteration_number)
        os.makedirs(checkpoint_dir, exist_ok=True)
        for name, arr in self._checkpoint_arrays().items():
            path = _filename(checkpoint_dir, name, iteration_number)
            tmp = path + ".tmp"
            with open(tmp, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb") as out:
                np.save(out, arr, allow_pickle=False)
            os.replace(tmp, path)
            stale = iteration_number - CHECKPOINT_DURATION
            if stale >= 0:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(_filename(checkpoint_dir, name, stale))

    def load(self, checkpoint_dir: str | os.PathLike[str], suffix: Any) -> None:
        """Restore the buffer from the files :meth:`save` (or ReAgent) wrote.

        The rows are replayed into a fresh core in ring order: the rows after a terminal (and
        at the very start) are padding, and validity is marked as :meth:`add` marks it. The
        optional ``_is_valid`` file then restores validity exactly (a ReAgent checkpoint has
        none). Sampling restarts from the buffer's seed.

        Args:
            checkpoint_dir: Directory of the checkpoint files.
            suffix: The iteration number used when saving.

        Raises:
            NotFoundError: If not all expected files are found in the directory.
            rlreplay.CheckpointError: A file is not a plain array (e.g. pickled) or has the
                wrong shape or dtype.
        """
        paths = {n: _filename(checkpoint_dir, n, suffix) for n in self._required_files()}
        missing = [p for p in paths.values() if not os.path.exists(p)]
        if missing:
            raise NotFoundError(f"Missing file(s): {missing}")
        data = {name: _read_array(path) for name, path in paths.items()}
        valid_path = _filename(checkpoint_dir, "_is_valid", suffix)
        valid = _read_array(valid_path) if os.path.exists(valid_path) else None
        rows, add_count = self._check_loaded(data, valid)
        before = dict(self.__dict__)  # _reset() replaces every stateful part, never mutates one
        try:
            self._reset()
            self._replay_rows(rows, add_count, data)
        except Exception:
            self.__dict__.update(before)  # a failed load changes nothing
            raise
        if valid is not None:
            self._is_valid[:] = valid
            self._num_valid_indices = int(valid.sum())

    def _check_loaded(
        self, data: dict[str, Array], valid: Array | None
    ) -> tuple[dict[str, Array], int]:
        cap = self._replay_capacity
        rows = {}
        for e in self.get_storage_signature():
            arr = data[STORE_FILENAME_PREFIX + e.name]
            if arr.shape != (cap, *e.shape):
                raise CheckpointError(
                    f"{e.name}: expected shape {(cap, *e.shape)}, the checkpoint has {arr.shape}"
                )
            if e.name == "terminal":
                rows[e.name] = arr != 0
            elif np.can_cast(arr.dtype, e.type, "same_kind"):
                rows[e.name] = arr.astype(e.type, copy=False)
            else:
                raise CheckpointError(f"{e.name}: cannot read dtype {arr.dtype} as {e.type}")
        count = data["add_count"]
        if count.shape != () or count.dtype.kind not in "iu" or int(count) < 0:
            raise CheckpointError(f"add_count: expected an int >= 0, got {count!r}")
        if valid is not None and (valid.shape != (cap,) or valid.dtype != np.bool_):
            raise CheckpointError(
                f"_is_valid: expected ({cap},) bool, got {valid.dtype}{valid.shape}"
            )
        return rows, int(count)

    def _replay_rows(self, rows: dict[str, Array], add_count: int, data: dict[str, Array]) -> None:
        """Rebuild the core and the slot bookkeeping from per-slot rows, oldest first."""
        cap, k = self._replay_capacity, self._stack_size
        if add_count <= cap:
            order = np.arange(add_count)
            pad = k - 1  # the first add of all wrote padding rows
        else:
            # Wrapped: the oldest rows start at the cursor. Rows before its first terminal are
            # taken as steps of one (cut) episode; its padding rows, if still there, are zero
            # and among the oldest stack_size - 1 slots, which are never valid.
            order = (np.arange(cap) + add_count) % cap
            pad = 0
        self._add_count = add_count - order.size
        signature = self.get_add_args_signature()
        for slot in order.tolist():
            if pad > 0:
                self._write_padding()
                pad -= 1
                continue
            values = [self._loaded_value(rows, data, e.name, slot) for e in signature]
            self._write_step(self._convert_step(values), values)
            if values[3]:
                pad = k - 1

    def _loaded_value(
        self, rows: dict[str, Array], data: dict[str, Array], name: str, slot: int
    ) -> Any:
        return rows[name][slot]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(observation_shape={self._observation_shape}, "
            f"stack_size={self._stack_size}, replay_capacity={self._replay_capacity}, "
            f"add_count={self._add_count}, size={self.size})"
        )


# ---------------------------------------------------------------------- helpers
def _filename(checkpoint_dir: str | os.PathLike[str], name: str, suffix: Any) -> str:
    return os.path.join(os.fspath(checkpoint_dir), f"{name}_ckpt.{suffix}.gz")


def _read_array(path: str) -> Array:
    """One gzipped ``.npy`` array; pickled content is refused, never unpickled."""
    try:
        with open(path, "rb") as f, gzip.GzipFile(fileobj=f, mode="rb") as infile:
            out: Array = np.load(infile, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise CheckpointError(
            f"{path}: expected a gzipped NumPy array written without pickle; {exc}"
        ) from None
    return out


def _stack_last(frames: Array, k: int) -> Array:
    """``(B, k, *shape)`` stacks as ReAgent returns them, the stack axis last.

    With ``k == 1`` nothing is stacked (the core returns ``(B, *shape)``): returned unchanged.
    """
    return frames if k == 1 else np.moveaxis(frames, 1, -1)


def _shift_in(stacks: Array, newest: Array) -> Array:
    """Stacks one step later: drop the oldest frame, append ``newest`` (``(B, *shape)``)."""
    out: Array = np.concatenate([stacks[:, 1:], np.asarray(newest)[:, None]], axis=1)
    return out


def _to_torch(value: Any) -> Any:
    import torch

    if isinstance(value, list):
        return [torch.from_numpy(np.ascontiguousarray(v)) for v in value]
    t = torch.from_numpy(np.ascontiguousarray(value))
    return t.reshape(-1, 1) if t.ndim == 1 else t


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ConfigError(f"{name}: expected a positive int, got {value!r}")
    return int(value)


def _shape(name: str, value: Any) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected a tuple of ints, got {value!r}") from None
    if any(s < 0 for s in shape):
        raise ConfigError(f"{name}: expected non-negative sizes, got {shape}")
    return shape


def _extras(extra: Sequence[Any] | None, reserved: set[str]) -> list[shape_type]:
    out: list[shape_type] = []
    seen: set[str] = set()
    for e in extra or []:
        try:
            name, shape, dtype = e
        except (TypeError, ValueError):
            raise ConfigError(
                f"extra_storage_types: expected ReplayElement(name, shape, type), got {e!r}"
            ) from None
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("next_"):
            raise ConfigError(f"extra_storage_types: {name!r} is not a usable element name")
        if name in reserved or name in seen:
            raise ConfigError(f"extra_storage_types: the name {name!r} is taken")
        seen.add(name)
        out.append(ReplayElement(name, _shape(f"extra_storage_types[{name}]", shape),
                                 np.dtype(dtype)))  # fmt: skip
    return out


def _space_shape_dtype(name: str, space: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    kind = type(space).__name__
    if kind == "Discrete":
        return (), np.dtype(space.dtype)
    if kind == "Box":
        return tuple(space.shape), np.dtype(space.dtype)
    raise ConfigError(f"{name}: {kind} not supported; expected a Box or Discrete space")
