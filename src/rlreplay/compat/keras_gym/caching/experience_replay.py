"""Stand-in for ``keras_gym.caching.experience_replay``: keras-gym's replay buffer over rlreplay.

:class:`ExperienceReplayBuffer` keeps keras-gym's constructor, methods, return shapes and
errors, and hands every piece of replay work to one :class:`rlreplay.ReplayBuffer`:

==========================  ===============================================================
keras-gym                   core
==========================  ===============================================================
last frame of ``s``         field ``obs`` (one frame), ``frame_stack=num_frames``,
                            ``stack_pad="first"`` (keras-gym repeats an episode's first frame)
``a``                       field ``action`` (the index for ``Discrete``, one-hot at sample
                            time); ``next_fields=("action", ...)`` gives ``A_next``
``r``                       ``reward`` (float64, as keras-gym stores it)
``done``                    ``terminated`` (with a zero final frame: keras-gym has none)
new ``episode_id``          a *cut*: a filler step (below) ends the previous episode
``bootstrap_n``, ``gamma``  ``n_step``, ``gamma``
==========================  ===============================================================

Cut episodes. An ``add`` whose ``episode_id`` differs from the previous step's, when that step
was not ``done``, starts a new episode and leaves the previous one without a state to
bootstrap from: keras-gym never samples a transition whose n-step window runs into such a cut.
The core learns that an episode ended only from the step that ends it, and the previous step
is already stored when the new id arrives. So the adapter then stores one *filler* step (zero
frame, zero action and reward, field ``filler=True``) that ends the cut episode as truncated,
and the sampler drops every draw whose window reaches a truncation (``truncated``) or
bootstraps from a filler (``next_filler``). Rejecting draws from a uniform draw leaves it
uniform over the remaining transitions, so exactly keras-gym's valid transitions are sampled,
uniformly. A filler takes one slot of the ring per cut (cuts are rare: gym marks time limits
``done``); without cuts there are no fillers and no rejections.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay.batch import Batch
from rlreplay.buffer import ReplayBuffer
from rlreplay.compat.keras_gym.base.errors import (
    ActionSpaceError,
    InsufficientCacheError,
    NumpyArrayCheckError,
)
from rlreplay.errors import ConfigError, DTypeError, EmptyBufferError
from rlreplay.spec import Field

__all__ = ["ExperienceReplayBuffer"]

Array = np.ndarray[Any, Any]

#: keras-gym gives up after ``10 * batch_size`` rejected draws; so does this adapter.
_ATTEMPTS_PER_ITEM = 10


class ExperienceReplayBuffer:
    """keras-gym's experience replay buffer (frames, n-step bootstrapping) on rlreplay.

    It stores one frame per step and rebuilds the frame stack ``S`` (frames on the last axis)
    and the n-step targets at sample time, as keras-gym does::

        Rn = sum_{j<m} gamma^j r_{t+j}    (m = bootstrap_n, or fewer if the episode is done)
        In = 0 if done within the window else gamma^bootstrap_n
        S_next, A_next = state and action at t + bootstrap_n   (undefined when In = 0)

    Invariants: every ``add`` is stored in the core at once (plus one filler step per cut
    episode, see the module docstring); ``len(self)`` counts adds as keras-gym does,
    ``max(0, min(adds, capacity + bootstrap_n) - bootstrap_n)``; once full, ``capacity``
    transitions are sampleable (fewer by one per filler still stored).

    Cost: :meth:`add` is O(1); :meth:`sample` is O(batch_size * (num_frames + bootstrap_n))
    gathers (the core's), independent of ``capacity``.

    Args:
        env: The gym/gymnasium environment: ``env.action_space`` gives the action encoding
            and ``num_frames`` (found on the env or any env it wraps; default 1) the number
            of stacked frames in a state.
        capacity: Number of transitions to keep (DQN typically uses 1000000).
        batch_size: Number of transitions :meth:`sample` returns.
        bootstrap_n: Number of steps over which to delay bootstrapping (n-step returns).
        gamma: Reward discount factor in ``[0, 1]``.
        random_seed: Seed (a non-negative int) for reproducible samples, or None.

    Raises:
        ConfigError: An argument out of range (a ``ValueError``).

    Example:
        >>> import gymnasium, numpy as np
        >>> from rlreplay.compat.keras_gym import ExperienceReplayBuffer
        >>> class Env:
        ...     action_space = gymnasium.spaces.Discrete(2)
        >>> buffer = ExperienceReplayBuffer(Env(), capacity=100, batch_size=4, random_seed=0)
        >>> for t in range(10):
        ...     buffer.add(np.full(3, t, np.float32), t % 2, 1.0, t == 9, episode_id=0)
        >>> S, A, Rn, In, S_next, A_next = buffer.sample()
        >>> S.shape, A.shape, Rn.shape, In.shape, S_next.shape, A_next.shape
        ((4, 3), (4, 2), (4,), (4,), (4, 3), (4, 2))
    """

    def __init__(
        self,
        env: Any,
        capacity: int,
        batch_size: int = 32,
        bootstrap_n: int = 1,
        gamma: float = 0.99,
        random_seed: int | None = None,
    ) -> None:
        self.env = env
        self.capacity = _positive_int("capacity", capacity)
        self.batch_size = _positive_int("batch_size", batch_size)
        self.num_frames = _positive_int("num_frames", _get_env_attr(env, "num_frames", 1))
        self.bootstrap_n = _positive_int("bootstrap_n", bootstrap_n)
        self.gamma = float(gamma)
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"gamma: expected a value in [0, 1], got {gamma!r}")
        self._random_seed = _check_seed(random_seed)
        # The core is built by the first add: the frame's shape and dtype come from it.
        self._core: ReplayBuffer | None = None
        self._discrete = False
        self._blank: Array | None = None  # zero frame: final observation and filler frame
        self._blank_action: Any = None  # zero action of the filler
        self._running: int | None = None  # episode id of the core's unfinished episode
        self._num_transitions = 0
        self._last_ids: Array | None = None  # core ids of the last sample (for tests)

    @classmethod
    def from_value_function(
        cls, value_function: Any, capacity: int, batch_size: int = 32
    ) -> ExperienceReplayBuffer:
        """Create a new instance with settings taken from a value function.

        ``gamma`` and ``bootstrap_n`` are read from the value function, ``num_frames`` from
        its ``env`` attribute.

        Args:
            value_function: A state or state-action value function with attributes ``env``,
                ``gamma`` and ``bootstrap_n``.
            capacity: Number of transitions to keep.
            batch_size: Number of transitions :meth:`sample` returns.

        Returns:
            A new, empty buffer.
        """
        return cls(
            env=value_function.env,
            capacity=capacity,
            batch_size=batch_size,
            gamma=value_function.gamma,
            bootstrap_n=value_function.bootstrap_n,
        )

    # ------------------------------------------------------------------ keras-gym's mixins
    @property
    def random_seed(self) -> int | None:
        """The seed of the sampler; settable only before the first :meth:`add`."""
        return self._random_seed

    @random_seed.setter
    def random_seed(self, new_random_seed: int | None) -> None:
        if self._core is not None:
            raise ConfigError(
                "random_seed: the sampler is created by the first add; set random_seed in the "
                "constructor or before adding"
            )
        self._random_seed = _check_seed(new_random_seed)

    @property
    def action_space_is_box(self) -> bool:
        """Whether ``env.action_space`` is a ``Box``."""
        return _is_space(self.env.action_space, "Box")

    @property
    def action_space_is_discrete(self) -> bool:
        """Whether ``env.action_space`` is a ``Discrete`` space (actions are one-hot encoded)."""
        return _is_space(self.env.action_space, "Discrete")

    @property
    def num_actions(self) -> int:
        """Number of actions of a ``Discrete`` action space.

        Raises:
            ActionSpaceError: The action space is not ``Discrete``.
        """
        if not self.action_space_is_discrete:
            raise ActionSpaceError(
                "num_actions attribute is inaccessible; does the env have a Discrete action "
                f"space? It has {self.env.action_space!r}"
            )
        return int(self.env.action_space.n)

    # ------------------------------------------------------------------ writing
    def add(self, s: Any, a: Any, r: float, done: bool, episode_id: int) -> None:
        """Add a transition to the experience replay buffer.

        Args:
            s: A single state observation; with ``num_frames > 1`` a frame stack of shape
                ``(H, W, num_frames)`` or ``(H, W, C, num_frames)`` of which only the last
                frame is stored.
            a: A single action (an int for a ``Discrete`` action space).
            r: The observed reward associated with this transition.
            done: Whether the episode has finished.
            episode_id: The episode in which the transition took place; a new id after a step
                that was not ``done`` starts a new episode (the old one was cut).

        Raises:
            NumpyArrayCheckError: A frame stack of the wrong shape.
            ActionSpaceError: A discrete action that is not an int in the space.
            rlreplay.ShapeError: A state or action of another shape than the first one.
            rlreplay.DTypeError: A value that cannot be stored without an unsafe cast, or an
                ``episode_id`` that is not an int.
        """
        frame = self._extract_last_frame(s)
        core = self._core if self._core is not None else self._init_core(frame)
        action = self._encode_action(a)
        eid = _episode_id(episode_id)
        if self._running is not None and eid != self._running:
            for name, value in (("obs", frame), ("action", action), ("reward", r)):
                core.schema.convert(name, value, ())  # a rejected add must change nothing
            self._end_cut_episode(core)
        core.add(
            obs=frame,
            action=action,
            reward=r,
            filler=False,
            terminated=bool(done),
            truncated=False,
            next_obs=self._blank,  # read only when the step ends its episode
        )
        self._running = None if done else eid
        self._num_transitions = min(self._num_transitions + 1, self.capacity + self.bootstrap_n)

    def clear(self) -> None:
        """Clear the experience replay buffer (the shapes fixed by the first add stay)."""
        if self._core is not None:
            if self._running is not None:
                # The next add then starts a fresh episode, whose frame stacks are padded with
                # its own first frame rather than reaching for frames cleared away.
                self._end_cut_episode(self._core)
            self._core.clear()
        self._num_transitions = 0

    def _end_cut_episode(self, core: ReplayBuffer) -> None:
        """Store the filler step that ends the running episode as truncated."""
        core.add(
            obs=self._blank,
            action=self._blank_action,
            reward=0.0,
            filler=True,
            terminated=False,
            truncated=True,
            next_obs=self._blank,
        )
        self._running = None

    def _init_core(self, frame: Array) -> ReplayBuffer:
        self._discrete = self.action_space_is_discrete
        if self._discrete:
            action = Field((), np.int64)  # the index; one-hot encoded at sample time
        else:
            space = self.env.action_space
            action = Field(tuple(space.shape), space.dtype)
        fields = {
            "obs": Field(frame.shape, frame.dtype, observation=True),
            "action": action,
            "reward": Field((), np.float64),
            "filler": Field((), np.bool_),
        }
        self._core = ReplayBuffer(
            # keras-gym keeps capacity + bootstrap_n slots, of which `capacity` transitions are
            # sampleable; the core also skips the num_frames - 1 oldest steps once their stack
            # was overwritten, so it keeps that many more to sample `capacity` transitions too.
            self.capacity + self.bootstrap_n + self.num_frames - 1,
            fields,
            n_step=self.bootstrap_n,
            gamma=self.gamma,
            frame_stack=self.num_frames,
            stack_pad="first",
            seed=self._random_seed,
            next_fields=("action", "filler"),
        )
        self._blank = np.zeros(frame.shape, frame.dtype)
        self._blank_action = np.zeros(action.shape, action.dtype)
        return self._core

    def _extract_last_frame(self, s: Any) -> Array:
        if self.num_frames == 1:
            return np.asarray(s)
        arr = np.asarray(s)
        if arr.ndim not in (3, 4):
            raise NumpyArrayCheckError(
                f"expected ndim equal to 3 or 4, got shape: {arr.shape} (a frame stack "
                f"(H, W, num_frames) or (H, W, C, num_frames) with num_frames={self.num_frames})"
            )
        if arr.shape[-1] != self.num_frames:
            raise NumpyArrayCheckError(
                f"expected array with axis_size={self.num_frames} along axis=-1, got shape: "
                f"{arr.shape} (the frames are stacked on the last axis)"
            )
        out: Array = arr[..., -1]
        return out

    def _encode_action(self, a: Any) -> Any:
        if not self._discrete:
            return a
        arr = np.asarray(a)
        if arr.shape != () or arr.dtype.kind not in "iu":
            raise ActionSpaceError(
                f"expected a single integer action for a Discrete action space, got {a!r}"
            )
        space = self.env.action_space
        index = int(arr) - int(getattr(space, "start", 0))
        if not 0 <= index < int(space.n):
            raise ActionSpaceError(f"action {a!r} is not in the action space {space!r}")
        return index

    # ------------------------------------------------------------------ sampling
    def sample(self) -> tuple[Array, Array, Array, Array, Array, Array]:
        """Get a batch of transitions to be used for bootstrapped updates.

        Returns:
            ``(S, A, Rn, In, S_next, A_next)``, each with a leading axis ``batch_size``:
            ``S``/``S_next`` are states, shape ``(B, *frame, num_frames)`` (``(B, *frame)``
            when ``num_frames == 1``) in the frames' dtype; ``A``/``A_next`` one-hot float64
            ``(B, num_actions)`` for a ``Discrete`` action space, else the raw actions
            ``(B, *action_space.shape)``; ``Rn`` and ``In`` float64 ``(B,)``. Typically used
            to minimise ``(Rn + In * sum_a P(a|S_next) Q(S_next, a) - Q(S, A))^2``. Where
            ``In == 0`` (the episode is done within the window) ``S_next`` and ``A_next`` are
            undefined (this implementation fills zeros in the last frame and in ``A_next``).

        Raises:
            InsufficientCacheError: Fewer than ``batch_size`` transitions (``len(self)``), or
                no sampleable one (every window reaches a cut episode's end).
        """
        if self._core is None or len(self) < self.batch_size:
            raise InsufficientCacheError(
                f"insufficient cached data to sample from: {len(self)} transitions, "
                f"batch_size={self.batch_size}; add more transitions before sampling"
            )
        batch = self._draw(self._core)
        self._last_ids = batch.ids
        terminated = batch.terminated
        # The core's discount, in float64 as keras-gym returns it: a window that is neither
        # terminated nor truncated (those were dropped) spans exactly bootstrap_n steps.
        In = np.where(terminated, 0.0, np.float64(self.gamma) ** batch.steps)
        return (
            self._states(batch.obs),
            self._actions(batch.action, None),
            batch.reward,
            In,
            self._states(batch.next_obs),
            self._actions(batch.next_action, terminated),
        )

    def _draw(self, core: ReplayBuffer) -> Batch:
        """``batch_size`` uniform draws among the transitions whose window reaches no cut."""
        B = self.batch_size
        try:
            batch = core.sample(B)
            bad = batch.truncated | batch.next_filler
            if not bad.any():  # the common case: no episode was cut
                return batch
            kept = [batch.ids[~bad]]
            got, drawn = kept[0].size, B
            while got < B and drawn < _ATTEMPTS_PER_ITEM * B:
                batch = core.sample(B)
                kept.append(batch.ids[~(batch.truncated | batch.next_filler)])
                got, drawn = got + kept[-1].size, drawn + B
        except EmptyBufferError as exc:
            raise InsufficientCacheError(
                f"insufficient cached data to sample from: no transition's {self.bootstrap_n}"
                "-step window is complete yet; add more transitions before sampling"
            ) from exc
        if got < B:
            raise InsufficientCacheError(
                f"couldn't construct a valid sample: {got} of {drawn} draws were usable; most "
                "stored windows reach the end of an episode that was cut (a new episode_id "
                "without done), which leaves nothing to bootstrap from"
            )
        return core.get_transitions(np.concatenate(kept)[:B])

    def _states(self, obs: Array) -> Array:
        if self.num_frames == 1:
            return obs
        # The core stacks frames on axis 1; keras-gym puts them on the last axis.
        return np.ascontiguousarray(np.moveaxis(obs, 1, -1))

    def _actions(self, action: Array, undefined: Array | None) -> Array:
        if not self._discrete:
            return action
        one_hot: Array = np.eye(int(self.env.action_space.n), dtype=np.float64)[action]
        if undefined is not None:
            one_hot[undefined] = 0.0  # no action follows a done step
        return one_hot

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        return max(0, self._num_transitions - self.bootstrap_n)

    def __bool__(self) -> bool:
        return bool(len(self))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self.capacity}, batch_size={self.batch_size}, "
            f"bootstrap_n={self.bootstrap_n}, gamma={self.gamma}, num_frames={self.num_frames}, "
            f"len={len(self)})"
        )


def _get_env_attr(env: Any, attr: str, default: Any, max_depth: int = 100) -> Any:
    """``getattr`` on ``env`` or the first env it wraps (``.env`` chain) that has ``attr``.

    keras-gym's ``get_env_attr``: gymnasium wrappers no longer forward attributes, so the
    chain is walked explicitly.
    """
    e = env
    for _ in range(max_depth):
        if hasattr(e, attr):
            return getattr(e, attr)
        if not hasattr(e, "env"):
            break
        e = e.env
    return default


def _is_space(space: Any, name: str) -> bool:
    """Whether ``space`` is a gym/gymnasium space class called ``name`` (or a subclass).

    By class name, so neither gym nor gymnasium has to be imported and both work.
    """
    return any(cls.__name__ == name for cls in type(space).__mro__)


def _positive_int(name: str, value: Any) -> int:
    # keras-gym applies int() to its sizes, so capacity=1e6 works; non-integral values do not.
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected a positive int, got {value!r}") from None
    if isinstance(value, bool) or out != value or out < 1:
        raise ConfigError(f"{name}: expected a positive int, got {value!r}")
    return out


def _check_seed(seed: Any) -> int | None:
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(f"random_seed: expected a non-negative int or None, got {seed!r}")
    return int(seed)


def _episode_id(value: Any) -> int:
    arr = np.asarray(value)
    if arr.shape != () or arr.dtype.kind not in "iu":
        raise DTypeError(f"episode_id: expected an int, got {value!r}")
    return int(arr)
