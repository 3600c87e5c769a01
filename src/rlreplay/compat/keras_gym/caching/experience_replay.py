"""Stand-in for ``keras_gym.caching.experience_replay``: keras-gym's replay buffer over rlreplay.

:class:`ExperienceReplayBuffer` keeps keras-gym's constructor, attributes, methods, input
casting, return shapes, random draws and errors, and hands the storage, the episode
bookkeeping and the frame stacking to one :class:`rlreplay.ReplayBuffer`:

==========================  ===============================================================
keras-gym                   core
==========================  ===============================================================
last frame of ``s``         field ``obs`` (one frame), ``frame_stack=num_frames``,
                            ``stack_pad="first"`` (keras-gym repeats an episode's first frame)
``a``                       field ``action``: the one-hot row (``Discrete``) or the action,
                            stored as keras-gym stores it; ``next_fields=("action",)``
``r``                       ``reward`` (float64, as keras-gym stores it)
``done``                    ``terminated`` (with a zero final frame: keras-gym has none)
new ``episode_id``          a *cut*: ``end_episode(next_obs=zeros)`` truncates the old episode
``bootstrap_n``             ``n_step``
==========================  ===============================================================

Every value is converted as keras-gym's ``self._s[self._i] = s`` converts it: NumPy assignment
into an array of the stored shape and dtype (unsafe casts, broadcasting), raising what NumPy
raises there, so the core only ever gets values of its fields' dtypes.

Sampling follows keras-gym's documented loop (the version rlreplay targets): each attempt draws
``j = random.randint(num_transitions)`` (a slot of keras-gym's ``capacity + bootstrap_n`` ring,
mapped to the core step it holds) with the same ``RandomState``, and keeps it under keras-gym's
rules; attempts are drawn in vectors of exactly as many as are still needed, which consumes the
generator as keras-gym's one-by-one draws do. The same ``random_seed`` and adds give
keras-gym's samples, except where keras-gym would read data that is not there (the fixes in
``docs/migrating/keras_gym.md``): such a draw is rejected, or its stack is built from the right
frames. (keras-gym 0.2.17, the last PyPI release, draws differently: ``js = randint(len -
num_frames) + arange(num_frames)``.) The ring itself is readable as keras-gym's private ``_s``,
``_a``, ``_r``, ``_d``, ``_e`` and ``_i`` (copies), which keras-gym's own tests read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay import Field, ReplayBuffer
from rlreplay.compat.keras_gym.base.errors import (
    EmptyRingError,
    FrameCountError,
    InsufficientCacheError,
    NumpyArrayCheckError,
    SampleConstructionError,
)
from rlreplay.compat.keras_gym.base.mixins import ActionSpaceMixin, RandomStateMixin, get_env_attr
from rlreplay.compat.keras_gym.caching._ring import RingViews, assigned, check_ring

__all__ = ["ExperienceReplayBuffer"]

Array = np.ndarray[Any, Any]

#: keras-gym gives up after ``10 * batch_size`` rejected draws; so does this adapter.
_ATTEMPTS_PER_ITEM = 10
# keras-gym's cache dtypes for rewards, done flags and episode ids
_FLOAT64, _BOOL, _INT32 = np.dtype(np.float64), np.dtype(np.bool_), np.dtype(np.int32)
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class ExperienceReplayBuffer(RingViews, RandomStateMixin, ActionSpaceMixin):
    """keras-gym's experience replay buffer (frames, n-step bootstrapping) on rlreplay.

    It stores one frame per step and rebuilds the frame stack ``S`` (frames on the last axis)
    and the n-step targets at sample time, as keras-gym does::

        Rn = sum_{j<m} gamma^j r_{t+j}    (m = bootstrap_n, or fewer if the episode is done)
        In = 0 if done within the window else gamma^bootstrap_n
        S_next, A_next = state and action at t + bootstrap_n   (masked by In = 0 when done)

    Invariants: every ``add`` is one core step (core id = first id + add index); keras-gym's
    ring slot ``j`` holds the newest add ``i`` with ``i % (capacity + bootstrap_n) == j``;
    ``len(self) == max(0, min(adds, capacity + bootstrap_n) - bootstrap_n)``.

    Cost: :meth:`add` is O(1); :meth:`sample` is O(batch_size * (num_frames + bootstrap_n))
    gathers, in a few vectorised rounds (one per batch of rejected draws).

    Args:
        env: The gym/gymnasium environment: ``env.action_space`` gives the action encoding
            and ``num_frames`` (found on the env or any env it wraps; default 1) the number
            of stacked frames in a state.
        capacity: Number of transitions to keep (``int()`` is applied, as keras-gym does).
        batch_size: Number of transitions :meth:`sample` returns.
        bootstrap_n: Number of steps over which to delay bootstrapping (n-step returns).
        gamma: Reward discount factor (read at sample time, as keras-gym does).
        random_seed: Seed of the ``RandomState`` that draws the samples, or None.
        n: Later keras-gym releases' name for ``bootstrap_n`` (keyword only).

    ``bootstrap_n=0``, a negative ``bootstrap_n`` and ``num_frames=0`` work as in keras-gym
    (see :meth:`sample`); nothing is checked here, as keras-gym checks nothing. A ring of
    ``capacity + bootstrap_n < 0`` slots makes the first :meth:`add` raise ``ValueError``
    (an ``rr.ConfigError``), and one of 0 slots ``IndexError``, as keras-gym's do.

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
        random_seed: Any = None,
        *,
        n: int | None = None,
    ) -> None:
        self.env = env
        self.capacity = int(capacity)
        self.batch_size = int(batch_size)
        frames = get_env_attr(env, "num_frames", 1)
        # keras-gym keeps an env's num_frames=None as it is: add works, every sample() fails.
        self.num_frames: int | None = None if frames is None else int(frames)
        self._frames = 1 if self.num_frames is None else self.num_frames  # the core's stack
        self.bootstrap_n = int(bootstrap_n if n is None else n)
        self.gamma = float(gamma)
        self.random_seed = random_seed
        self._initialized = False
        self._core: ReplayBuffer | None = None
        self._running: int | None = None  # (int32) episode id of the core's running episode
        self._adds = 0  # adds since construction or the last clear
        self._first_id = 0  # core id of the first of those adds
        self._last_id = -1  # core id of the newest add
        self._num_transitions = 0
        self._last_ids: Array | None = None  # core ids of the last sample (for tests)

    @classmethod
    def from_value_function(
        cls, value_function: Any, capacity: int, batch_size: int = 32
    ) -> ExperienceReplayBuffer:
        """Create a new instance with settings taken from a value function.

        ``gamma`` and ``bootstrap_n`` (or ``n``, its name in later keras-gym releases) are read
        from the value function, ``num_frames`` from its ``env`` attribute.

        Args:
            value_function: A state or state-action value function with attributes ``env``,
                ``gamma`` and ``bootstrap_n``.
            capacity: Number of transitions to keep.
            batch_size: Number of transitions :meth:`sample` returns.

        Returns:
            A new, empty buffer.
        """
        n = getattr(value_function, "bootstrap_n", None)
        return cls(
            env=value_function.env,
            capacity=capacity,
            batch_size=batch_size,
            gamma=value_function.gamma,
            bootstrap_n=value_function.n if n is None else n,
        )

    @property
    def n(self) -> int:
        """``bootstrap_n`` under its name in later keras-gym releases."""
        return self.bootstrap_n

    # ------------------------------------------------------------------ writing
    def add(self, s: Any, a: Any, r: Any, done: Any, episode_id: Any) -> None:
        """Add a transition to the experience replay buffer.

        Each value is converted as keras-gym's assignment into its arrays converts it (NumPy
        casting and broadcasting); the first ``s`` fixes the stored state shape and dtype.

        Args:
            s: A single state observation; with ``num_frames > 1`` a frame stack whose last
                axis is ``num_frames``, of which only the last frame is stored when it is
                ``(H, W, num_frames)`` or ``(H, W, C, num_frames)``.
            a: A single action: for ``Discrete(n)`` an int in ``[0, n)`` (one-hot encoded) or
                a 1-d array of ``n`` entries (stored as given), as keras-gym 0.2.17 accepts.
            r: The observed reward associated with this transition.
            done: Whether the episode has finished.
            episode_id: The episode in which the transition took place (stored as int32); a
                new id after a step that was not ``done`` starts a new episode (a cut).

        Raises:
            NumpyArrayCheckError: With ``num_frames > 1``, ``s`` is not a NumPy array or its
                last axis is not ``num_frames``.
            AttributeError: The first ``s`` has no ``shape``/``dtype``, or a list action.
            ActionAssertionError: A ``Discrete`` action that is not an int (``AssertionError``).
            ActionValueError: A ``Discrete`` action outside ``[0, n)`` (``ValueError``).
            ValueError, TypeError, IndexError, OverflowError: What NumPy raises assigning
                the value into keras-gym's array (e.g. a state of another shape, an episode
                id beyond int32). A rejected add stores nothing.
        """
        s = self._extract_last_frame(s)
        if not self._initialized:
            # keras-gym's _init_cache: the shapes and dtypes come from the first state.
            # keras-gym reads s.dtype and s.shape: a first state without them (a list, a
            # Python number) raises AttributeError there, as it does here
            self._s_shape, self._s_dtype = tuple(s.shape), np.dtype(s.dtype)
            if self.action_space_is_discrete:
                self._a_shape: tuple[int, ...] = (self.num_actions,)
                self._a_dtype = np.dtype(np.float64)
            else:
                self._a_shape = tuple(self.env.action_space.shape)
                self._a_dtype = np.dtype(self.env.action_space.dtype)
            # keras-gym's _init_cache: np.empty of a negative ring raises before it marks the
            # buffer initialised (the next add reads s.dtype again); an empty ring is created
            check_ring(self._slots())
            self._initialized = True
        if self.action_space_is_discrete:
            a = self._one_hot_encode_discrete(a)
        if self._slots() == 0:  # keras-gym's self._s[self._i] = s into an empty ring
            raise IndexError("index 0 is out of bounds for axis 0 with size 0")
        # keras-gym's assignments, in its order (a failing one stores nothing here); the
        # Python scalars that need no conversion skip the NumPy round trip
        frame = assigned(s, self._s_shape, self._s_dtype)
        action = assigned(a, self._a_shape, self._a_dtype)
        reward = r if type(r) is float else assigned(r, (), _FLOAT64)
        is_done = done if type(done) is bool else bool(assigned(done, (), _BOOL))
        if type(episode_id) is int and _INT32_MIN <= episode_id <= _INT32_MAX:
            eid = episode_id
        else:
            eid = int(assigned(episode_id, (), _INT32))
        core = self._core if self._core is not None else self._init_core()
        if self._running is not None and eid != self._running:
            core.end_episode(0, next_obs=self._blank)  # a cut: nothing to bootstrap from
        ids = core.add(
            obs=frame,
            action=action,
            reward=reward,
            episode_id=eid,
            terminated=is_done,
            truncated=False,
            next_obs=self._blank,  # read only when the step ends its episode
        )
        self._last_id = int(ids[0])
        if self._adds == 0:
            self._first_id = self._last_id
        self._adds += 1
        self._running = None if is_done else eid
        self._num_transitions = min(self._num_transitions + 1, self._slots())

    def clear(self) -> None:
        """Clear the experience replay buffer (the shapes fixed by the first add stay)."""
        if self._core is not None:
            if self._running is not None:
                # The next add then starts a fresh episode, whose frame stacks are padded with
                # its own first frame rather than reaching for frames cleared away.
                self._core.end_episode(0, next_obs=self._blank)
                self._running = None
            self._core.clear()
        self._adds = 0
        self._num_transitions = 0

    def _init_core(self) -> ReplayBuffer:
        M = self._slots()
        check_ring(M)
        # The core needs an n-step window of at least one step and room for it; with
        # bootstrap_n=0 the windows are empty and sample() reads no successor (S_next = S).
        n_core, k = max(self.bootstrap_n, 1), max(self._frames, 1)
        fields = {
            "obs": Field(self._s_shape, self._s_dtype, observation=True),
            "action": Field(self._a_shape, self._a_dtype),
            "reward": Field((), np.float64),
            "episode_id": Field((), np.int32),  # keras-gym's _e: its sampling rules read it
        }
        self._core = ReplayBuffer(
            # keras-gym keeps M = capacity + bootstrap_n slots; the core keeps num_frames - 1
            # more steps, so the stack of every step still in keras-gym's ring is intact.
            max(M + k - 1, n_core + k),
            fields,
            n_step=n_core,
            gamma=1.0,  # unused: Rn and In are computed here from self.gamma, as keras-gym does
            frame_stack=k,
            stack_pad="first",
            next_fields=("action",),
        )
        self._blank = np.zeros(self._s_shape, self._s_dtype)
        return self._core

    def _extract_last_frame(self, s: Any) -> Any:
        if self.num_frames == 1:
            return s
        # keras-gym's check_numpy_array(s, axis_size=num_frames, axis=-1)
        if not isinstance(s, np.ndarray):
            raise NumpyArrayCheckError(
                f"expected input to be a numpy array, got type: {type(s)} (with num_frames="
                f"{self.num_frames} a state is a frame stack)"
            )
        # num_frames=None: check_numpy_array(s, axis_size=None) checks no axis size
        if self.num_frames is not None and s.shape[-1] != self.num_frames:  # 0-d: IndexError
            raise NumpyArrayCheckError(
                f"expected input with size(s) {self.num_frames} along axis -1, got shape: "
                f"{s.shape} (the frames are stacked on the last axis)"
            )
        if s.ndim == 3:
            return s[:, :, -1]
        if s.ndim == 4:
            return s[:, :, :, -1]
        # keras-gym builds a NumpyArrayCheckError here but does not raise it: the whole stack
        # is stored as the "frame".
        return s

    # ------------------------------------------------------------------ sampling
    def sample(self) -> tuple[Array, Array, Array, Array, Array, Array]:
        """Get a batch of transitions to be used for bootstrapped updates.

        Returns:
            ``(S, A, Rn, In, S_next, A_next)``, each with a leading axis ``batch_size``:
            ``S``/``S_next`` are states, shape ``(B, *frame, num_frames)`` (``(B, *frame)``
            when ``num_frames == 1``) in the frames' dtype; ``A``/``A_next`` one-hot float64
            ``(B, num_actions)`` for a ``Discrete`` action space, else the actions
            ``(B, *action_space.shape)``; ``Rn`` and ``In`` float64 ``(B,)``. Typically used
            to minimise ``(Rn + In * sum_a P(a|S_next) Q(S_next, a) - Q(S, A))^2``.

        With ``bootstrap_n=0`` keras-gym's window is empty: ``Rn = 0``, ``In = gamma**0 = 1``,
        ``S_next = S`` and ``A_next = A`` (any stored step may be drawn, the newest included).
        With ``bootstrap_n = -m < 0`` the window is empty too: ``Rn = 0``, ``In = gamma**-m``
        (never 0), and ``S_next``/``A_next`` are the state and action ``m`` steps *before*
        ``S`` in its episode; ``len(self)`` counts ``m`` more than the ring holds, as in
        keras-gym. A draw whose step ``t - m`` is not in the ring and in ``t``'s episode is
        drawn again (keras-gym reads another step there: see the migration page).
        With ``num_frames=0`` keras-gym's stack indices are empty: ``S``/``S_next`` have shape
        ``(B, *s.shape, 0)`` and ``A``/``A_next`` shape ``(0, *a_shape)``.

        Raises:
            InsufficientCacheError: Fewer than ``batch_size`` transitions (``len(self)``).
            ValueError: ``batch_size < 1`` (keras-gym's ``np.stack`` of nothing).
            EmptyRingError: The ring holds nothing while ``len(self)`` passes the size check
                (a negative ``bootstrap_n``; a ``RuntimeError``, as keras-gym raises).
            FrameCountError: The env's ``num_frames`` is None (a ``TypeError``, as keras-gym's
                ``None - 1``; one draw is consumed first, as in keras-gym).
            SampleConstructionError: No valid batch in ``10 * batch_size`` draws (a
                ``RuntimeError``, as keras-gym raises).
        """
        if not self._initialized or len(self) < self.batch_size:
            raise InsufficientCacheError(
                f"insufficient cached data to sample from: {len(self)} transitions, "
                f"batch_size={self.batch_size}; add more transitions before sampling"
            )
        B = self.batch_size
        if B < 1:  # keras-gym's np.stack of an empty list
            raise ValueError("need at least one array to stack")
        if not self._num_transitions or self._core is None:
            # reachable with a negative bootstrap_n (len() counts -bootstrap_n more) after a
            # clear(), or after a first add that failed past keras-gym's _init_cache
            raise EmptyRingError(
                f"please insert more transitions before sampling: the ring is empty, len() = "
                f"{len(self)} counts -bootstrap_n = {-self.bootstrap_n} slots that hold nothing"
            )
        if self.num_frames is None:  # keras-gym: np.arange(self.num_frames - 1, -1, -1)
            self.random.randint(self._num_transitions)  # keras-gym draws j first
            raise FrameCountError(
                "num_frames: expected the env's int frame count to sample stacks, got None "
                "(keras-gym: unsupported operand type(s) for -: 'NoneType' and 'int'); "
                "set env.num_frames"
            )
        core = self._core
        ids, steps, done = self._draw(core, B)
        self._last_ids = ids
        Rn = self._returns(core, ids, steps)
        In = np.where(done, 0.0, np.power([self.gamma], self.bootstrap_n))
        if self._frames < 1:
            # keras-gym: js = j - np.arange(num_frames - 1, -1, -1) is empty, so every state
            # is an empty stack and A = self._a[js[~0:]] has no rows.
            S = np.zeros((B, *self._s_shape, 0), self._s_dtype)
            A = np.zeros((0, *self._a_shape), self._a_dtype)
            return S, A, Rn, In, S.copy(), A.copy()
        if self.bootstrap_n == 0:
            # keras-gym: ks = js + 0, so S_next and A_next are S and A (copies, as its fancy
            # indexing makes); the newest step has no successor, so the core's transitions
            # are not used.
            obs = self._stacks(core, ids)
            action = core.get_field("action", ids)
            return self._states(obs), action, Rn, In, self._states(obs), action.copy()
        if self.bootstrap_n < 0:
            # keras-gym: ks = js + bootstrap_n, the stack bootstrap_n steps *before* S (the
            # drawn steps are in their episode, _backward_kept); Rn = 0, In = gamma**-m.
            src = ids + self.bootstrap_n
            return (
                self._states(self._stacks(core, ids)),
                core.get_field("action", ids),
                Rn,
                In,
                self._states(self._stacks(core, src)),
                core.get_field("action", src),
            )
        batch = core.get_transitions(ids)
        S_next, A_next = batch.next_obs, batch.next_action
        if done.any():
            S_next, A_next = S_next.copy(), A_next.copy()
            S_next[done], A_next[done] = self._after_done(core, ids[done])
        return (
            self._states(batch.obs),
            batch.action,
            Rn,
            In,
            self._states(S_next),
            A_next,
        )

    def _stacks(self, core: ReplayBuffer, ids: Array) -> Array:
        """Frame stacks of ``ids`` (core layout), padded with the episode's first frame."""
        k = self._frames
        pos = ids[:, None] - np.arange(k - 1, -1, -1)
        pos = np.maximum(pos, core.episode_begin(ids)[:, None])
        frames = core.get_field("obs", pos.reshape(-1))
        frames = frames.reshape(pos.shape + frames.shape[1:])
        return frames if k > 1 else frames[:, 0]

    def _draw(self, core: ReplayBuffer, B: int) -> tuple[Array, Array, Array]:
        """The seed's keras-gym draws: core ids, window lengths and done flags of ``B`` kept.

        Each attempt draws ``j = random.randint(num_transitions)`` (a ring slot, the newest
        frame of the stack) and is kept under the seed's rules (``_e[js[:-1]] > ep`` and,
        unless the window hits a ``done``, ``_e[ks] > ep`` reject it) and the front-end's
        fixes (a window not stored yet, or one running past a cut, is rejected).
        """
        M, n = self._slots(), self.bootstrap_n
        adds, last = self._adds, self._last_id
        kept: list[tuple[Array, Array, Array]] = []
        got = drawn = 0
        budget = _ATTEMPTS_PER_ITEM * B
        while got < B and drawn < budget:
            need = min(B - got, budget - drawn)
            j = self.random.randint(self._num_transitions, size=need)
            drawn += need
            i = j + M * ((adds - 1 - j) // M)  # the add keras-gym's slot j holds
            t = self._first_id + i
            to_end = core.steps_to_episode_end(t)  # -1 while the episode runs
            in_window = (to_end >= 0) & (to_end < n)
            done = in_window & core.get_field("terminated", t + np.where(in_window, to_end, 0))
            # the window is stored: it ends its episode, or step t + n exists
            known = in_window | (t + n <= last)
            # keras-gym: "if not done and np.any(self._e[ks] > ep): continue" (a cut episode)
            cut = in_window & ~done
            ok = known & ~cut & ~self._seed_rejects(core, j, t)
            if n < 0:
                ok &= self._backward_kept(core, j, t)
            steps = np.where(in_window, to_end + 1, n)
            kept.append((t[ok], steps[ok], done[ok]))
            got += int(ok.sum())
        if got < B:
            why = (
                f"bootstrap_n={n} bootstraps from step t - {-n}, which most drawn steps do not "
                "have in their episode in the ring"
                if n < 0
                else "most stored windows reach the end of an episode that was cut (a new "
                "episode_id without done), which leaves nothing to bootstrap from"
            )
            raise SampleConstructionError(
                f"couldn't construct valid sample: {got} of {drawn} draws were valid; {why}"
            )
        ids, steps, done = (np.concatenate(parts) for parts in zip(*kept, strict=True))
        return ids, steps, done

    def _seed_rejects(self, core: ReplayBuffer, j: Array, t: Array) -> Array:
        """keras-gym's ``if np.any(self._e[js[:-1]] > ep): continue`` for drawn slots ``j``.

        ``js[:-1]`` are the ring slots ``j - 1 .. j - num_frames + 1`` (wrapping round), read
        as keras-gym holds them: the newest add in each, id 0 for a slot not written since the
        last ``clear``; ``ep`` is the id of ``t``, the add in slot ``j``. Where such a draw is
        kept, the front-end builds the stack from the frames the agent saw (fix 2).
        """
        k, M = max(self._frames, 1), self._slots()
        if k == 1:
            return np.zeros(j.shape, bool)
        return self._larger_ids(core, (j[:, None] - np.arange(1, k)) % M, t)

    def _backward_kept(self, core: ReplayBuffer, j: Array, t: Array) -> Array:
        """Draws kept with a negative ``bootstrap_n = -m`` (``S_next`` is ``m`` steps before ``S``).

        The seed's window ``ls`` is then empty (``Rn = 0``, never ``done``) and it reads
        ``S_next``/``A_next`` at ring slots ``ks = js - m``, rejecting only a slot of ``ks``
        holding a larger episode id (``np.any(self._e[ks] > ep)``): kept as in the seed.
        Where ``ks`` does not hold step ``t - m`` of the same episode the seed returns another
        step: the ``np.empty`` memory of a slot never written (or not since a ``clear``), a
        newer step past the overwrite boundary, or a step of the previous episode. Those
        draws are rejected (fixes 1, 2, 3 and 6 of the migration page), and drawn again.
        """
        k, M = max(self._frames, 1), self._slots()
        src = t + self.bootstrap_n  # the step keras-gym means: m steps before t
        held = (src >= self._first_id) & (src > self._last_id - M) & (src >= core.episode_begin(t))
        slots = (j[:, None] + self.bootstrap_n - np.arange(k - 1, -1, -1)) % M
        out: Array = held & ~self._larger_ids(core, slots, t)
        return out

    def _larger_ids(self, core: ReplayBuffer, slots: Array, t: Array) -> Array:
        """Per row: does any of ring ``slots`` (as keras-gym holds them) hold an id above ``t``'s?

        A slot not written since the last ``clear`` holds id 0 (keras-gym's ``np.zeros``).
        """
        written = slots < self._num_transitions
        held = self._slot_ids(np.where(written, slots, 0)).reshape(-1)
        eids = np.where(written, core.get_field("episode_id", held).reshape(slots.shape), 0)
        larger: Array = eids > core.get_field("episode_id", t)[:, None]
        out: Array = np.any(larger, axis=1)
        return out

    def _returns(self, core: ReplayBuffer, ids: Array, steps: Array) -> Array:
        """``Rn``, summed in keras-gym's order with ``self.gamma`` (read now, as keras-gym does)."""
        n = self.bootstrap_n
        window = np.minimum(ids[:, None] + np.arange(n), self._last_id)
        rewards = core.get_field("reward", window.reshape(-1)).reshape(window.shape)
        rn = np.zeros(ids.shape[0])
        for u in range(n):  # over the window, vectorised over the batch
            rn += np.where(u < steps, pow(self.gamma, u) * rewards[:, u], 0.0)
        return rn

    def _after_done(self, core: ReplayBuffer, ids: Array) -> tuple[Array, Array]:
        """keras-gym's ``S_next``/``A_next`` rows of done windows (core layout), masked by In=0.

        keras-gym reads the stack ``ks`` ending at ``t + bootstrap_n`` and the action there,
        whatever episode they are in: the next episode's steps, or for a step not added yet
        the ring slot it wraps to, which holds the step ``capacity + bootstrap_n`` earlier (the
        oldest data). A slot not written since the last ``clear`` reads zeros (keras-gym: its
        ``np.empty`` frame, its ``np.zeros`` action, episode id 0). From the second-newest frame
        back, a frame whose episode id is below the drawn step's repeats its successor
        (keras-gym's ``if self._e[ks[~i]] < ep: ks[~i] = ks[~i + 1]``); frames before the
        episode of ``t`` repeat its first frame.
        """
        k, last, M = self._frames, self._last_id, self._slots()
        target = ids + self.bootstrap_n
        pos = target[:, None] - np.arange(k - 1, -1, -1)
        pos = np.maximum(pos, core.episode_begin(ids)[:, None])
        pos = np.where(pos > last, pos - M, pos)  # not added yet: the slot's oldest data
        blank = pos < self._first_id  # a slot not written since the clear
        read = np.where(blank, last, pos).reshape(-1)
        frames = core.get_field("obs", read)
        frames = frames.reshape(pos.shape + frames.shape[1:])
        frames[blank] = 0
        eids = np.where(blank, 0, core.get_field("episode_id", read).reshape(pos.shape))
        ep = core.get_field("episode_id", ids)
        for c in range(k - 2, -1, -1):  # ks[~i] for i = 1 .. k - 1
            pad = eids[:, c] < ep
            frames[pad, c] = frames[pad, c + 1]
        at = np.where(target > last, target - M, target)
        actions = core.get_field("action", np.where(at < self._first_id, last, at))
        actions[at < self._first_id] = 0
        return (frames if k > 1 else frames[:, 0]), actions

    def _states(self, obs: Array) -> Array:
        if self.num_frames == 1:
            return obs
        # The core stacks frames on axis 1; keras-gym puts them on the last axis. One frame
        # at a time reads contiguous rows: about 4x faster than a strided moveaxis copy.
        out = np.empty((obs.shape[0], *obs.shape[2:], obs.shape[1]), obs.dtype)
        for f in range(obs.shape[1]):
            out[..., f] = obs[:, f]
        return out

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        """keras-gym's buffer is plain arrays and pickles; the core travels as its state."""
        state = dict(self.__dict__)
        core = state.pop("_core")
        state["_core_state"] = None if core is None else core.state_dict()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        core_state = state.pop("_core_state")
        self.__dict__.update(state)
        self._core = None
        if core_state is not None:
            self._init_core().load_state_dict(core_state)

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        if not self._initialized:  # keras-gym: AttributeError (no counters before an add)
            return 0
        return max(0, self._num_transitions - self.bootstrap_n)

    def __bool__(self) -> bool:
        return bool(len(self))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(capacity={self.capacity}, batch_size={self.batch_size}, "
            f"bootstrap_n={self.bootstrap_n}, gamma={self.gamma}, num_frames={self.num_frames}, "
            f"len={len(self)})"
        )
