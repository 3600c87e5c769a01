"""Stand-in for ``alf.experience_replayers.replay_buffer``: ALF's replay buffer over rlreplay.

:class:`ReplayBuffer` keeps ALF's constructor, methods, return types and shapes, and hands the
replay work to one :class:`rlreplay.ReplayBuffer` (a :class:`rlreplay.PrioritizedReplayBuffer`
with ``prioritized_sampling``):

=================================  =============================================================
ALF                                core
=================================  =============================================================
``num_environments``, env ``e``    ``num_envs=E``, env ``e``
``max_length``                     ``env_capacity`` (``capacity = E * max_length``)
``pos`` of env ``e``               absolute step ``t = pos``; core id ``pos * E + e``
each leaf of ``data_spec``         one field; path ``a.b`` -> ``a__b`` (see ``field_names``)
``reward`` (top level)             the core's ``reward`` (its shape and dtype)
``step_type == LAST``              ends the episode: ``terminated`` if ``discount == 0`` (or
                                   there is no ``discount``), else ``truncated``
``FIRST`` after a non-``LAST``     ``end_episode`` of the env's running episode first
(no next observation in ALF)       a zero-byte observation field; its ``next_*`` is unused
``get_batch``                      starts drawn by the core's ``draw_mixed`` per env (uniform)
                                   or by priority (``sample_sequences`` law, ``pad=False``),
                                   rows gathered by ``get_sequences(ids, L)``
``dequeue``, ``gather_all``        ``dequeue``, ``gather_all`` (blocking waits, ``close``)
episode queries                    ``episode_begin``, ``steps_to_episode_end``, ``get_field``
``record_episodic_return``         the core's recorded returns, read one step later (below)
=================================  =============================================================

ALF stores raw time steps: the ``reward`` at ``pos`` is the one received on arriving there, so
the return of a step counts the rewards *after* it. With ``G`` the core's recorded return
(``G_t = r_t + gamma * G_{t+1}`` over the episode, rewards clipped to ``reward_clip``)::

    discounted_return[pos] = 0                  if pos is its episode's LAST step
                           = G[pos + 1]         if its episode has ended
                           = default_return     while its episode runs
(plus, after a ``LAST`` that a step other than ``FIRST`` follows, what the joined parts of
ALF's episode add: ``_episodic.joined_tails``).

Bookkeeping kept here: discount-0 segments (:meth:`get_disc_0_begin_position`), episodes a
``FIRST`` cut and episodes joined after a ``LAST`` (``_episodic``), the priorities the core
refuses (``_odd``) and a max tree of the current priorities (ALF gives a new step
``max(initial_priority, current largest priority)``). The rest lives in the core, under its
lock. Modules: ``_setup`` (options, the core), ``_nest`` (nests and tensors), ``_types``
(``StepType``, ``BatchInfo``), ``_sampling`` (``get_batch``, ``update_priority``), ``_draws``
(starts, returns), ``_episodic``, ``_odd``, ``_queries`` (position queries, checkpoint
state) and ``_blocking`` (blocking calls that ``stop`` ends).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import torch

from rlreplay import Batch, DTypeError, EmptyBufferError, MaxTree
from rlreplay import ReplayBuffer as CoreBuffer
from rlreplay.buffer import check_timeout
from rlreplay.compat.alf._blocking import deadline_of, wait_for_empty, wait_unless_stopped
from rlreplay.compat.alf._draws import (
    ReplayAssertionError,
    gathered_returns,
)
from rlreplay.compat.alf._episodic import (
    Continuations,
    CutEpisodes,
    Disc0Segments,
    cut_before_first,
    cut_of,
    first_envs,
)
from rlreplay.compat.alf._multiprocess import Remote, Sharing, forward_public, reduce
from rlreplay.compat.alf._nest import (
    AssignDTypeError,
    env_array,
    step_values,
    to_tensor,
)
from rlreplay.compat.alf._odd import OddPriorities, is_odd
from rlreplay.compat.alf._sampling import Sampling
from rlreplay.compat.alf._setup import (
    check_options,
    keep_newest,
    make_core,
    positive,
    spec_layout,
)
from rlreplay.compat.alf._types import BatchInfo, StepType
from rlreplay.compat.alf.segment_tree import check_device

__all__ = [
    "BatchInfo",
    "HostReplayBuffer",
    "ReplayAssertionError",
    "ReplayBuffer",
    "StepType",
]

Array = np.ndarray[Any, Any]


class ReplayBuffer(Sampling, torch.nn.Module):
    """ALF's multi-env replay buffer of raw time steps, on rlreplay's core buffer.

    Terminology (ALF's): ``pos`` is the always increasing position of a step in the infinitely
    long buffer of its env; env ``e`` keeps its newest ``max_length`` steps, positions
    ``[current_pos - current_size, current_pos)``.

    Args:
        data_spec: Nest (dict, tuple, list, namedtuple) of :class:`TensorSpec` of one step.
        num_environments: Number of parallel environments ``E``.
        max_length: Steps kept per environment (1 is ALF's one-slot ring).
        num_earliest_frames_ignored: The earliest so many steps of each env are never the
            start of a :meth:`get_batch` sequence (for ``FrameStacker``); implies
            ``keep_episodic_info``.
        prioritized_sampling: Draw :meth:`get_batch` starts by priority.
        initial_priority: Priority of new steps: ``max(initial_priority, current largest
            priority)``.
        recent_data_steps: The newest so many starts per env count as recent.
        recent_data_ratio: ``ceil(ratio * batch_size)`` sequences start at recent data, when
            ``(total_size / E - batch_length + 1 - num_earliest_frames_ignored) * ratio >
            recent_data_steps`` (otherwise plain draws already reach recent data).
        with_replacement: If False, a batch has no duplicate sequence whenever an env has
            enough starts for its share. Prioritized draws are always with replacement.
        device: ``"cpu"`` or ``"cuda"``: where :meth:`dequeue`, :meth:`get_field`, the position
            queries and ``gather_all(convert_to_default_device=False)`` create tensors.
            :meth:`get_batch` and ``gather_all()`` return on torch's default device, which is
            ALF's default device. ``"cuda"`` (any device but the CPU) also keeps the data
            there: the buffer is then a
            :class:`~rlreplay.compat.alf._device.DeviceReplayBuffer` (episode information
            on the device too, checkpoints, ``allow_multiprocess``), which refuses
            ``max_length=1``, blocking calls and negative, NaN or infinite priorities
            (:class:`HostReplayBuffer` keeps the data on the host and offers them all).
        allow_multiprocess: Let other processes use this buffer, as ALF's shared-memory one:
            a forked child, or a process it is pickled to (a ``Process`` argument, fork or
            spawn), gets a handle whose every method and property runs in this process (over
            a ``multiprocessing.managers`` server started on first need), so all see the same
            data. A remote call is a round trip (about a thousand per second); calls in this
            process stay direct. Pickling always gives such a handle. See ``_multiprocess``.
        keep_episodic_info: Index episode boundaries (from ``step_type``; needs a scalar
            ``step_type`` leaf at the top of the nest). ``None``: True when
            ``num_earliest_frames_ignored > 0`` or ``record_episodic_return``.
        record_episodic_return: Record each step's discounted return when its episode ends
            (needs a scalar top-level ``reward``); see the module docstring.
        default_return: ``discounted_return`` of steps of unfinished episodes.
        gamma: Discount of ``discounted_return``.
        reward_clip: ``None`` or ``(min, max)`` applied to rewards for ``discounted_return``.
        enable_checkpoint: Whether ``state_dict()`` carries the buffer's contents.
        name: Name of the buffer.

    Cost: :meth:`add_batch` is O(fields) plus O(log n) per step with priorities;
    :meth:`get_batch` gathers ``B * L`` rows (and enumerates the possible starts, O(n), with
    priorities). Every method is thread-safe (the core's lock).

    Example:
        >>> import torch
        >>> from rlreplay.compat.alf import TensorSpec
        >>> from rlreplay.compat.alf.replay_buffer import ReplayBuffer
        >>> spec = {"step_type": TensorSpec((), torch.int32), "x": TensorSpec((2,))}
        >>> rb = ReplayBuffer(spec, num_environments=2, max_length=8)
        >>> for t in range(4):
        ...     rb.add_batch({"step_type": torch.tensor([1, 1], dtype=torch.int32),
        ...                   "x": torch.full((2, 2), float(t))})
        >>> batch, info = rb.get_batch(batch_size=4, batch_length=2)
        >>> batch["x"].shape, info.env_ids.tolist()
        (torch.Size([4, 2, 2]), [0, 0, 1, 1])
    """

    ONE_MINUS = np.float32(1) - np.finfo(np.float32).eps

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """``ReplayBuffer(..., device=<an accelerator>)`` makes a
        :class:`~rlreplay.compat.alf._device.DeviceReplayBuffer`: the data on that device
        (``device="cpu"``, or ``"cuda"`` where CUDA is not available: this class)."""
        if cls is ReplayBuffer and _on_accelerator(
            kwargs["device"] if "device" in kwargs else args[9] if len(args) > 9 else "cpu"
        ):
            from rlreplay.compat.alf._device import DeviceReplayBuffer

            cls = DeviceReplayBuffer
        return super().__new__(cls)

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
        super().__init__()
        E, C, ignored, keep_episodic_info = check_options(
            num_environments, max_length, num_earliest_frames_ignored, allow_multiprocess,
            keep_episodic_info, record_episodic_return, recent_data_ratio,
        )  # fmt: skip
        self._spec = data_spec
        self._layout = spec_layout(data_spec, keep_episodic_info)
        self._names, self._discount = self._layout.names, self._layout.discount

        self._num_envs = E
        self._max_length = C
        self._ignored = ignored
        self._keep_episodic_info = bool(keep_episodic_info)
        self._prioritized = bool(prioritized_sampling)
        self._initial_priority = float(initial_priority)
        self._recent_steps = positive("recent_data_steps", recent_data_steps)
        self._recent_ratio = float(recent_data_ratio)
        self._with_replacement = bool(with_replacement)
        self._device = check_device(device, "device")
        self._record = bool(record_episodic_return)
        self._default_return = float(default_return)
        self._enable_checkpoint = bool(enable_checkpoint)
        self._name = name
        self._core, self._pcore = make_core(
            E, C, self._layout.fields, prioritized=self._prioritized,
            initial_priority=initial_priority, gamma=gamma, record_episodic_return=self._record,
            reward_clip=reward_clip, default_return=default_return,
        )  # fmt: skip
        self._atomic = self._core.atomic  # the core's lock across calls
        # allow_multiprocess: other processes reach this buffer through a server (_multiprocess)
        self._sharing = Sharing(self) if allow_multiprocess else None
        self._remote: Remote | None = None  # set on copies and handles in other processes
        # ALF's lock without allow_multiprocess: as in ALF, pickle and copy.deepcopy of such a
        # buffer raise TypeError on it, copy.copy works (allow_multiprocess: pickles as a handle)
        self._alf_lock = threading.RLock()
        self._all_envs = np.arange(E, dtype=np.int64)
        self._stopped = False
        self._disc0 = Disc0Segments(E, C)
        self._joins = Continuations(E, C)  # LAST then not FIRST: ALF's episode goes on
        self._cuts = CutEpisodes(E, C) if self._record else None
        # Per env: a FIRST added while the env stored nothing begins every later stored step's
        # episode (the core's episode could not be ended there; see cut_before_first).
        self._begin_floor = np.zeros(E, np.int64)
        self._final = {"next_" + self._layout.placeholder: np.zeros(0, np.uint8)}
        self._max_prio = MaxTree(E * C) if self._prioritized else None
        self._odd = OddPriorities(E, C) if self._prioritized else None

    # ------------------------------------------------------------------ properties
    @property
    def num_environments(self) -> int:
        """Number of environments ``E``."""
        return self._num_envs

    @property
    def max_length(self) -> int:
        """Steps kept per environment."""
        return self._max_length

    @property
    def data_spec(self) -> Any:
        """The nest of :class:`TensorSpec` of one step."""
        return self._spec

    @property
    def device(self) -> torch.device:
        """Where the buffer creates the tensors it hands back (see the class docstring)."""
        return self._device

    @property
    def name(self) -> str:
        """The buffer's name."""
        return self._name

    @property
    def core(self) -> CoreBuffer:
        """The :class:`rlreplay.ReplayBuffer` underneath (id of ``(env, pos)``: ``pos*E+env``)."""
        return self._core

    @property
    def field_names(self) -> dict[str, str]:
        """Dotted leaf path -> name of the core field that stores it."""
        return {".".join(p): n for p, n in self._names.items()}

    @property
    def total_size(self) -> torch.Tensor:
        """Total number of stored steps over all environments (int64 scalar tensor)."""
        return torch.tensor(len(self._core), dtype=torch.int64, device=self._device)

    @property
    def initial_priority(self) -> torch.Tensor:
        """The priority new steps get: ``max(initial_priority, current largest priority)``.

        We use a large value so that new experience is used for training soon.
        """
        with self._atomic():
            return torch.tensor(self._new_priority(), dtype=torch.float32, device=self._device)

    def _new_priority(self) -> float:
        # ALF's max tree propagates NaN (torch.max): one stored NaN priority makes it NaN.
        if self._odd is not None and self._odd.has_nan:
            return math.nan
        top = self._max_prio.max if self._max_prio is not None else -math.inf
        return max(self._initial_priority, top)

    def __reduce_ex__(self, protocol: Any) -> Any:
        if self._sharing is not None or self._remote is not None:  # unpickles as a handle
            return reduce(self)
        return super().__reduce_ex__(protocol)

    def extra_repr(self) -> str:
        return (
            f"name={self._name!r}, num_environments={self._num_envs}, "
            f"max_length={self._max_length}, prioritized_sampling={self._prioritized}"
        )

    # ------------------------------------------------------------------ writing
    def add_batch(
        self,
        batch: Any,
        env_ids: Any = None,
        blocking: bool = False,
        *,
        timeout: float | None = None,
    ) -> None:
        """Add one step of each of ``env_ids`` (default: every env).

        Args:
            batch: Nest of the structure of ``data_spec``, each leaf ``[batch_size] + shape``
                (torch tensors on any device, or arrays).
            env_ids: 1-D int64, unique; ``batch[i]`` is from env ``env_ids[i]``. ``None``:
                ``batch_size`` must be ``num_environments``.
            blocking: Wait for a free slot in every env instead of overwriting the oldest step.
            timeout: With ``blocking``, the most seconds to wait (rlreplay extension; ``None``
                waits for ever).

        Raises:
            rlreplay.FieldError: A leaf of ``data_spec`` missing from ``batch``.
            AssignShapeError: A leaf that does not broadcast to ``[batch_size] + shape`` (a
                ``RuntimeError``, as torch's in ALF; also an ``rlreplay.ShapeError``).
            AssignDTypeError: A torch tensor leaf of another dtype than its spec's (int64
                into int32, float64 into float32 too), or a value the spec's dtype cannot hold
                (a ``RuntimeError``, as torch's ``index_put_`` raises in ALF; also an
                ``rlreplay.DTypeError``). Nothing is added.
            rlreplay.InvalidIdError: Bad ``env_ids``.
            rlreplay.ReplayTimeout: ``blocking`` and no room within ``timeout``.

        A blocking add while the buffer is stopped (:meth:`stop`) returns at once without
        adding, as in ALF.
        """
        if timeout is not None:
            check_timeout(timeout)  # checked whether the call waits or not
        envs = env_array(env_ids, self._all_envs)
        B = envs.shape[0]
        values, disc0 = step_values(batch, self._layout, B, StepType.LAST)
        firsts = first_envs(values, self._layout.step_type, envs, self._num_envs)
        one = self._max_length == 1  # the core keeps 2 steps: the wait for room is ours
        deadline = deadline_of(timeout) if blocking and one else None
        while blocking and one:
            if not wait_for_empty(self._core, envs, self._is_stopped, deadline):
                return  # stopped: ALF's blocking add returns without adding
            with self._atomic():
                first, end = self._core.stored_range()
                if (end[envs] == first[envs]).all():  # still empty: add under the lock
                    self._add_locked(envs, values, disc0, firsts, False, None)
                    return
        with self._atomic():
            self._add_locked(envs, values, disc0, firsts, blocking, timeout)

    def _add_locked(
        self,
        envs: Array,
        values: dict[str, Any],
        disc0: Array | None,
        firsts: Array,
        blocking: bool,
        timeout: float | None,
    ) -> None:
        """:meth:`add_batch` under the core's lock."""
        B = envs.shape[0]
        empty_firsts = envs[:0]
        if firsts.size:  # ALF: a FIRST begins an episode whatever came before it
            empty_firsts = cut_before_first(self._core, firsts, self._final, self._cuts)
        try:
            if blocking:

                def add(wait: float) -> Array:
                    return self._core.add(env_ids=envs, block=True, timeout=wait, **values)

                got = wait_unless_stopped(add, self._is_stopped, timeout, "add_batch")
                if got is None:  # stopped: ALF's blocking add returns without adding
                    return
                ids = got
            else:
                ids = self._core.add(env_ids=envs, **values)
        except DTypeError as exc:  # ALF's torch write raises RuntimeError here
            raise AssignDTypeError(str(exc)) from None
        t = ids // self._num_envs
        slots = envs * self._max_length + t % self._max_length
        self._disc0.record(envs, t, slots, disc0)
        self._begin_floor[empty_firsts] = t[np.isin(envs, empty_firsts)]
        self._joins.record(self._core, envs, t, firsts, self._begin_floor)
        if self._cuts is not None:
            self._cuts.written(slots)
        if self._pcore is not None and self._max_prio is not None:
            # ALF's rule, not the core's: max(initial, current largest priority).
            p0 = np.full(B, self._new_priority())  # inf or NaN after such a priority
            self._pcore.update_priorities(ids, np.where(is_odd(p0), 0.0, p0))
            self._max_prio.set(slots, np.where(np.isnan(p0), -math.inf, p0))  # NaN: in _odd
            if self._odd is not None:
                self._odd.set(slots, p0)
        if self._max_length == 1:  # ALF's one slot per env: the new step replaced the old
            keep_newest(self._core, envs)

    def stop(self) -> None:
        """Stop blocking calls: blocked and later blocking ones return ``None`` (ALF's ``stop``).

        Only blocking :meth:`add_batch` (which then adds nothing) and :meth:`dequeue` are
        affected, until :meth:`revive`; blocked calls notice within 0.05 s. Everything else
        goes on working, as in ALF.
        """
        self._stopped = True

    def revive(self) -> None:
        """Let blocking calls block again after :meth:`stop` (ALF's ``revive``)."""
        self._stopped = False

    def _is_stopped(self) -> bool:
        return self._stopped

    # ------------------------------------------------------------------ FIFO
    def dequeue(
        self,
        env_ids: Any = None,
        n: int = 1,
        blocking: bool = False,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Return the earliest ``n`` steps of each env and remove them from the buffer.

        Args:
            env_ids: 1-D int64 of unique envs (default: all); ``result[i]`` is from
                ``env_ids[i]``.
            n: Steps per env.
            blocking: Wait until every env in ``env_ids`` holds ``n`` steps.
            timeout: With ``blocking``, the most seconds to wait (rlreplay extension).

        Returns:
            A nest of tensors ``[batch_size, n, ...]`` on ``device``, or ``None`` when a
            blocking dequeue is ended by :meth:`stop` (or called while stopped).

        Raises:
            ReplayAssertionError: Not enough data and not ``blocking`` (an AssertionError).
            rlreplay.ReplayTimeout: ``blocking`` and not enough data within ``timeout``.
        """
        if timeout is not None:
            check_timeout(timeout)  # checked whether the call waits or not
        envs = env_array(env_ids, self._all_envs)
        with self._atomic():
            if blocking:

                def take(wait: float) -> Batch:
                    return self._core.dequeue(n, envs, block=True, timeout=wait)

                stopped_or_got = wait_unless_stopped(take, self._is_stopped, timeout, "dequeue")
                if stopped_or_got is None:  # stopped: ALF's blocking dequeue returns None
                    return None
                got = stopped_or_got
            else:
                if isinstance(n, int) and n > self._max_length:  # never enough: ALF asserts
                    raise ReplayAssertionError(
                        f"dequeue: not enough data: n={n} steps per env, but an env holds at "
                        f"most max_length={self._max_length}"
                    )
                try:
                    got = self._core.dequeue(n, envs)
                except EmptyBufferError as exc:
                    raise ReplayAssertionError(f"dequeue: not enough data: {exc}") from None
            self._forget(got)
        return self._nest(got, self._device)

    def gather_all(
        self, ignore_earliest_frames: bool = False, convert_to_default_device: bool = True
    ) -> tuple[Any, BatchInfo]:
        """Every stored step: a nest ``[E, T, ...]`` and its :class:`BatchInfo` (``[E]``).

        Args:
            ignore_earliest_frames: Drop the first ``num_earliest_frames_ignored`` steps of
                every env.
            convert_to_default_device: Return on torch's (ALF's) default device instead of
                ``device``.

        Returns:
            ``(nest, BatchInfo(env_ids=[0..E-1], positions=first position per env,
            replay_buffer=self, discounted_return=[E, T] if recorded))``.

        Raises:
            ReplayAssertionError: The envs hold different numbers of steps.
        """
        with self._atomic():
            heads, counts = self._bounds()
            sizes = counts - heads
            if (sizes != sizes[0]).any():
                raise ReplayAssertionError(
                    f"gather_all: every environment must hold the same number of steps, got "
                    f"{sizes.tolist()}"
                )
            got = self._core.gather_all()
            tails = self._tails(self._all_envs[:, None], heads[:, None] + np.arange(sizes[0]))
        k = min(self._ignored, int(sizes[0])) if ignore_earliest_frames else 0
        device = torch.get_default_device() if convert_to_default_device else self._device
        data = {name: arr[:, k:] for name, arr in got.items()}
        returns: Any = ()
        if self._record:
            T = next(iter(data.values())).shape[1]
            cut = cut_of(self._cuts, self._all_envs, heads + k, T)
            g = gathered_returns(data, cut, self._num_envs, self._default_return)
            returns = to_tensor((g + tails[:, k:]).astype(np.float32), device)
        info = BatchInfo(
            env_ids=to_tensor(self._all_envs.copy(), device),
            positions=to_tensor(heads + k, device),
            replay_buffer=self,
            discounted_return=returns,
        )
        return self._nest(data, device), info


def _on_accelerator(device: Any) -> bool:
    """Whether ``device`` names a usable torch device other than the CPU."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        return False  # (the constructor says why)
    return dev.type != "cpu" and (dev.type != "cuda" or torch.cuda.is_available())


forward_public(ReplayBuffer)  # a handle's calls run in the owner


class HostReplayBuffer(ReplayBuffer):
    """:class:`ReplayBuffer` with its data on the host whatever ``device`` is (``device``
    only places the tensors it hands back): every option, blocking calls and ALF's
    handling of negative, NaN and infinite priorities included, where ``ReplayBuffer(...,
    device="cuda")`` keeps the data on the device and refuses some of them
    (:class:`~rlreplay.compat.alf._device.DeviceReplayBuffer`)."""


def __getattr__(name: str) -> Any:
    if name == "DeviceReplayBuffer":  # (defined over this module's ReplayBuffer)
        from rlreplay.compat.alf._device import DeviceReplayBuffer

        return DeviceReplayBuffer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
