"""ALF's replay buffer with its data on a torch device (private to ALF's front-end).

:class:`DeviceReplayBuffer` is what ``ReplayBuffer(..., device="cuda")`` makes (and can be made
directly, on any torch device, ``"cpu"`` included): the steps live in an
:class:`rlreplay.torch.DeviceReplayBuffer` on ``device`` (one column per leaf of
``data_spec``, the host-backed buffer's layout: env ``e``'s ring of ``max_length`` steps,
position ``pos`` in row ``e * max_length + pos % max_length``), so :meth:`add_batch` of
tensors on the device copies nothing through the host, and what is read back
(:meth:`get_batch`, :meth:`gather_all`, :meth:`dequeue`, :meth:`get_field`) is gathered on the
device.

What stays on the host is what ALF's API decides there: which sequences :meth:`get_batch`
draws uniformly (ALF's law, drawn exactly as the host-backed buffer draws it, with the same
NumPy generator seeded from torch's global one: for the same stream and ``torch.manual_seed``,
both return the same batches) and its checks that every env holds enough steps, which need
each env's stored range (a few ints); so do :meth:`gather_all`, :meth:`dequeue`,
:meth:`clear` of some envs and :meth:`get_field` (which refuses positions not stored). The
buffer keeps those ranges on the host while every :meth:`add_batch` names its envs there
(``env_ids=None``, a list, a NumPy array): then a uniform :meth:`get_batch` waits for nothing
(it copies the drawn ids to the device and gathers there). An ``add_batch`` with ``env_ids``
a tensor on the device makes the next call that needs the ranges read them from the device
once (a wait).

With ``prioritized_sampling`` the priorities live on the device too (float64 per slot, and
ALF's max tree of the stored ones as a tensor, for the new-step rule ``max(initial_priority,
current largest priority)``): :meth:`get_batch` draws its prioritized starts there, with ALF's
law (``P(i) = p_i / sum p`` over the possible starts, with replacement; importance weights
``p_i * nnz / sum p``; the recent part uniform as above), from a generator on the device (the
same law as the host-backed buffer's, not the same draws), and reads the device once per
call: whether any possible start has a priority above 0 (ALF raises when none has) together
with the drawn starts (ALF hands positions back and orders rows by env on the host); a
refused draw leaves the generators as they were. :meth:`update_priority` reads its
ids and priorities on the host, as the host-backed buffer does, and takes finite priorities
``>= 0`` only: ALF's algorithm for negative, NaN and infinite ones is the host-backed buffer's.

With ``keep_episodic_info`` (or ``num_earliest_frames_ignored > 0``, or
``record_episodic_return``) ALF's episode information lives on the device too
(:mod:`._device_episodes`): each step's episode begin, what ends its episode, its discount-0
segment and, with ``record_episodic_return``, its discounted return, updated by
:meth:`add_batch` with torch ops that never wait for the device. :meth:`get_batch` and
:meth:`gather_all` gather ``discounted_return`` there (it agrees with the host-backed
buffer's to float32 rounding: both sum the same terms, in another order), and the earliest
``num_earliest_frames_ignored`` steps of each env are never starts, as in the host-backed
buffer. :meth:`steps_to_episode_end`, :meth:`get_episode_begin_position` and
:meth:`get_disc_0_begin_position` compute on the device after reading the stored ranges on
the host (to refuse positions not stored, as the host-backed buffer does).

With ``enable_checkpoint``, ``state_dict()`` carries everything on the host (the steps as
the NumPy core's ``state_dict`` of ``rlreplay.torch.to_replay_buffer(device_buffer)``, the
draws' generators, the priorities, the episode information) and ``load_state_dict`` puts it
back on ``device``: the loaded buffer draws as the one saved. Both wait for the device.

With ``allow_multiprocess``, other processes reach the buffer as they reach the host-backed
one (:mod:`._multiprocess`): its data stays on ``device`` in the process that built it, whose
server runs their calls (arguments and results pickled, tensors by value), each call under
the buffer's lock. This is tested with torch's CPU device only; on CUDA it is untested.

Refused with a :class:`~rlreplay.ConfigError` naming them: ``max_length=1`` and blocking
calls (``add_batch(blocking=True)``, ``dequeue(blocking=True)``: no other call could make
room or add steps while one waits, every call holding the device buffer alone).
:class:`rlreplay.compat.alf.replay_buffer.HostReplayBuffer` keeps the data on the host and
offers all of them, with results on ``device``.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import torch

from rlreplay import (
    ConfigError,
    DTypeError,
    EmptyBufferError,
    FieldError,
    InvalidIdError,
    ShapeError,
)
from rlreplay.buffer import check_timeout
from rlreplay.compat.alf._device_episodes import DeviceEpisodes
from rlreplay.compat.alf._device_queries import DeviceQueries
from rlreplay.compat.alf._draws import (
    ReplayAssertionError,
    StartRanges,
    draw_starts,
    uniform_starts,
)
from rlreplay.compat.alf._multiprocess import Sharing, forward_public
from rlreplay.compat.alf._nest import (
    _TORCH_NAMES,
    AssignDTypeError,
    AssignShapeError,
    as_spec,
    broadcast_ids,
    env_array,
    map_names,
    runs_to_clear,
)
from rlreplay.compat.alf._setup import (
    check_clip,
    check_gamma,
    check_options,
    positive,
    spec_layout,
)
from rlreplay.compat.alf._types import BatchInfo
from rlreplay.compat.alf.replay_buffer import ReplayBuffer
from rlreplay.compat.alf.segment_tree import as_numpy
from rlreplay.compat.alf.tensor_specs import carrier, get_path, pack, split_path

__all__ = ["DeviceReplayBuffer"]

Array = np.ndarray[Any, Any]

_HOST = "rlreplay.compat.alf.replay_buffer.HostReplayBuffer"


def _refuse(option: str, why: str) -> ConfigError:
    return ConfigError(
        f"{option}: a buffer whose data lives on a torch device {why}; use {_HOST} (data "
        "on the host, results on the device) for it"
    )


class DeviceReplayBuffer(DeviceQueries, ReplayBuffer):
    """ALF's replay buffer with its data on ``device`` (see the module docstring).

    The arguments are :class:`~rlreplay.compat.alf.replay_buffer.ReplayBuffer`'s; ``device``
    may be any torch device (``"cuda"``, ``"cuda:1"``, ``"cpu"``, ...).

    Raises:
        rlreplay.ConfigError: An option it does not offer (see the module docstring), or an
            option out of range.
    """

    def __init__(
        self,
        data_spec: Any,
        num_environments: int,
        max_length: int = 1024,
        num_earliest_frames_ignored: int = 0,
        prioritized_sampling: bool = False,
        initial_priority: float = 1.0,
        recent_data_steps: int = 1,
        recent_data_ratio: float = 0.0,
        with_replacement: bool = False,
        device: Any = "cpu",
        allow_multiprocess: bool = False,
        keep_episodic_info: bool | None = None,
        record_episodic_return: bool = False,
        default_return: float = -1000.0,
        gamma: float = 0.99,
        reward_clip: tuple[float, float] | None = None,
        enable_checkpoint: bool = False,
        name: str = "ReplayBuffer",
    ) -> None:
        import rlreplay.torch as rrt

        torch.nn.Module.__init__(self)
        E, C, ignored, keep_episodic_info = check_options(
            num_environments, max_length, num_earliest_frames_ignored, allow_multiprocess,
            keep_episodic_info, record_episodic_return, recent_data_ratio,
        )  # fmt: skip
        if C < 2:
            raise _refuse("max_length", "keeps at least 2 steps per env (max_length=1 given)")
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError):
            raise ConfigError(f"device: expected a torch device, got {device!r}") from None
        self._spec = data_spec
        self._layout = spec_layout(data_spec, keep_episodic_info)
        self._names, self._discount = self._layout.names, self._layout.discount
        self._num_envs, self._max_length, self._ignored = E, C, ignored
        self._keep_episodic_info = keep_episodic_info
        returns = None
        if record_episodic_return:
            returns = (check_gamma(gamma), check_clip(reward_clip), float(default_return))
        self._prioritized = bool(prioritized_sampling)
        self._initial_priority = float(initial_priority)
        if self._prioritized and not math.isfinite(self._initial_priority):
            raise _refuse(
                "initial_priority", f"takes finite priorities only (got {initial_priority!r})"
            )
        self._recent_steps = positive("recent_data_steps", recent_data_steps)
        self._recent_ratio = float(recent_data_ratio)
        self._with_replacement = bool(with_replacement)
        self._record = bool(record_episodic_return)
        self._default_return = float(default_return)
        self._enable_checkpoint = bool(enable_checkpoint)
        self._name = name
        # allow_multiprocess: other processes reach this buffer through a server in this one
        # (_multiprocess), one thread per process: each call then holds this lock.
        self._sharing = Sharing(self) if allow_multiprocess else None
        if allow_multiprocess:
            self._call_lock = threading.RLock()
        self._remote = None
        self._stopped = False
        self._all_envs = np.arange(E, dtype=np.int64)
        self._pcore = None
        self._max_prio = None
        self._odd = None
        self._cuts = None
        # ALF draws from torch's global generator: the draws' generator is seeded from it, as
        # the host-backed buffer seeds its core's (the same seed: the same draws).
        seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
        self._rng = np.random.default_rng(seed)
        self._gen: torch.Generator | None = None  # prioritized draws' (made at the first)
        self._dev = rrt.DeviceReplayBuffer(
            E * C, self._layout.fields, num_envs=E, finals_per_env=1, device=dev, seed=0
        )
        self._device = self._dev.device
        # Each env's stored positions [first, end) while known on the host (None: read them)
        self._known: tuple[Array, Array] | None = (np.zeros(E, np.int64), np.zeros(E, np.int64))
        self._leaves = [(path, spec, self._names[path]) for path, spec in self._layout.leaves]
        # Prioritized: each slot's priority (float64), and ALF's max tree of the priorities
        # of stored (or just overwritten) steps, -inf where a step was removed.
        self._floor = torch.tensor(self._initial_priority, dtype=torch.float64, device=self._device)
        self._prio: torch.Tensor | None = None
        self._top: torch.Tensor | None = None
        if self._prioritized:
            self._prio = torch.zeros(E * C, dtype=torch.float64, device=self._device)
            self._top = torch.full((E * C,), -math.inf, dtype=torch.float64, device=self._device)
            self._slots = torch.arange(E * C, dtype=torch.int64, device=self._device)
        self._fill: dict[int, dict[str, torch.Tensor]] = {}  # per batch size: built-in values
        self._episodes: DeviceEpisodes | None = None
        if keep_episodic_info:
            self._episodes = DeviceEpisodes(
                E, C, self._device, discount=self._discount is not None, returns=returns
            )

    # ------------------------------------------------------------------ properties
    @property
    def device_buffer(self) -> Any:
        """The :class:`rlreplay.torch.DeviceReplayBuffer` holding the steps (id of ``(env,
        pos)``: ``pos * E + env``)."""
        return self._dev

    @property
    def core(self) -> Any:
        """Refused: the steps are in :attr:`device_buffer` (a NumPy copy:
        ``device_buffer.to_replay_buffer()``)."""
        raise ConfigError(
            "core: this buffer's data lives on a torch device, in device_buffer (a "
            "rlreplay.torch.DeviceReplayBuffer); device_buffer.to_replay_buffer() copies it to "
            "a NumPy buffer"
        )

    @property
    def total_size(self) -> torch.Tensor:
        """Total number of stored steps over all environments (int64 scalar tensor on
        ``device``; no wait for the device)."""
        out: torch.Tensor = self._dev.num_stored
        return out

    @property
    def initial_priority(self) -> torch.Tensor:
        """The priority new steps get: ``max(initial_priority, current largest priority)``
        (a 0-d float32 tensor on ``device``; no wait for the device)."""
        return self._new_priority_tensor().to(torch.float32)

    def _new_priority_tensor(self) -> torch.Tensor:
        if self._top is None:
            return self._floor
        return torch.maximum(self._top.amax(), self._floor)

    def _bounds(self) -> tuple[Array, Array]:
        """Per env: the oldest stored position and ``current_pos`` (copies): kept on the host
        while every change came with env ids known there, else read from the device."""
        if self._known is None:
            first, end = self._dev.stored_range()
            # copies: on torch's CPU device these arrays may share the device buffer's memory
            self._known = (np.array(first, np.int64), np.array(end, np.int64))
        first, end = self._known
        return first.copy(), end.copy()

    def _added(self, envs: Array | None) -> None:
        """Steps were added to ``envs`` (``None``: envs not known on the host)."""
        if envs is None or self._known is None:
            self._known = None
            return
        first, end = self._known
        end[envs] += 1
        # each env keeps its newest max_length steps (no episode end drops any: see _step_values)
        np.maximum(first, end - self._max_length, out=first)

    # ------------------------------------------------------------------ writing
    def add_batch(
        self,
        batch: Any,
        env_ids: Any = None,
        blocking: bool = False,
        *,
        timeout: float | None = None,
    ) -> None:
        """Add one step of each of ``env_ids`` (default: every env), as ALF's ``add_batch``.

        Args:
            batch: Nest of the structure of ``data_spec``, each leaf ``[batch_size] + shape``
                (tensors, on the device or not, or arrays; broadcast as ALF's indexed write).
            env_ids: 1-D integers, unique (a tensor on the device: not read on the host, so
                only its shape and dtype are checked); ``None``: every env.
            blocking: Only False (this buffer runs one call at a time).
            timeout: Checked as the host-backed buffer checks it.

        Raises:
            rlreplay.FieldError: A leaf of ``data_spec`` missing from ``batch``.
            AssignShapeError: A leaf that does not broadcast to ``[batch_size] + shape``.
            AssignDTypeError: A tensor leaf of another dtype than its spec's, or a value
                the spec's dtype cannot hold.
            rlreplay.InvalidIdError: Bad ``env_ids``.
            rlreplay.ConfigError: ``blocking=True``.
        """
        if timeout is not None:
            check_timeout(timeout)
        if blocking:
            raise _refuse("blocking", "runs one call at a time, so no call could make room")
        given: Any = None
        known: Array | None = None  # the envs, if known on the host
        if env_ids is None:
            B, known = self._num_envs, self._all_envs
        elif isinstance(env_ids, torch.Tensor):
            if env_ids.dim() != 1:
                raise InvalidIdError(
                    f"env_ids: expected a 1-D tensor, got shape {tuple(env_ids.shape)}"
                )
            B, given = int(env_ids.shape[0]), env_ids
        else:
            host = env_array(env_ids, self._all_envs)
            B, given, known = int(host.shape[0]), host, host
        values = self._step_values(batch, B)
        try:
            ids = self._dev.add(env_ids=given, **values)
        except DTypeError as exc:
            raise AssignDTypeError(str(exc)) from None
        self._added(known)
        if self._episodes is not None:
            self._record_episodes(ids, values)
        if self._prio is not None and self._top is not None:
            # ALF's rule: max(initial_priority, the largest priority in its max tree), which
            # still holds the priority of the step each new one overwrites.
            p0 = self._new_priority_tensor()
            E, C = self._num_envs, self._max_length
            slots = torch.remainder(torch.div(ids, E, rounding_mode="floor"), C)
            slots = slots.add_(torch.remainder(ids, E) * C)
            self._prio.index_copy_(0, slots, p0.expand(B))
            self._top.index_copy_(0, slots, p0.expand(B))

    def _record_episodes(self, ids: torch.Tensor, values: dict[str, Any]) -> None:
        """Update the episode information with the steps ``ids`` just added (on the device)."""
        assert self._episodes is not None and self._layout.step_type is not None
        E = self._num_envs
        env = torch.remainder(ids, E)
        t = torch.div(ids, E, rounding_mode="floor")
        disc = self._layout.discount
        self._episodes.record(
            env, t, self._on_device(values[self._layout.step_type]),
            None if disc is None else self._on_device(values[disc]),
            self._on_device(values["reward"]) if self._record else None,
            self._dev.stored_bounds[0],
        )  # fmt: skip

    def _on_device(self, value: Any) -> torch.Tensor:
        """A flat tensor of a scalar leaf's values on ``device`` (host values copied once)."""
        t = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.array(value))
        return t.to(self._device, non_blocking=True).reshape(-1)

    def _step_values(self, batch: Any, B: int) -> dict[str, Any]:
        """The device buffer's ``add`` arguments of a batch of ``B`` steps: the leaves (tensors
        kept where they are), no episode end, reward 0 without a ``reward`` leaf, zero bytes
        for the observation placeholder."""
        values: dict[str, Any] = {}
        for path, spec, name in self._leaves:
            value = get_path(batch, path)
            shape = (B, *spec.shape)
            if isinstance(value, torch.Tensor):
                if value.dtype != spec.dtype:
                    raise AssignDTypeError(
                        f"{name}: Index put requires the source and destination dtypes match, "
                        f"got {_TORCH_NAMES.get(spec.dtype, str(spec.dtype))} for the "
                        f"destination and {_TORCH_NAMES.get(value.dtype, str(value.dtype))} "
                        f"for the source (the leaf's TensorSpec dtype is {spec.dtype}, the "
                        f"tensor's {value.dtype})"
                    )
                wide = carrier(spec.dtype)
                if wide != spec.dtype:
                    value = value.to(wide)
                value = _broadcast(name, value, shape, tuple(value.shape))
            else:
                arr = np.asarray(value)
                if carrier(spec.dtype) != spec.dtype and arr.dtype.kind in "biufc":
                    rounded = torch.from_numpy(np.ascontiguousarray(arr)).to(spec.dtype)
                    arr = rounded.float().numpy()
                value = _broadcast(name, arr, shape, arr.shape)
            values[name] = value
        fill = self._fill.get(B)
        if fill is None:
            dev = self._device
            none = torch.zeros(B, dtype=torch.bool, device=dev)
            empty = torch.zeros((B, 0), dtype=torch.uint8, device=dev)
            p = self._layout.placeholder
            fill = {"terminated": none, "truncated": none, p: empty, "next_" + p: empty}
            if ("reward",) not in self._names:
                fill["reward"] = torch.zeros(B, dtype=torch.float32, device=dev)
            self._fill[B] = fill
        values.update(fill)
        return values

    # ------------------------------------------------------------------ reading
    def get_batch(self, batch_size: int, batch_length: int) -> tuple[Any, BatchInfo]:
        """Randomly get ``batch_size`` sequences of ``batch_length`` consecutive steps, as the
        host-backed buffer's :meth:`~rlreplay.compat.alf.replay_buffer.ReplayBuffer.get_batch`
        draws them (uniform: env ``e`` gets ``B // E`` sequences and ``B % E`` random envs one
        more, ``recent_data_*``, ``with_replacement``, the same draws; prioritized: by
        priority on the device, see the module docstring). Uniform, it waits for nothing
        while the envs' stored ranges are known on the host (see the module docstring: else
        it reads them once); prioritized, it also reads once whether any start has mass, with
        the drawn starts. The rows (and
        ``discounted_return``) are gathered on the device.

        Returns:
            ``(nest [B, L, ...], BatchInfo)`` on torch's (ALF's) default device.

        Raises:
            ReplayAssertionError: Uniform draws and an env holds fewer than ``batch_length``
                steps; or, prioritized, no possible start has a non-zero priority.
        """
        B = positive("batch_size", batch_size)
        L = positive("batch_length", batch_length)
        heads, counts = self._bounds()
        weights: torch.Tensor | None = None
        if self._prio is None:
            env, t, _ = draw_starts(
                self._rng, None, heads, counts, B, L, ignored=self._ignored,
                recent_ratio=self._recent_ratio, recent_steps=self._recent_steps,
                replacement=self._with_replacement,
            )  # fmt: skip
        else:
            env, t, weights = self._priority_starts(heads, counts, B, L)
        order = np.argsort(env, kind="stable")
        env, t = env[order], t[order]
        ids = torch.from_numpy(t * self._num_envs + env).to(self._device)
        seq = self._dev.get_sequences(ids, L, within_episode=False)
        device = torch.get_default_device()
        returns: Any = ()
        if self._record and self._episodes is not None:
            steps = ids[:, None] // self._num_envs + torch.arange(L, device=self._device)
            env_t = torch.remainder(ids, self._num_envs)[:, None]
            returns = self._episodes.returns_of(env_t, steps).to(device)
        info = BatchInfo(
            env_ids=torch.from_numpy(env).to(device),
            positions=torch.from_numpy(t).to(device),
            importance_weights=()
            if weights is None
            else weights.index_select(0, torch.from_numpy(order).to(weights.device)).to(device),
            replay_buffer=self,
            discounted_return=returns,
        )
        return self._pack(seq, device), info

    def _priority_starts(
        self, heads: Array, counts: Array, B: int, L: int
    ) -> tuple[Array, Array, torch.Tensor]:
        """ALF's prioritized starts (see :meth:`get_batch`): ``(env, pos, weights)``, the
        weights a float32 tensor on ``device``."""
        assert self._prio is not None
        E, C, dev = self._num_envs, self._max_length, self._device
        n_recent = 0
        if self._recent_ratio > 0:
            avg = (counts - heads).sum() / E - (L - 1 + self._ignored)
            if avg * self._recent_ratio > self._recent_steps:
                n_recent = min(B, math.ceil(round(B * self._recent_ratio, 9)))
        lo, hi = heads + self._ignored, counts - L + 1
        # Each slot's step in [lo, lo + C) of its env, and whether it is a possible start.
        lo_t = torch.from_numpy(lo).to(dev)
        env_of = torch.div(self._slots, C, rounding_mode="floor")
        lo_s = lo_t.index_select(0, env_of)
        step = lo_s + torch.remainder(self._slots - lo_s, C)
        possible = step < torch.from_numpy(hi).to(dev).index_select(0, env_of)
        masses = torch.where(possible, self._prio, 0.0)
        cum = torch.cumsum(masses, 0)
        total = cum[-1]
        nonzero = (masses != 0).sum()
        m = B - n_recent
        # (a refused draw puts back the host generator only if it seeded the device one now)
        rng_state = None if self._gen is not None else self._rng.bit_generator.state
        gen = self._draws_generator()
        gen_state = gen.get_state()
        u = torch.rand(m, dtype=torch.float64, device=dev, generator=gen)
        slot = torch.searchsorted(cum, u * total, right=True)
        last = torch.where(masses > 0, self._slots, 0).amax()
        slot = torch.minimum(slot, last)  # (u * total rounded up to the total)
        # The one wait of a prioritized draw: whether any start has mass, with the drawn
        # envs and steps (ALF hands positions back on the host and orders rows by env).
        env_p = torch.div(slot, C, rounding_mode="floor")
        t_p = step.index_select(0, slot)
        valid = (total > 0).to(torch.int64).reshape(1)
        host = torch.cat([valid, env_p, t_p]).cpu().numpy()
        if m and not host[0]:
            gen.set_state(gen_state)
            if rng_state is not None:
                self._gen = None
                self._rng.bit_generator.state = rng_state
            raise ReplayAssertionError(
                "There is no data in the buffer or the data has not been assigned valid "
                f"priority (no start of {L} stored steps has a priority > 0)"
            )
        env_r, t_r = uniform_starts(
            self._rng, StartRanges(lo, hi, counts - heads, L, self._ignored), n_recent, n_recent,
            self._recent_steps, self._with_replacement,
        )  # fmt: skip
        slots = torch.cat([slot, torch.from_numpy(env_r * C + t_r % C).to(dev)])
        p = self._prio.index_select(0, slots)
        weights = (p * (nonzero / total)).to(torch.float32)
        env = np.concatenate([host[1 : 1 + m], env_r]).astype(np.int64)
        t = np.concatenate([host[1 + m :], t_r]).astype(np.int64)
        return env, t, weights

    def _draws_generator(self) -> torch.Generator:
        """The generator of prioritized draws on ``device``, seeded from the host draws'."""
        gen = self._gen
        if gen is None:
            gen = torch.Generator(device=self._device)
            gen.manual_seed(int(self._rng.integers(0, 2**62)))
            self._gen = gen
        return gen

    def _pack(self, data: Any, device: torch.device) -> Any:
        def leaf(path: Any) -> torch.Tensor:
            return as_spec(data[self._names[path]].to(device), self._spec, path)

        return pack(self._spec, leaf)

    def gather_all(
        self, ignore_earliest_frames: bool = False, convert_to_default_device: bool = True
    ) -> tuple[Any, BatchInfo]:
        """Every stored step: a nest ``[E, T, ...]`` and its :class:`BatchInfo` (``[E]``), as
        the host-backed buffer's (``ignore_earliest_frames`` drops nothing: no frames are
        ignored). Reads the stored ranges from the device.

        Raises:
            ReplayAssertionError: The envs hold different numbers of steps.
        """
        heads, counts = self._bounds()
        sizes = counts - heads
        if (sizes != sizes[0]).any():
            raise ReplayAssertionError(
                f"gather_all: every environment must hold the same number of steps, got "
                f"{sizes.tolist()}"
            )
        got = self._dev.gather_all()
        k = min(self._ignored, int(sizes[0])) if ignore_earliest_frames else 0
        data = {name: got[name][:, k:] for name in self._names.values()}
        device = torch.get_default_device() if convert_to_default_device else self._device
        returns: Any = ()
        if self._record and self._episodes is not None:
            first = torch.from_numpy(heads + k).to(self._device)[:, None]
            steps = first + torch.arange(int(sizes[0]) - k, device=self._device)
            env = torch.arange(self._num_envs, device=self._device)[:, None]
            returns = self._episodes.returns_of(env, steps).to(device)
        info = BatchInfo(
            env_ids=torch.from_numpy(self._all_envs.copy()).to(device),
            positions=torch.from_numpy(heads + k).to(device),
            replay_buffer=self,
            discounted_return=returns,
        )
        return self._pack(data, device), info

    def dequeue(
        self,
        env_ids: Any = None,
        n: int = 1,
        blocking: bool = False,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Return the earliest ``n`` steps of each env and remove them (ALF's ``dequeue``):
        a nest of tensors ``[batch_size, n, ...]`` on ``device``.

        Raises:
            ReplayAssertionError: Not enough data (an AssertionError).
            rlreplay.ConfigError: ``blocking=True`` (this buffer runs one call at a time).
        """
        if timeout is not None:
            check_timeout(timeout)
        if blocking:
            raise _refuse("blocking", "runs one call at a time, so no call could add steps")
        envs = env_array(env_ids, self._all_envs)
        if isinstance(n, int) and n > self._max_length:  # never enough: ALF asserts
            raise ReplayAssertionError(
                f"dequeue: not enough data: n={n} steps per env, but an env holds at most "
                f"max_length={self._max_length}"
            )
        try:
            got = self._dev.dequeue(n, envs)
        except EmptyBufferError as exc:
            raise ReplayAssertionError(f"dequeue: not enough data: {exc}") from None
        self._removed(got["ids"])
        self._dequeued(envs, n)
        return self._pack(got, self._device)

    def _dequeued(self, envs: Array, n: int) -> None:
        """The oldest ``n`` steps of ``envs`` were removed."""
        if self._known is not None:
            self._known[0][envs] += n

    def clear(self, env_ids: Any = None) -> None:
        """Remove every stored step of ``env_ids`` (default: all). Positions keep counting."""
        if env_ids is None:
            self._dev.clear()
            if self._top is not None:
                self._top.fill_(-math.inf)
            if self._known is not None:
                self._known[0][...] = self._known[1]
            return
        for e, n in runs_to_clear(env_ids, self._all_envs, *self._bounds()):
            self._removed(self._dev.dequeue(n, [e])["ids"])
            self._dequeued(np.array([e]), n)

    def get_field(self, field_name: Any, env_ids: Any, positions: Any) -> Any:
        """The stored value of a field at ``(env_ids, positions)``, on ``device`` (as the
        host-backed buffer's; reads the stored ranges from the device to refuse positions
        not stored).

        Raises:
            rlreplay.FieldError: No such field.
            rlreplay.InvalidIdError: A position not stored (overwritten or never added).
        """
        env, pos, _ = broadcast_ids(env_ids, positions, self._num_envs)
        heads, counts = self._bounds()
        bad = (pos < heads[env]) | (pos >= counts[env])
        if bad.any():
            raise InvalidIdError(
                f"get_field: positions not stored (overwritten or never added): env "
                f"{env[bad][:5].tolist()} at positions {pos[bad][:5].tolist()}"
            )
        C = self._max_length
        rows = torch.from_numpy((env * C + pos % C).reshape(-1)).to(self._device)
        shape = env.shape
        st = self._dev.storage

        def one(name: str) -> Any:
            if not isinstance(name, str):
                raise FieldError(f"get_field: expected dotted field names, got {name!r}")
            path = split_path(name)
            sub = get_path(self._spec, path)

            def leaf(rel: Any) -> torch.Tensor:
                column = self._names[path + rel]
                got = st.take(column, rows)
                return as_spec(got.reshape(*shape, *got.shape[1:]), sub, rel)

            return pack(sub, leaf)

        return map_names(field_name, one)

    # ------------------------------------------------------------------ priorities
    def _removed(self, ids: torch.Tensor) -> None:
        """Removed steps no longer count towards the largest priority."""
        if self._top is not None and ids.numel():
            E, C = self._num_envs, self._max_length
            flat = ids.reshape(-1)
            slots = torch.remainder(torch.div(flat, E, rounding_mode="floor"), C)
            self._top.index_fill_(0, slots.add_(torch.remainder(flat, E) * C), -math.inf)

    def update_priority(self, env_ids: Any, positions: Any, priorities: Any) -> None:
        """Set the priorities of the steps ``(env_ids, positions)`` (from a
        :class:`BatchInfo`), as the host-backed buffer does: overwritten steps are ignored,
        with duplicates the last priority wins. Reads the ids, the priorities and the stored
        ranges on the host (as the host-backed buffer does).

        Raises:
            ReplayAssertionError: ``prioritized_sampling`` is False.
            rlreplay.InvalidIdError: A position never added.
            rlreplay.ShapeError: ``priorities`` not of the ids' shape.
            rlreplay.ConfigError: A negative, NaN or infinite priority (ALF draws those with
                its own sum-tree algorithm, which only the host-backed buffer reproduces).
        """
        if self._prio is None or self._top is None:
            raise ReplayAssertionError("update_priority: needs prioritized_sampling=True")
        env, pos, _ = broadcast_ids(env_ids, positions, self._num_envs)
        prio = as_numpy(priorities)
        if prio.shape != env.shape:
            raise ShapeError(f"priorities: expected shape {env.shape}, got {prio.shape}")
        prio = prio.astype(np.float64).reshape(-1)
        env, pos = env.reshape(-1), pos.reshape(-1)
        if not (np.isfinite(prio) & (prio >= 0)).all():
            raise _refuse("priorities", "takes finite priorities >= 0 only")
        heads, counts = self._bounds()
        never = pos >= counts[env]
        if never.any():
            raise InvalidIdError(
                f"update_priority: positions never added: env {env[never][:5].tolist()} at "
                f"positions {pos[never][:5].tolist()}"
            )
        live = pos >= heads[env]
        C = self._max_length
        slots = (env * C + pos % C)[live]
        # The last of duplicates wins: keep each slot's last occurrence.
        _, first_of_reversed = np.unique(slots[::-1], return_index=True)
        keep = slots.shape[0] - 1 - first_of_reversed
        rows = torch.from_numpy(slots[keep]).to(self._device)
        values = torch.from_numpy(prio[live][keep]).to(self._device)
        self._prio.index_copy_(0, rows, values)
        self._top.index_copy_(0, rows, values)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", device={str(self._device)!r}"


forward_public(DeviceReplayBuffer)  # a handle's calls run in the owner


def _broadcast(name: str, value: Any, shape: tuple[int, ...], have: tuple[int, ...]) -> Any:
    """``value`` broadcast to ``shape`` as ALF's indexed write does (a tensor stays where it
    is)."""
    if have == shape:
        return value
    if len(have) == len(shape) and have[0] != shape[0]:
        raise AssignShapeError(
            f"{name}: batch_size {have[0]} given for {shape[0]} environments (env_ids)"
        )
    try:
        if isinstance(value, torch.Tensor):
            return value.expand(shape)
        return np.broadcast_to(value, shape)
    except (RuntimeError, ValueError):
        raise AssignShapeError(
            f"{name}: value of shape {have} cannot be broadcast to {shape} ([batch_size] + "
            "the TensorSpec's shape)"
        ) from None
