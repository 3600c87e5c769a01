"""The JAX buffer: a static configuration and pure functions over a :class:`BufferState`.

:func:`make_buffer` checks its arguments once, on the host; the :class:`JaxBuffer` it returns
holds no data, only the configuration and its functions, each compiled by :func:`jax.jit` on
first use and callable as well inside a user's ``jit``, ``lax.scan`` or ``vmap``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlreplay.buffer.budget import ResultBudget
from rlreplay.errors import ConfigError, InvalidIdError
from rlreplay.jax import holes, sequences
from rlreplay.jax import prioritized as per
from rlreplay.jax._lib import jax, jnp, lax, require_jax
from rlreplay.jax.assemble import transitions
from rlreplay.jax.batch import JaxBatch, register_batch
from rlreplay.jax.config import BufferConfig
from rlreplay.jax.draws import distinct, mixed, recent_count, uniform
from rlreplay.jax.episodes import complete_records, draw_episodes
from rlreplay.jax.ring import cleared, first_sampleable, write_index
from rlreplay.jax.state import BufferState, init_state
from rlreplay.jax.steps import checked_step
from rlreplay.jax.transforms import JaxTransform, apply_all, checked, checked_all
from rlreplay.sampling.prioritized_args import _check_uniform_only
from rlreplay.sampling.uniform import draw_options
from rlreplay.spec import positive_int

__all__ = ["JaxBuffer"]


class JaxBuffer:
    """An episode-aware replay buffer for JAX: ``init``, ``add``, ``sample`` and the rest are
    pure functions of a :class:`~rlreplay.jax.BufferState` pytree.

    Semantics are those of :class:`rlreplay.ReplayBuffer` (and, with ``prioritized=True``, of
    :class:`rlreplay.PrioritizedReplayBuffer`) for envs that step together: the same ids
    (``t * num_envs + e``), the same sampleable transitions and, for every id, the same values
    bit for bit (n-step rewards and discounts, ``next_obs`` with final observations at
    episode ends, terminated vs truncated, frame stacks), the same sequences
    (:meth:`get_sequences`), the same laws for draws (which come from JAX keys, not NumPy's
    generator: uniform with the recency mix, proportional or rank-based priorities, sequence
    starts) and the same :meth:`clear`. Where they differ:

    * An env keeps the final observations of at most ``finals_per_env`` ended episodes
      (default ``C // 4``). Ending one more while its ring still holds that many drops the
      env's oldest stored episode whole, as :meth:`rlreplay.ReplayBuffer.dequeue` would: short
      episodes then stay in the buffer for less than ``C`` steps. ``finals_per_env=C`` never
      drops anything, at the cost of ``C`` final observations per env.
    * ``beta`` moves along its schedule once per :meth:`update_priorities` call (a pure
      :meth:`sample` returns no state); ``sample(..., beta=b)`` overrides it.
    * Rank-based priorities are ranked exactly at every draw (the core's ``sort_interval=1``;
      the core re-sorts every ``sort_interval`` changes and ranks the changes in between
      against its last sort): a sort of ``E * C`` priorities per draw.
    * :meth:`update_priorities` gives an id named several times in one call the largest of
      its values (the NumPy core: the last); a scatter's order is undefined under XLA.
    * Draws descend a float32 tree: a transition's probability is ``P(i)`` up to float32
      rounding of the running sums (relative ``~N * 2**-24`` for ``N`` transitions of equal
      priority); uniform draws use one 32-bit word each (relative ``N * 2**-32``).
    * Ids, steps and counters are int32 unless ``jax_enable_x64`` is on (then int64), and
      64-bit fields are stored in 32 bits likewise: ids wrap after ``2**31`` transitions.
      Probabilities and the priority trees are float32.
    * Under ``jit`` nothing can raise on values: :meth:`update_priorities` ignores ids never
      issued or overwritten and values that are negative, NaN or infinite; ``sample`` on a
      buffer where :meth:`can_sample` is False returns arbitrary rows with weight 0 (uniform:
      weight 1) instead of raising. Shapes, dtypes and keys are checked when tracing.
    * :meth:`sample_episodes` pads every episode to a static ``max_length`` (the core: to the
      batch's longest).
    * Transforms are traced functions of the batch; one that needs randomness takes a
      ``key`` (see :mod:`rlreplay.jax.transforms`); bindable ones are refused.
    * Not offered: rate limiters (:func:`~rlreplay.jax.to_replay_buffer` gives a NumPy buffer
      that has them).

    Every function is jitted (batch sizes, sequence lengths and flags are static) and works inside
    ``lax.scan`` and under ``vmap`` (one buffer per seed: ``jax.vmap(lambda _: buf.init())(
    jnp.arange(n))``); wrap it in ``jax.jit(..., donate_argnums=0)`` to update the state in
    place.

    Cost: ``add`` writes ``E`` rows per column plus ``O(E)`` bookkeeping (prioritized:
    ``E * (n_step + frame_stack)`` leaves of an 8-ary sum and min tree, ``O(8 * levels)``
    each); ``sample`` and ``get_transitions`` are ``O(B * (n_step + frame_stack))`` gathers
    (prioritized: plus a descent of ``O(B * 8 * levels)``; rank-based: plus a sort of the
    ``E * C`` priorities); ``sample_sequences`` and ``get_sequences`` gather ``B * L`` rows
    (``pad=False``: see there); ``update_priorities`` is ``O(B * 8 * levels)``;
    :meth:`clear` is ``O(E)`` (prioritized: ``O(E * C)``). Within one jitted step, call
    :meth:`add` before :meth:`sample`: XLA copies an array that is read and then overwritten
    without a data dependence between the two (a whole column per step).

    Example:
        >>> import jax, numpy as np, rlreplay as rr, rlreplay.jax as rrj
        >>> buf = rrj.make_buffer(capacity=64, fields={"obs": rr.Field((2,), np.float32)},
        ...                       num_envs=2, n_step=2)
        >>> state = buf.init()
        >>> step = {"obs": np.zeros((2, 2), np.float32), "reward": np.ones(2, np.float32),
        ...         "terminated": np.array([True, False]), "truncated": np.zeros(2, bool),
        ...         "next_obs": np.ones((2, 2), np.float32)}
        >>> state = buf.add(state, step)
        >>> bool(buf.can_sample(state, 4)), int(buf.num_sampleable(state))
        (True, 1)
        >>> batch = buf.sample(state, jax.random.key(0), 4)
        >>> batch["ids"].tolist(), batch["next_obs"][0].tolist()
        ([0, 0, 0, 0], [1.0, 1.0])
    """

    def __init__(self, config: BufferConfig, transforms: Any = ()) -> None:
        require_jax()
        register_batch()
        self.config = config
        self._transforms = checked_all(transforms)
        # Results' sizes, checked against the host's size budget before tracing.
        self._budget = ResultBudget(config.schema.fields, 0, config.frame_stack, config.next_fields)
        self._init = jax.jit(lambda: init_state(config))
        self._add = jax.jit(self._add_impl)
        self._sample = jax.jit(
            self._sample_impl,
            static_argnames=("batch_size", "recent_ratio", "replacement", "transform"),
        )
        self._sample_seq = jax.jit(
            self._sample_seq_impl,
            static_argnames=(
                "batch_size", "length", "within_episode", "pad", "balance_envs", "transform"
            ),
        )  # fmt: skip
        self._get_seq = jax.jit(self._get_seq_impl, static_argnames=("length", "within_episode"))
        self._sample_ep = jax.jit(self._sample_ep_impl, static_argnames=("batch_size", "length"))
        self._num_episodes = jax.jit(
            lambda state: jnp.sum(complete_records(config, state)[1]).astype(state.count.dtype)
        )
        self._clear = jax.jit(self._clear_impl)
        self._abandon = jax.jit(lambda state, env: holes.abandon(config, state, env))
        self._update = jax.jit(self._update_impl)
        self._get = jax.jit(self._get_impl)
        self._can_sample = jax.jit(self._can_sample_impl)
        self._num_sampleable = jax.jit(self._num_sampleable_impl)
        self._sampleable = jax.jit(self._sampleable_impl)
        self._rebuild = jax.jit(
            lambda s: s._replace(priorities=per.rebuild(config, s, s.priorities))
        )

    # ------------------------------------------------------------------ sizes
    @property
    def capacity(self) -> int:
        """Transitions stored over all envs (as given to :func:`make_buffer`)."""
        return self.config.capacity

    @property
    def num_envs(self) -> int:
        """Envs that step together (``E``)."""
        return self.config.num_envs

    @property
    def env_capacity(self) -> int:
        """Steps each env keeps (``C = capacity // num_envs``)."""
        return self.config.env_capacity

    @property
    def transforms(self) -> tuple[JaxTransform, ...]:
        """The buffer's ``transforms``, applied in order to every :meth:`sample`."""
        return self._transforms

    @property
    def prioritized(self) -> bool:
        """Whether draws follow priorities."""
        return self.config.prioritized

    def __repr__(self) -> str:
        c = self.config
        return (
            f"JaxBuffer(capacity={c.capacity}, num_envs={c.num_envs}, n_step={c.n_step}, "
            f"frame_stack={c.frame_stack}, prioritized={c.prioritized}, "
            f"fields={list(c.schema.fields)})"
        )

    # ------------------------------------------------------------------ the functions
    def init(self) -> BufferState:
        """An empty buffer's state (arrays of the full capacity, allocated on the device)."""
        out: BufferState = self._init()
        return out

    def add(self, state: BufferState, step: Mapping[str, Any]) -> BufferState:
        """Add one step of every env.

        Args:
            state: The buffer's state.
            step: Every declared field, ``reward``, ``terminated``, ``truncated`` and
                ``next_<obs>`` for each observation field, each with a leading axis ``E``
                (omittable when ``E == 1``). ``next_<obs>`` is given every step and kept only
                where the step ends its episode (``terminated`` or ``truncated``): otherwise
                the next step's observation is the next observation.

        Returns:
            The new state.

        Raises:
            rlreplay.FieldError: A key is missing or unknown (when tracing).
            rlreplay.ShapeError: A value's shape is not ``(E, *field.shape)``.
            rlreplay.DTypeError: A value that NumPy's ``same_kind`` rule cannot cast.
        """
        out: BufferState = self._add(state, step)
        return out

    def sample(
        self,
        state: BufferState,
        key: Any,
        batch_size: int,
        *,
        beta: Any = None,
        recent_ratio: float | None = None,
        recent_steps: Any = None,
        replacement: bool | None = None,
        transform: JaxTransform | None = None,
    ) -> JaxBatch:
        """Draw ``batch_size`` transitions: uniformly, or by priority.

        Args:
            state: The buffer's state.
            key: A JAX random key.
            batch_size: Transitions to draw (static under ``jit``).
            beta: Prioritized buffers: the importance exponent of this draw (default: the
                schedule's value at the state's step).
            recent_ratio: Overrides the buffer's ``recent_ratio`` for this draw (static under
                ``jit``): ``ceil(recent_ratio * batch_size)`` draws, first in the batch, are
                uniform over the ``recent_steps`` newest sampleable transitions of each env.
            recent_steps: Overrides the buffer's ``recent_steps`` (may be traced).
            replacement: Overrides the buffer's ``replacement`` (static). Without it a batch
                has no duplicates whenever enough transitions are sampleable (otherwise it is
                drawn with replacement, as the core draws it): ``O(batch_size ** 2)``
                compares per draw.
            transform: A jittable function ``JaxBatch -> JaxBatch`` applied after the
                buffer's ``transforms`` (static: compiled once per function object; see
                :mod:`rlreplay.jax.transforms`, which also says how one gets a random key).

        Returns:
            A :class:`~rlreplay.jax.JaxBatch` (a mapping with attribute access, and a pytree)
            of the keys of :meth:`rlreplay.ReplayBuffer.sample`'s batch: every declared field,
            ``reward``, ``next_<obs>``, ``terminated``, ``truncated``, ``discount``,
            ``steps``, ``ids``, ``env_ids``, ``weights`` (ones when uniform) and, when
            prioritized, ``probabilities``. Meaningful only where :meth:`can_sample` is True.

        Raises:
            rlreplay.ConfigError: ``batch_size`` not a positive int; a recency option out of
                range, or given to a prioritized buffer; a ``transform`` that is not callable
                or is bindable, or that returns no mapping (when tracing).
        """
        batch_size = positive_int("batch_size", batch_size)
        self._budget.check("batch_size", batch_size, batch_size, "sample")
        if recent_ratio is not None or recent_steps is not None or replacement is not None:
            recent_ratio, recent_steps = self._recency(recent_ratio, recent_steps, replacement)
            replacement = None if replacement is None else bool(replacement)
        if transform is not None:
            transform = checked(transform, "transform")
        out: JaxBatch = self._sample(
            state, key, batch_size=batch_size, beta=beta, recent_ratio=recent_ratio,
            recent_steps=recent_steps, replacement=replacement, transform=transform,
        )  # fmt: skip
        return out

    def _recency(self, recent_ratio: Any, recent_steps: Any, replacement: Any) -> tuple[float, Any]:
        """The draw options of one draw, checked as the core checks them."""
        c = self.config
        ratio = c.recent_ratio if recent_ratio is None else recent_ratio
        steps = c.recent_steps if recent_steps is None else recent_steps
        replace = c.replacement if replacement is None else replacement
        traced = not isinstance(steps, int | np.integer)  # a traced recent_steps: as it is
        dtype = getattr(steps, "dtype", None)
        if traced and (
            isinstance(steps, bool | np.bool_)
            or getattr(steps, "shape", None) != ()
            or dtype is None
            or np.dtype(dtype).kind not in "iu"
        ):
            raise ConfigError(
                f"recent_steps: expected a positive int or an int scalar array, got {steps!r}"
            )
        options = draw_options(ratio, 1 if traced else steps, replace)
        if c.prioritized:
            _check_uniform_only(options)
        # An env holds at most env_capacity steps, so larger windows draw alike (and a host
        # int past the index dtype would not reach the jitted draw).
        return options.recent_ratio, steps if traced else min(options.recent_steps, c.env_capacity)

    def sample_sequences(
        self,
        state: BufferState,
        key: Any,
        batch_size: int,
        length: int,
        *,
        within_episode: bool = True,
        pad: bool = True,
        balance_envs: bool = False,
        beta: Any = None,
        transform: JaxTransform | None = None,
    ) -> JaxBatch:
        """Draw ``batch_size`` sequences of ``length`` consecutive stored steps (R2D2, ALF),
        as :meth:`rlreplay.ReplayBuffer.sample_sequences` draws them.

        Starts are uniform over the stored steps (prioritized: by priority over the
        sampleable ones, with ``weights`` and ``probabilities`` as :meth:`sample`'s). Per-step
        fields are the raw stored ones, shaped ``(B, L, ...)`` (``obs`` a single frame even
        with frame stacking), zero on masked steps, plus each step's ``next_<obs>`` (the next
        step's observation, or the final one where a step ends its episode; zero where
        neither is known, see ``next_known``). ``mask`` ``(B, L)`` marks real steps and is a
        prefix: a sequence stops at the newest stored step of its env and, with
        ``within_episode``, at its episode's last step.

        Args:
            state: The buffer's state.
            key: A JAX random key.
            batch_size: Sequences ``B`` (static under ``jit``).
            length: Steps per sequence ``L`` (static).
            within_episode: Stop sequences at episode ends (static).
            pad: If False, only starts whose ``L`` steps are all real are drawn (static).
                Uniform buffers redraw other starts up to 16 times, then draw the rest
                exactly among all such starts (``O(capacity)``, skipped by
                :func:`jax.lax.cond` when no draw needs it); prioritized buffers renormalise
                the law over those starts (``O(capacity)`` per draw), as the core does.
            balance_envs: Uniform buffers: pick each sequence's env uniformly among the envs
                that have a start, then its start uniformly within that env (ALF
                ``get_batch``); rows come ordered by env (static). With ``pad=False`` and
                ``within_episode`` the draw is exact among all whole runs, ``O(capacity)``.
            beta: Prioritized buffers: the importance exponent (default: the schedule's).
            transform: A jittable function ``JaxBatch -> JaxBatch`` applied to the result
                (the buffer's ``transforms`` are for transitions and are not applied here;
                static, see :mod:`rlreplay.jax.transforms`).

        Returns:
            A :class:`~rlreplay.jax.JaxBatch`: per-step fields, ``next_<obs>``, ``mask``,
            ``next_known``, ``ids`` (first steps, ``(B,)``), ``env_ids``, ``weights`` and,
            when prioritized, ``probabilities``. Meaningful only where :meth:`can_sample`
            is True (``pad=False``: where some start is whole).

        Raises:
            rlreplay.ConfigError: ``batch_size`` or ``length`` not a positive int, a flag
                that is not a bool, or ``balance_envs`` for a prioritized buffer; a
                ``transform`` that is not callable or is bindable.
        """
        if _flag("balance_envs", balance_envs) and self.config.prioritized:
            raise ConfigError(
                "balance_envs: prioritized sequence starts are drawn by priority over all envs"
            )
        batch_size = positive_int("batch_size", batch_size)
        length = positive_int("length", length)
        self._budget.check("length", length, batch_size * length, "sample_sequences", "step")
        if transform is not None:
            transform = checked(transform, "transform")
        out: JaxBatch = self._sample_seq(
            state, key, beta=beta, batch_size=batch_size, length=length,
            within_episode=_flag("within_episode", within_episode), pad=_flag("pad", pad),
            balance_envs=bool(balance_envs), transform=transform,
        )  # fmt: skip
        return out

    def get_sequences(
        self, state: BufferState, ids: Any, length: int, *, within_episode: bool = True
    ) -> JaxBatch:
        """The sequences of ``length`` steps starting at the stored steps ``ids``: what
        :meth:`sample_sequences` returns for those starts, without ``weights`` and
        ``probabilities`` (as :meth:`rlreplay.ReplayBuffer.get_sequences`); rows of ids that
        are not stored hold arbitrary values."""
        length = positive_int("length", length)
        rows = max(_count(ids), 1) * length
        self._budget.check("length", length, rows, "get_sequences", "step")
        out: JaxBatch = self._get_seq(
            state, ids, length=length,
            within_episode=_flag("within_episode", within_episode),
        )  # fmt: skip
        return out

    def sample_episodes(
        self, state: BufferState, key: Any, batch_size: int, max_length: int | None = None
    ) -> JaxBatch:
        """Draw ``batch_size`` whole episodes, uniformly with replacement among the complete
        ones (ended with a final observation, every step still stored), as
        :meth:`rlreplay.ReplayBuffer.sample_episodes` draws them.

        Each row holds one episode's steps from its first, padded to ``max_length``: the keys
        of :meth:`sample_sequences` (per-step fields, ``next_<obs>``, ``mask``,
        ``next_known``, ``ids`` and ``env_ids`` of the first steps) but ``weights``, plus
        ``lengths``, each episode's length. The core pads to the batch's longest episode; a
        shape under ``jit`` is static, so here every row has ``max_length`` steps (default:
        ``env_capacity``, which no stored episode exceeds). An episode longer than a smaller
        ``max_length`` gives its first ``max_length`` steps (``mask``), with its full
        ``lengths``.

        Args:
            state: The buffer's state.
            key: A JAX random key.
            batch_size: Episodes ``B`` (static under ``jit``).
            max_length: Steps per row ``L`` (static; default ``env_capacity``).

        Returns:
            A :class:`~rlreplay.jax.JaxBatch`, meaningful where :meth:`num_episodes` is
            positive (arbitrary rows otherwise: nothing raises inside ``jit``).

        Raises:
            rlreplay.ConfigError: ``batch_size`` or ``max_length`` not a positive int.
        """
        batch_size = positive_int("batch_size", batch_size)
        length = self.config.env_capacity if max_length is None else max_length
        length = positive_int("max_length", length)
        self._budget.check("batch_size", batch_size, batch_size * length, "sample_episodes",
                           "step")  # fmt: skip
        out: JaxBatch = self._sample_ep(state, key, batch_size=batch_size, length=length)
        return out

    def num_episodes(self, state: BufferState) -> Any:
        """A traced int: how many complete episodes :meth:`sample_episodes` draws from."""
        return self._num_episodes(state)

    def clear(self, state: BufferState) -> BufferState:
        """Drop every stored transition, as :meth:`rlreplay.ReplayBuffer.clear` does.

        Ids keep counting (the next :meth:`add` writes the ids it would have written), so
        ids issued before stay recognisably stale; priorities of a prioritized buffer no
        longer matter, while the largest one applied and ``beta``'s step stay. An episode
        running across the call goes on: its steps after it are stored and sampleable as
        those of an episode whose start was overwritten. ``O(capacity)`` for a prioritized
        buffer (its tree is emptied), ``O(num_envs)`` otherwise.
        """
        out: BufferState = self._clear(state)
        return out

    def abandon_episode(self, state: BufferState, env_id: Any = 0) -> BufferState:
        """Abandon the running episode of env ``env_id``: end it at its newest step,
        unobserved, as :meth:`rlreplay.ReplayBuffer.abandon_episode` does.

        For a running episode whose continuation is lost (an env reset without a final
        observation, a crashed actor): there is no final observation and no flag. The
        episode's steps whose ``n_step`` windows are complete inside it stay sampleable; its
        last ``n_step`` steps stay stored (for :meth:`get_sequences` and
        :meth:`sample_sequences`) but are never sampleable: :meth:`sample` never draws them,
        a prioritized buffer gives them no mass and :meth:`update_priorities` ignores their
        ids. Sequences with ``within_episode`` stop at the cut (its ``next_known`` is False),
        :meth:`sample_episodes` leaves the episode out, and the env's next :meth:`add` starts
        a new episode. A no-op for an env where no episode runs (no step yet, or its newest
        step ends its episode). Conversions (:func:`~rlreplay.jax.to_replay_buffer`,
        :func:`~rlreplay.jax.from_replay_buffer`) keep the cut.

        Cost: ``O(E * n_step)``. While the never-sampleable steps of an abandoned episode lie
        among an env's stored, otherwise sampleable steps, a uniform :meth:`sample` and
        :meth:`num_sampleable` take ``O(capacity)`` (under :func:`jax.lax.cond`: a buffer
        without such steps pays nothing; under ``vmap`` the whole batch takes one branch,
        the exact one if any of its buffers needs it, see :func:`rlreplay.jax.holes.cond_any`).

        Args:
            state: The buffer's state.
            env_id: An int scalar (may be traced; a traced id out of range abandons
                nothing), or a bool mask of shape ``(E,)`` abandoning every env it marks.

        Returns:
            The new state.

        Raises:
            rlreplay.InvalidIdError: A concrete ``env_id`` that is not an env of this buffer.
            rlreplay.ConfigError: ``env_id`` neither an int scalar nor a bool ``(E,)`` mask
                (when tracing).
        """
        E = self.config.num_envs
        if isinstance(env_id, int | np.integer) and not isinstance(env_id, bool | np.bool_):
            if not 0 <= int(env_id) < E:
                raise InvalidIdError(f"env_id: expected an env in [0, {E}), got {int(env_id)}")
        else:
            value = env_id if hasattr(env_id, "dtype") else np.asarray(env_id)
            shape, dtype = tuple(value.shape), np.dtype(value.dtype)
            if not ((shape == (E,) and dtype == np.bool_) or (shape == () and dtype.kind in "iu")):
                raise ConfigError(
                    f"env_id: expected an int scalar or a bool mask of shape ({E},), got "
                    f"{dtype} values of shape {shape}"
                )
        env = holes.env_mask(self.config, env_id)
        out: BufferState = self._abandon(state, env)
        return out

    def update_priorities(self, state: BufferState, ids: Any, priorities: Any) -> BufferState:
        """Set the priorities of sampled transitions (prioritized buffers).

        ``priorities`` (one per id, usually ``|td_error|``) are clipped to ``priority_clip``
        and get ``eps`` added; an id given several times gets the largest of its values. Ids
        overwritten since they were drawn, ids never issued and values that are negative, NaN
        or infinite are ignored. Advances the ``beta`` schedule by one step.

        Raises:
            rlreplay.ConfigError: The buffer is not prioritized.
        """
        if not self.config.prioritized:
            raise ConfigError(
                "update_priorities: this buffer samples uniformly; make it with "
                "prioritized=True to sample by priority"
            )
        out: BufferState = self._update(state, ids, priorities)
        return out

    def get_transitions(self, state: BufferState, ids: Any) -> JaxBatch:
        """Assemble the transitions ``ids`` (which should be sampleable: :meth:`sampleable`).

        Returns:
            A batch like :meth:`sample`'s (``weights`` ones, no ``probabilities``), in the
            order of ``ids``; rows of ids that are not sampleable hold arbitrary values.
        """
        n = _count(ids)
        self._budget.check("ids", f"{n} ids", n, "get_transitions")
        out: JaxBatch = self._get(state, ids)
        return out

    def can_sample(self, state: BufferState, batch_size: int = 1) -> Any:
        """A traced bool: whether :meth:`sample` draws real transitions now.

        As :meth:`rlreplay.ReplayBuffer.sample`, a batch of any size is drawn (with
        replacement) once one transition is sampleable; a prioritized buffer also needs one
        of priority ``> 0``. For a warm-up size use ``num_sampleable(state) >= n``.
        """
        positive_int("batch_size", batch_size)
        return self._can_sample(state)

    def num_sampleable(self, state: BufferState) -> Any:
        """A traced int: how many transitions :meth:`sample` draws from."""
        return self._num_sampleable(state)

    def sampleable(self, state: BufferState, ids: Any) -> Any:
        """A traced bool per id: whether the transition is sampleable now."""
        return self._sampleable(state, ids)

    # ------------------------------------------------------------------ implementations
    def _add_impl(self, state: BufferState, step: Mapping[str, Any]) -> BufferState:
        c = self.config
        values = checked_step(c, step)
        done = values["terminated"] | values["truncated"]
        new, written = write_index(c, state, done)
        columns = {
            name: lax.dynamic_update_slice_in_dim(col, values[name], written.row0, 0)
            for name, col in state.columns.items()
        }
        finals = {
            name: fin.at[written.final_pos].set(values["next_" + name], mode="drop")
            for name, fin in state.finals.items()
        }
        new = new._replace(columns=columns, finals=finals)
        new = new._replace(lo=first_sampleable(c, new))
        if new.priorities is not None:
            new = new._replace(priorities=per.after_write(c, new, new.priorities, written))
        return new

    def _sample_impl(
        self, state: BufferState, key: Any, batch_size: int, beta: Any,
        recent_ratio: float | None, recent_steps: Any, replacement: bool | None,
        transform: JaxTransform | None,
    ) -> JaxBatch:  # fmt: skip
        batch = self._draw_impl(state, key, batch_size, beta, recent_ratio, recent_steps,
                                replacement)  # fmt: skip
        fns = self._transforms + (() if transform is None else (transform,))
        return apply_all(fns, batch, key) if fns else batch

    def _draw_impl(
        self, state: BufferState, key: Any, batch_size: int, beta: Any,
        recent_ratio: float | None, recent_steps: Any, replacement: bool | None,
    ) -> JaxBatch:  # fmt: skip
        c = self.config
        if state.priorities is not None:
            pri = state.priorities
            b = per.beta_at(c, pri.beta_step) if beta is None else jnp.float32(beta)
            env, t, probabilities, weights = per.draw(c, state, pri, key, batch_size, b)
            out = transitions(c, state, env, t)
            out["weights"] = weights.astype(jnp.float32)
            out["probabilities"] = probabilities
            return JaxBatch(out)
        recent = recent_count(c.recent_ratio if recent_ratio is None else recent_ratio, batch_size)
        steps = min(c.recent_steps, c.env_capacity) if recent_steps is None else recent_steps

        def draw(lo: Any, hi: Any, key: Any, steps: Any) -> tuple[Any, Any]:  # over [lo, hi)
            def with_replacement() -> tuple[Any, Any]:
                if recent:
                    return mixed(lo, hi, key, batch_size, recent, steps)
                return uniform(lo, hi, key, batch_size)

            if c.replacement if replacement is None else replacement:
                return with_replacement()
            # Distinct whenever enough are sampleable (else as the core: with replacement).
            out: tuple[Any, Any] = lax.cond(
                batch_size <= jnp.sum(jnp.maximum(hi - lo, 0)),
                lambda: distinct(lo, hi, key, batch_size, recent, steps),
                with_replacement,
            )
            return out

        # Over the sampleable steps: abandoned episodes' holes left out (holes.draw_around).
        env, t = holes.draw_around(c, state, draw, key, jnp.asarray(steps))
        out = transitions(c, state, env, t)
        out["weights"] = jnp.ones(batch_size, jnp.float32)
        return JaxBatch(out)

    def _sample_seq_impl(
        self, state: BufferState, key: Any, beta: Any, batch_size: int, length: int,
        within_episode: bool, pad: bool, balance_envs: bool, transform: JaxTransform | None,
    ) -> JaxBatch:  # fmt: skip
        c = self.config
        if state.priorities is not None:
            beta = per.beta_at(c, state.priorities.beta_step) if beta is None else beta
            beta = jnp.float32(beta)
        env, t0, weights, probabilities = sequences.starts(
            c, state, key, batch_size, length, within_episode, pad, beta, balance_envs
        )
        out = sequences.gather(c, state, env, t0, length, within_episode)
        out["weights"] = weights
        if probabilities is not None:
            out["probabilities"] = probabilities
        return JaxBatch(out) if transform is None else apply_all((transform,), JaxBatch(out), key)

    def _get_seq_impl(
        self, state: BufferState, ids: Any, length: int, within_episode: bool
    ) -> JaxBatch:
        E = self.config.num_envs
        ids = jnp.asarray(ids).astype(state.count.dtype).reshape(-1)
        env, t0 = jnp.mod(ids, E), jnp.floor_divide(ids, E)
        return JaxBatch(sequences.gather(self.config, state, env, t0, length, within_episode))

    def _sample_ep_impl(
        self, state: BufferState, key: Any, batch_size: int, length: int
    ) -> JaxBatch:
        env, start, lengths = draw_episodes(self.config, state, key, batch_size)
        out = sequences.gather(self.config, state, env, start, length, True)
        out["lengths"] = lengths
        return JaxBatch(out)

    def _clear_impl(self, state: BufferState) -> BufferState:
        new = cleared(state)
        if new.priorities is not None:
            new = new._replace(priorities=per.clear(new.priorities))
        return new

    def _update_impl(self, state: BufferState, ids: Any, priorities: Any) -> BufferState:
        if state.priorities is None:
            raise ConfigError("update_priorities: the state holds no priorities (a uniform one)")
        pri = per.update(self.config, state, state.priorities, ids, priorities)
        return state._replace(priorities=pri)

    def _get_impl(self, state: BufferState, ids: Any) -> JaxBatch:
        E = self.config.num_envs
        ids = jnp.asarray(ids).astype(state.count.dtype).reshape(-1)
        env = jnp.mod(ids, E)
        out = transitions(self.config, state, env, jnp.floor_divide(ids, E))
        out["weights"] = jnp.ones(ids.shape[0], jnp.float32)
        return JaxBatch(out)

    def _num_sampleable_impl(self, state: BufferState) -> Any:
        return holes.num_sampleable(self.config, state)

    def _sampleable_impl(self, state: BufferState, ids: Any) -> Any:
        ids = jnp.asarray(ids).astype(state.count.dtype)
        env = jnp.mod(ids, self.config.num_envs)
        t = jnp.floor_divide(ids, self.config.num_envs)
        in_range = (ids >= 0) & (t >= state.lo[env]) & (t < state.hi[env])
        return in_range & ~holes.in_hole(self.config, state, env, t)

    def _can_sample_impl(self, state: BufferState) -> Any:
        if state.priorities is not None:
            return state.priorities.sums[-1][0] > 0
        return self._num_sampleable_impl(state) > 0


def _count(ids: Any) -> int:
    """How many ids ``ids`` holds (an array, a traced array, a list; 1 for a scalar)."""
    try:
        shape = ids.shape if hasattr(ids, "shape") else np.shape(ids)
    except (TypeError, ValueError):  # ragged or odd: left to the call's own checks
        return 1
    return math.prod(int(n) for n in shape)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(f"{name}: expected a bool, got {value!r}")
    return bool(value)
