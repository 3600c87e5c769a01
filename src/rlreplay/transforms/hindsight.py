"""Hindsight relabelling (HER): replace sampled goals with goals the episode achieved later.

Notation, for a sampled transition at absolute step ``t`` of an episode whose last step is ``d``
(the episode has ``T`` steps and ``d`` is its ``T-1``-th): ``ng(j)`` is the *next achieved goal*
of step ``j``, the achieved goal observed after step ``j``. For ``j < d`` it is the achieved goal
stored at step ``j + 1``; for ``j = d`` it is the episode's final record (``next_achieved_goal``
given to :meth:`~rlreplay.ReplayBuffer.add`). In the usual HER notation ``ng(j) = ag_{j+1}``.

A goal is ``ng(g)`` for a *goal step* ``g`` drawn uniformly from an inclusive range:

* ``"future"``: ``g in [t, d]``, i.e. one of ``ag_{t+1} .. ag_T``;
* ``"final"``: ``g = d``, i.e. ``ag_T``;
* ``"episode"``: ``g in [first, d]`` where ``first`` is the episode's first *stored* step
  (``max(episode start, oldest stored step of the env)``), i.e. ``ag_1 .. ag_T`` when nothing
  of the episode was overwritten.

Every step of those ranges is a stored step of the same episode (the sampled step ``t`` is stored
and steps of one env are stored contiguously up to the newest), so a goal never comes from an
overwritten step or from another episode.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from rlreplay.batch import Batch
from rlreplay.episodes.index import HEAD, EpisodeIndex
from rlreplay.errors import ConfigError, FieldError, InvalidIdError, ShapeError
from rlreplay.storage.columns import Columns

if TYPE_CHECKING:
    # What a bound buffer offers (not rlreplay.buffer.replay, which imports the transforms).
    from rlreplay.transforms.bound import BoundBuffer as ReplayBuffer

__all__ = ["STRATEGIES", "HindsightRelabel", "goal_step_range", "next_values"]

Array = np.ndarray[Any, Any]
RewardFn: TypeAlias = Callable[[Array, Array, dict[str, Array]], Any]

#: The goal-selection strategies :class:`HindsightRelabel` knows.
STRATEGIES = ("future", "final", "episode")


def goal_step_range(strategy: str, t: Array, first: Array, end: Array) -> tuple[Array, Array]:
    """Inclusive range ``[lo, hi]`` of goal steps ``g`` (the goal is ``ng(g) = ag_{g+1}``).

    Args:
        strategy: One of :data:`STRATEGIES`.
        t: Absolute step of each sampled transition.
        first: First stored step of each transition's episode (``<= t``).
        end: Last step of each transition's (finished) episode (``>= t``).

    Returns:
        ``(lo, hi)`` int64 arrays, ``first <= lo <= hi == end``.
    """
    if strategy == "future":
        return t, end
    if strategy == "final":
        return end, end
    if strategy == "episode":
        return first, end
    raise ConfigError(f"strategy: expected one of {STRATEGIES}, got {strategy!r}")


def next_values(
    cols: Columns, index: EpisodeIndex, name: str, env_ids: Array, j: Array, end: Array
) -> Array:
    """Value of observation field ``name`` after steps ``j`` (``<= end``, all stored) of envs.

    The value after step ``j < end`` is the one stored at step ``j + 1``; after the episode's
    last step ``end`` it is the episode's final record.
    """
    C, F = index.env_capacity, index.finals_capacity
    base = env_ids * C
    # At j == end the slot of j + 1 holds another step (or nothing yet): overwritten just below.
    out: Array = cols.steps[name][base + (j + 1) % C]
    last = np.flatnonzero(j == end)
    if last.size:
        fid = index.final_fid[base[last] + end[last] % C]
        out[last] = cols.finals[name][env_ids[last] * F + fid % F]
    return out


class HindsightRelabel:
    """Sample-time hindsight relabelling of goal-conditioned transitions (HER).

    With probability ``relabel_prob``, each sampled transition of a *finished* episode gets a
    goal the episode achieved (see the module docstring for ``"future"``, ``"final"`` and
    ``"episode"``): its ``desired_goal`` and ``next_desired_goal`` become that goal and its reward
    is recomputed over the n-step window ``t .. t+m-1`` (``m = batch.steps``)::

        reward = sum_{j<m} gamma^j reward_fn(ag_{t+j+1}, goal, info_j)

    where ``ag_{t+j+1}`` is the achieved goal after step ``t+j``. ``info_j`` is a dict of the
    batch's other fields (every key but the four goal arrays) for the relabelled rows; when
    ``n_step > 1`` the stored per-step fields in it (``obs`` unstacked, ``action``, ``reward``,
    ``terminated``, ``truncated``, extras) and ``next_<obs>`` hold the values of step ``t+j``.
    ``reward_fn`` is called once per window position on all relabelled rows alive there, and
    must return one reward per row (shape ``(rows, *reward_shape)``); results are cast to the
    stored reward dtype and summed exactly as the buffer sums stored rewards.

    ``terminated``, ``truncated`` and ``discount`` stay as stored: whether an episode ended is
    the environment's fact, not the goal's (as in nnabla-rl's ``HindsightReplayBuffer`` and
    SB3's HER, which recompute only the reward). Transitions of unfinished episodes, and of
    abandoned ones (``abandon_episode``: no final achieved goal), are left as sampled. Stored
    data is never modified. Every random choice comes from the buffer's generator, so a
    checkpoint reproduces the relabelled stream; per batch it draws ``rng.random(B)`` (who is
    relabelled), then, except for ``"final"``, one ``rng.integers`` call over
    the relabelled rows (which goal).

    Cost: O(B * n_step) vectorised gathers plus at most ``n_step`` calls of ``reward_fn``.

    Args:
        reward_fn: ``(achieved_goal, goal, info) -> reward``, vectorised over rows.
        strategy: ``"future"``, ``"final"`` or ``"episode"``.
        relabel_prob: Probability in ``[0, 1]`` that a finished-episode transition is relabelled.
        achieved_goal: Name of the observation field holding the achieved goal.
        desired_goal: Name of the observation field holding the desired goal.

    Raises:
        ConfigError: A bad argument here, or (when bound) goal fields the buffer does not store
            as observation fields, of different shapes, or stacked by ``frame_stack``.

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> goal = rr.Field((2,), np.float32, observation=True)
        >>> her = rr.HindsightRelabel(
        ...     lambda ag, g, info: -(np.linalg.norm(ag - g, axis=-1) > 0.05).astype(np.float32),
        ...     strategy="future", relabel_prob=1.0)
        >>> buf = rr.ReplayBuffer(100, {"obs": rr.Field((2,), np.float32), "achieved_goal": goal,
        ...                       "desired_goal": goal}, transforms=[her], seed=0)
        >>> for t in range(5):
        ...     p = np.full(2, t, np.float32); q = np.full(2, t + 1, np.float32)
        ...     _ = buf.add(obs=p, achieved_goal=p, desired_goal=np.full(2, 9, np.float32),
        ...                 reward=-1.0, terminated=False, truncated=t == 4, next_obs=q,
        ...                 next_achieved_goal=q, next_desired_goal=np.full(2, 9, np.float32))
        >>> b = buf.sample(8)
        >>> bool(np.all(b.desired_goal[:, 0] > b.obs[:, 0]))  # a goal from the future
        True
    """

    def __init__(
        self,
        reward_fn: RewardFn,
        *,
        strategy: str = "future",
        relabel_prob: float = 0.8,
        achieved_goal: str = "achieved_goal",
        desired_goal: str = "desired_goal",
    ) -> None:
        if not callable(reward_fn):
            raise ConfigError(
                f"reward_fn: expected a callable (achieved_goal, goal, info) -> reward, "
                f"got {reward_fn!r}"
            )
        if strategy not in STRATEGIES:
            raise ConfigError(f"strategy: expected one of {STRATEGIES}, got {strategy!r}")
        if isinstance(relabel_prob, bool) or not isinstance(relabel_prob, int | float | np.number):
            raise ConfigError(f"relabel_prob: expected a number in [0, 1], got {relabel_prob!r}")
        prob = float(relabel_prob)
        if not (math.isfinite(prob) and 0.0 <= prob <= 1.0):
            raise ConfigError(f"relabel_prob: expected a value in [0, 1], got {prob}")
        for arg, name in (("achieved_goal", achieved_goal), ("desired_goal", desired_goal)):
            if not isinstance(name, str):
                raise ConfigError(f"{arg}: expected a field name (str), got {name!r}")
        if achieved_goal == desired_goal:
            raise ConfigError(
                f"achieved_goal and desired_goal: expected two different fields, both are "
                f"{achieved_goal!r}"
            )
        self.reward_fn = reward_fn
        self.strategy = strategy
        self.relabel_prob = prob
        self.achieved_goal = achieved_goal
        self.desired_goal = desired_goal
        self._goal_keys = frozenset(
            {achieved_goal, desired_goal, "next_" + achieved_goal, "next_" + desired_goal}
        )
        self._buffer: weakref.ref[ReplayBuffer] | None = None

    def __repr__(self) -> str:
        return (
            f"HindsightRelabel({getattr(self.reward_fn, '__name__', self.reward_fn)!s}, "
            f"strategy={self.strategy!r}, relabel_prob={self.relabel_prob}, "
            f"achieved_goal={self.achieved_goal!r}, desired_goal={self.desired_goal!r})"
        )

    def __getstate__(self) -> dict[str, Any]:
        # A copy (pickle, copy, deepcopy) is unbound: the buffer it travels with binds it.
        return {**self.__dict__, "_buffer": None}

    # ------------------------------------------------------------------ binding
    def bind(self, buffer: ReplayBuffer) -> None:
        """Check the goal fields against ``buffer`` and attach to it (idempotent).

        Raises:
            ConfigError: The goal fields are not observation fields of ``buffer``, differ in
                shape, cannot be cast into each other, or are stacked (``frame_stack > 1`` on
                ``obs``); or this instance is already bound to another live buffer.
        """
        current = self._buffer() if self._buffer is not None else None
        if current is buffer:
            return
        if current is not None:
            raise ConfigError(
                "HindsightRelabel: this instance is bound to another buffer; create one "
                "HindsightRelabel per buffer"
            )
        fields = buffer.schema.fields
        observation = [n for n, f in fields.items() if f.observation]
        for arg in ("achieved_goal", "desired_goal"):
            name = getattr(self, arg)
            f = fields.get(name)
            if f is None or not f.observation:
                what = "is not a field" if f is None else "is not an observation field"
                raise ConfigError(
                    f"HindsightRelabel {arg}: {name!r} {what} of the buffer; goals must be "
                    f"observation fields (rr.Field(shape, dtype, observation=True) or keys of a "
                    f"Dict observation space); the buffer's observation fields: {observation}"
                )
            if name == "obs" and buffer.frame_stack > 1:
                raise ConfigError(
                    f"HindsightRelabel {arg}: 'obs' is stacked (frame_stack="
                    f"{buffer.frame_stack}); keep goals in their own observation fields"
                )
        ag, dg = fields[self.achieved_goal], fields[self.desired_goal]
        if ag.shape != dg.shape:
            raise ConfigError(
                f"HindsightRelabel: achieved_goal {self.achieved_goal!r} has shape {ag.shape} "
                f"but desired_goal {self.desired_goal!r} has shape {dg.shape}; they must match"
            )
        if not np.can_cast(ag.dtype, dg.dtype, "same_kind"):
            raise ConfigError(
                f"HindsightRelabel: achieved_goal dtype {ag.dtype} cannot be cast safely to "
                f"desired_goal dtype {dg.dtype}"
            )
        self._buffer = weakref.ref(buffer)

    def _bound(self) -> ReplayBuffer:
        buffer = self._buffer() if self._buffer is not None else None
        if buffer is None:
            raise ConfigError(
                "HindsightRelabel: not bound to a buffer; pass it as transforms=[...] or "
                "buf.sample(..., transform=...)"
            )
        return buffer

    # ------------------------------------------------------------------ relabelling
    def __call__(self, batch: Batch) -> Batch:
        """Return ``batch`` with goals and rewards of the chosen transitions relabelled."""
        buffer = self._bound()
        with buffer._lock:
            buffer._check_open()
            return self._relabel(buffer, batch)

    def _check_batch(self, buffer: ReplayBuffer, batch: Batch) -> None:
        missing = [k for k in ("ids", "reward", self.desired_goal) if k not in batch]
        if missing:
            raise FieldError(
                f"HindsightRelabel: the batch lacks {missing}; it relabels batches of "
                f"buffer.sample (which hold ids, reward and the goal fields)"
            )
        ids, dg = batch["ids"], batch[self.desired_goal]
        shape = buffer.schema.fields[self.desired_goal].shape
        if ids.ndim != 1 or dg.shape != (ids.shape[0], *shape):
            raise ShapeError(
                f"HindsightRelabel: expected a batch of transitions (ids of shape (B,), "
                f"{self.desired_goal} of shape (B, *{shape})), got ids {ids.shape} and "
                f"{self.desired_goal} {dg.shape}; sequence batches are not relabelled"
            )

    def _relabel(self, buffer: ReplayBuffer, batch: Batch) -> Batch:
        self._check_batch(buffer, batch)
        index, cols = buffer._index, buffer._cols
        env_ids, t, stale = index.split_ids(batch["ids"])
        if stale.any():
            raise InvalidIdError(
                "HindsightRelabel: the batch holds ids whose steps were overwritten since it was "
                "sampled; relabel a batch before writing to the buffer again"
            )
        slot = index.slots(env_ids, t)
        end = index.ep_end[slot]
        chosen = buffer._rng.random(t.shape[0]) < self.relabel_prob
        # Only finished episodes; an abandoned one (abandon_episode) has no final achieved goal.
        ended = end >= 0
        ended[ended] = index.final_fid[index.slots(env_ids[ended], end[ended])] >= 0
        rows = np.flatnonzero(chosen & ended)
        if rows.size == 0:
            return batch
        env, t, end, slot = env_ids[rows], t[rows], end[rows], slot[rows]
        first = np.maximum(index.ep_start[slot], index.env[env, HEAD])
        lo, hi = goal_step_range(self.strategy, t, first, end)
        g = hi if self.strategy == "final" else buffer._rng.integers(lo, hi, endpoint=True)
        dg_name = self.desired_goal
        goal = next_values(cols, index, self.achieved_goal, env, g, end)
        goal = goal.astype(cols.steps[dg_name].dtype, copy=False)

        info = {k: v[rows] for k, v in batch.items() if k not in self._goal_keys}
        reward = np.array(batch["reward"], copy=True)
        reward[rows] = self._window_reward(buffer, env, t, end, goal, info, reward.dtype)
        out = {"reward": reward}
        for name in (dg_name, "next_" + dg_name):
            if name in batch:
                arr = np.array(batch[name], copy=True)
                arr[rows] = goal
                out[name] = arr
        return batch.replace(**out)

    def _window_reward(
        self,
        buffer: ReplayBuffer,
        env: Array,
        t: Array,
        end: Array,
        goal: Array,
        info: dict[str, Array],
        dtype: np.dtype[Any],
    ) -> Array:
        """``sum_{j<m} gamma^j reward_fn(ag_{t+j+1}, goal, info_j)`` with ``m`` the window."""
        index, cols, n = buffer._index, buffer._cols, buffer.n_step
        rew_dtype = cols.steps["reward"].dtype
        if n == 1:
            ag = next_values(cols, index, self.achieved_goal, env, t, end)
            return self._call(cols, ag, goal, info).astype(rew_dtype, copy=False).astype(dtype)
        m = np.minimum(n, end - t + 1)  # the window stops at the episode's last step
        total = np.zeros((t.shape[0], *cols.steps["reward"].shape[1:]), dtype)
        C = index.env_capacity
        for j in range(n):
            alive = np.flatnonzero(j < m)
            if alive.size == 0:
                break
            e, tj, d = env[alive], t[alive] + j, end[alive]
            slot = e * C + tj % C
            info_j = {k: v[alive] for k, v in info.items()}
            for name, col in cols.steps.items():
                if name not in self._goal_keys:
                    info_j[name] = col[slot]
            for name in cols.finals:
                if "next_" + name not in self._goal_keys:
                    info_j["next_" + name] = next_values(cols, index, name, e, tj, d)
            ag = next_values(cols, index, self.achieved_goal, e, tj, d)
            r = self._call(cols, ag, goal[alive], info_j).astype(rew_dtype, copy=False)
            # The same float operations as the buffer's own n-step sum (assemble.nstep_window).
            total[alive] += (buffer.gamma**j) * r
        return total

    def _call(self, cols: Columns, ag: Array, goal: Array, info: Mapping[str, Array]) -> Array:
        out = np.asarray(self.reward_fn(ag, goal, dict(info)))
        expected = (ag.shape[0], *cols.steps["reward"].shape[1:])
        if out.shape != expected:
            raise ShapeError(
                f"HindsightRelabel reward_fn: expected one reward per row, shape {expected}, got "
                f"shape {out.shape}; make it vectorised over the leading axis"
            )
        return out
