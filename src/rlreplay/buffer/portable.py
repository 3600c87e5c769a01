"""A buffer's contents as plain host arrays in the core's layout: the bridge between the NumPy
core and the device buffers (:mod:`rlreplay.torch`, :mod:`rlreplay.jax`).

Both directions go through the core buffer's public ``state_dict`` / ``load_state_dict``, so
contents written into a core buffer pass every check a checkpoint passes
(:func:`rlreplay.load`): counters, episode starts and ends, final records, sampleable ranges
and priorities. The layout is the core's, row for row: env ``e``'s ring is rows
``e * C .. e * C + C - 1`` of every step column, and env ``e``'s final records are rows
``e * F .. e * F + F - 1`` of every finals column (record ``fid`` in row ``e * F + fid % F``).
A device buffer holds ``F`` records per env; the core's finals ring grows, so its ``F`` may
differ, and both directions move the live records between the two.

A backend converts its own state to and from :class:`Contents` (reordering rows, moving data
off its device); everything that knows the meaning of the core's checkpoint arrays lives here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlreplay.buffer.prioritized import PrioritizedReplayBuffer
from rlreplay.buffer.replay import ReplayBuffer
from rlreplay.errors import ConfigError
from rlreplay.spec import Field

__all__ = ["Contents", "Index", "Priorities", "read_contents", "write_contents"]

Array = np.ndarray[Any, Any]

# Columns of the core index's tables (rlreplay.episodes.kernels; part of the checkpoint format).
COUNT, HEAD, LAST_END, LO, HI, F_COUNT, F_HEAD = range(7)
EP_START, FINAL_FID, EP_END = range(3)
ABANDONED = -2

# The core's keyword arguments of a prioritized buffer, as its state_dict's config names them.
PRIORITY_KEYS = (
    "alpha", "beta", "beta_final", "beta_steps", "eps", "initial_priority", "priority_clip",
    "stratified", "variant",
)  # fmt: skip


@dataclass
class Index:
    """The episode index, env-major, as int64 host arrays.

    Attributes:
        count, head, last_end, lo, hi, f_count, f_head: ``(E,)``: steps added, oldest stored
            step, last episode end, sampleable range ``[lo, hi)``, final records issued and
            the oldest live one.
        ep_start, final_fid: ``(E * C,)`` per row: the first step of the row's episode; the
            step's final record (-1: it does not end its episode).
        final_owner: ``(E * F,)`` per final record row: the step that owns it (-1: none).
    """

    count: Array
    head: Array
    last_end: Array
    lo: Array
    hi: Array
    f_count: Array
    f_head: Array
    ep_start: Array
    final_fid: Array
    final_owner: Array


@dataclass
class Priorities:
    """A prioritized buffer's priorities: ``prio`` ``(E * C,)`` float64 per row (env-major),
    the largest priority recorded and ``beta``'s step."""

    prio: Array
    max_priority: float
    beta_step: int


@dataclass
class Contents:
    """Everything a buffer holds, in the core's layout (see the module docstring).

    Attributes:
        kwargs: The core buffer's keyword arguments besides ``capacity`` and ``fields``
            (``num_envs``, ``n_step``, ... and the prioritized or recency ones).
        capacity: The buffer's capacity, ``E * C``.
        fields: The declared fields.
        finals_per_env: ``F``, final records per env in ``finals``/``index.final_owner``.
        index: The episode index.
        steps: Per field, ``(E * C, *shape)`` in the field's declared dtype.
        finals: Per observation field, ``(E * F, *shape)``.
        priorities: ``None`` for a uniform buffer.
    """

    kwargs: dict[str, Any]
    capacity: int
    fields: dict[str, Field]
    finals_per_env: int
    index: Index
    steps: dict[str, Array]
    finals: dict[str, Array]
    priorities: Priorities | None

    @property
    def prioritized(self) -> bool:
        return self.priorities is not None

    @property
    def rank_based(self) -> bool:
        return self.kwargs.get("variant") == "rank_based"


def _episode_ends(final_fid: Array, head: Array, count: Array, C: int) -> Array:
    """Per slot of a stored step: its episode's last step, -1 while it runs."""
    E = head.shape[0]
    ep_end = np.full(E * C, -1, np.int64)
    never = np.iinfo(np.int64).max
    for e in range(E):
        t = np.arange(int(head[e]), int(count[e]), dtype=np.int64)
        rows = e * C + t % C
        ends = np.where(final_fid[rows] != -1, t, never)
        following = np.minimum.accumulate(ends[::-1])[::-1]  # the first end at or after t
        ep_end[rows] = np.where(following == never, -1, following)
    return ep_end


def _move_finals(head: Array, count: Array, F_from: int, F_to: int) -> tuple[Array, Array]:
    """``(src, dst)`` rows of every env's live final records ``[head, count)`` in a finals
    ring of ``F_from`` records per env and one of ``F_to``."""
    src, dst = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for e in range(head.shape[0]):
        fid = np.arange(int(head[e]), int(count[e]), dtype=np.int64)
        src.append(e * F_from + fid % F_from)
        dst.append(e * F_to + fid % F_to)
    return np.concatenate(src), np.concatenate(dst)


def write_contents(contents: Contents, *, seed: int | None = None) -> ReplayBuffer:
    """A core buffer holding ``contents``: a :class:`rlreplay.PrioritizedReplayBuffer` for
    prioritized contents (a rank-based one ranks exactly before its first draw), else a
    :class:`rlreplay.ReplayBuffer`, seeded with ``seed``."""
    c, ix = contents, contents.index
    E = int(c.kwargs["num_envs"])
    C = c.capacity // E
    cls = PrioritizedReplayBuffer if c.prioritized else ReplayBuffer
    np_buf = cls(c.capacity, dict(c.fields), seed=seed, **c.kwargs)
    sd = np_buf.state_dict()
    env = np.zeros((E, 7), np.int64)
    for col, values in (
        (COUNT, ix.count), (HEAD, ix.head), (LAST_END, ix.last_end), (LO, ix.lo), (HI, ix.hi),
        (F_COUNT, ix.f_count), (F_HEAD, ix.f_head),
    ):  # fmt: skip
        env[:, col] = values
    slot_meta = np.zeros((E * C, 3), np.int64)
    slot_meta[:, EP_START] = ix.ep_start
    slot_meta[:, FINAL_FID] = ix.final_fid
    slot_meta[:, EP_END] = _episode_ends(ix.final_fid, ix.head, ix.count, C)
    arrays: dict[str, Array] = {
        "index/env": env,
        "index/slot_meta": slot_meta,
        "index/final_owner": np.asarray(ix.final_owner, np.int64),
    }
    for name, f in c.fields.items():
        arrays[f"columns/steps/{name}"] = np.asarray(c.steps[name]).astype(f.dtype, copy=False)
    for name, fin in c.finals.items():
        arrays[f"columns/finals/{name}"] = np.asarray(fin).astype(c.fields[name].dtype)
    meta = dict(sd["meta"])
    meta["finals_capacity"] = c.finals_per_env
    if c.priorities is not None:
        pri = c.priorities
        arrays["priorities/prio"] = np.asarray(pri.prio, np.float64)
        meta["priorities"] = {
            "beta_step": int(pri.beta_step),
            "max_priority": float(pri.max_priority),
            "snapshot_size": 0,
            # Rank-based: one change pending, so the core (sort_interval=1) ranks exactly
            # before its first draw, as a device buffer ranks at every draw.
            "changes": 1 if c.rank_based else 0,
        }
        if c.rank_based:
            arrays["priorities/rank"] = np.ones(E * C, np.int64)
            arrays["priorities/snapshot"] = np.zeros(E * C, np.float64)
    np_buf.load_state_dict({**sd, "meta": meta, "arrays": arrays})
    return np_buf


def _refuse(kind: str, cls: str, config: dict[str, Any], env: Array, lockstep: bool) -> None:
    if cls not in ("ReplayBuffer", "PrioritizedReplayBuffer") or "sampler" in config:
        raise ConfigError(
            f"from_replay_buffer: a {cls} with its own sampler has no {kind} counterpart; "
            "expected an rr.ReplayBuffer or an rr.PrioritizedReplayBuffer"
        )
    if config["record_episodic_return"]:
        raise ConfigError(f"from_replay_buffer: record_episodic_return has no {kind} counterpart")
    counts = env[:, COUNT]
    if lockstep and (counts != counts[0]).any():
        raise ConfigError(
            f"from_replay_buffer: the {kind} buffer's envs step together; this buffer's envs "
            f"have added {counts.tolist()} steps"
        )


def _core_kwargs(sd: dict[str, Any]) -> dict[str, Any]:
    config = sd["config"]
    kwargs: dict[str, Any] = {
        k: config[k]
        for k in ("num_envs", "n_step", "gamma", "frame_stack", "stack_pad", "next_fields")
    }
    if sd["class"] == "PrioritizedReplayBuffer":
        kwargs.update({k: config[k] for k in PRIORITY_KEYS})
        if kwargs["priority_clip"] is not None:
            kwargs["priority_clip"] = tuple(kwargs["priority_clip"])
    else:
        kwargs.update({k: config[k] for k in ("recent_ratio", "recent_steps", "replacement")})
    return kwargs


def read_contents(
    np_buf: ReplayBuffer,
    *,
    kind: str,
    finals_per_env: int | None,
    default_finals: Callable[[int, bool], int],
    lockstep: bool = True,
    abandoned: bool = False,
) -> Contents:
    """What a core buffer holds, with ``finals_per_env`` final records per env.

    Args:
        np_buf: An :class:`rlreplay.ReplayBuffer` or :class:`rlreplay.PrioritizedReplayBuffer`.
        kind: The receiving backend, for messages (``"device"``, ``"JAX"``).
        finals_per_env: Final records per env; ``None``: the receiving backend's default,
            or more if an env of ``np_buf`` holds more.
        default_finals: The receiving backend's default ``finals_per_env``, given ``C`` and
            whether the buffer is prioritized.
        lockstep: Whether the receiving buffer's envs step together (refuse envs at
            different steps).
        abandoned: Whether the receiving buffer keeps abandoned episodes (their ends marked
            ``ABANDONED`` in ``index.final_fid``); else they are refused.

    Raises:
        rlreplay.ConfigError: What the receiving buffer cannot represent (naming why): other
            samplers, recorded episodic returns, envs at different steps (``lockstep``),
            abandoned episodes (unless ``abandoned``), ``finals_per_env`` below the final
            observations held.
    """
    sd = np_buf.state_dict()
    config, arrays, meta = sd["config"], sd["arrays"], sd["meta"]
    env: Array = arrays["index/env"]
    _refuse(kind, sd["class"], config, env, lockstep)
    E = int(config["num_envs"])
    C = int(config["capacity"]) // E
    slot_meta: Array = arrays["index/slot_meta"]
    for e in range(0 if abandoned else E):
        rows = e * C + np.arange(int(env[e, HEAD]), int(env[e, COUNT])) % C
        if (slot_meta[rows, FINAL_FID] == ABANDONED).any():
            raise ConfigError(
                f"from_replay_buffer: env {e} holds an abandoned episode (abandon_episode); "
                f"the {kind} buffer has no such episodes"
            )
    live = int((env[:, F_COUNT] - env[:, F_HEAD]).max())
    if finals_per_env is None:
        prioritized = sd["class"] == "PrioritizedReplayBuffer"
        finals_per_env = max(default_finals(C, prioritized), live)
    elif finals_per_env < live:
        raise ConfigError(
            f"finals_per_env: an env of this buffer holds {live} final observations; expected "
            f"at least that, got {finals_per_env}"
        )
    F = finals_per_env
    fields = {name: Field.from_json(d) for name, d in config["fields"].items()}
    src, dst = _move_finals(env[:, F_HEAD], env[:, F_COUNT], int(meta["finals_capacity"]), F)
    finals: dict[str, Array] = {}
    for name in arrays:
        if name.startswith("columns/finals/"):
            fin = arrays[name]
            out = np.zeros((E * F, *fin.shape[1:]), fin.dtype)
            out[dst] = fin[src]
            finals[name.removeprefix("columns/finals/")] = out
    owner = np.full(E * F, -1, np.int64)
    owner[dst] = arrays["index/final_owner"][src]
    index = Index(
        count=env[:, COUNT].copy(), head=env[:, HEAD].copy(), last_end=env[:, LAST_END].copy(),
        lo=env[:, LO].copy(), hi=env[:, HI].copy(), f_count=env[:, F_COUNT].copy(),
        f_head=env[:, F_HEAD].copy(), ep_start=slot_meta[:, EP_START].copy(),
        final_fid=slot_meta[:, FINAL_FID].copy(), final_owner=owner,
    )  # fmt: skip
    priorities = None
    if sd["class"] == "PrioritizedReplayBuffer":
        pmeta = meta["priorities"]
        priorities = Priorities(
            prio=np.asarray(arrays["priorities/prio"], np.float64),
            max_priority=float(pmeta["max_priority"]),
            beta_step=int(pmeta["beta_step"]),
        )
    return Contents(
        kwargs=_core_kwargs(sd), capacity=int(config["capacity"]), fields=fields,
        finals_per_env=F, index=index,
        steps={name: arrays[f"columns/steps/{name}"] for name in fields},
        finals=finals, priorities=priorities,
    )  # fmt: skip
