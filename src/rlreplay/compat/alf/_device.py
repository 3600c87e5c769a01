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
draws (ALF's law, drawn exactly as the host-backed buffer draws it, with the same NumPy
generator seeded from torch's global one: for the same stream and ``torch.manual_seed``, both
return the same batches) and its checks that every env holds enough steps, which read each
env's stored range (a few ints) from the device; so do :meth:`gather_all`, :meth:`dequeue`,
:meth:`clear` of some envs and :meth:`get_field` (which refuses positions not stored).

Episodes are not tracked (ALF's sequences cross them, ``step_type`` shows them), so the
options that need episode information or priorities are refused with a
:class:`~rlreplay.ConfigError` naming them: ``prioritized_sampling``, ``keep_episodic_info``,
``num_earliest_frames_ignored > 0``, ``record_episodic_return``, as are
``allow_multiprocess``, ``enable_checkpoint`` and ``max_length=1``; blocking calls
(``add_batch(blocking=True)``, ``dequeue(blocking=True)``) are refused too (a device buffer is
used from one thread). :class:`rlreplay.compat.alf.replay_buffer.HostReplayBuffer` keeps the
data on the host and offers all of them, with results on ``device``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlreplay import ConfigError, DTypeError, EmptyBufferError, FieldError, InvalidIdError
from rlreplay.buffer import check_timeout
from rlreplay.compat.alf._draws import ReplayAssertionError, draw_starts
from rlreplay.compat.alf._nest import (
    _TORCH_NAMES,
    AssignDTypeError,
    AssignShapeError,
    as_spec,
    broadcast_ids,
    env_array,
    map_names,
)
from rlreplay.compat.alf._setup import check_options, positive, spec_layout
from rlreplay.compat.alf._types import BatchInfo
from rlreplay.compat.alf.replay_buffer import ReplayBuffer
from rlreplay.compat.alf.tensor_specs import carrier, get_path, pack, split_path

__all__ = ["DeviceReplayBuffer"]

Array = np.ndarray[Any, Any]

_HOST = "rlreplay.compat.alf.replay_buffer.HostReplayBuffer"


def _refuse(option: str, why: str) -> ConfigError:
    return ConfigError(
        f"{option}: a buffer whose data lives on a torch device {why}; use {_HOST} (data "
        "on the host, results on the device) for it"
    )


class DeviceReplayBuffer(ReplayBuffer):
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
        if prioritized_sampling:
            raise _refuse("prioritized_sampling", "draws uniformly only")
        if ignored:
            raise _refuse("num_earliest_frames_ignored", "keeps no episode information")
        if record_episodic_return:
            raise _refuse("record_episodic_return", "keeps no episode information")
        if keep_episodic_info:
            raise _refuse("keep_episodic_info", "keeps no episode information")
        if allow_multiprocess:
            raise _refuse("allow_multiprocess", "is used from one process")
        if enable_checkpoint:
            raise _refuse("enable_checkpoint", "has no checkpoint state")
        if C < 2:
            raise _refuse("max_length", "keeps at least 2 steps per env (max_length=1 given)")
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError):
            raise ConfigError(f"device: expected a torch device, got {device!r}") from None
        self._spec = data_spec
        self._layout = spec_layout(data_spec, False)
        self._names, self._discount = self._layout.names, self._layout.discount
        self._num_envs, self._max_length, self._ignored = E, C, 0
        self._keep_episodic_info = False
        self._prioritized = False
        self._initial_priority = float(initial_priority)
        self._recent_steps = positive("recent_data_steps", recent_data_steps)
        self._recent_ratio = float(recent_data_ratio)
        self._with_replacement = bool(with_replacement)
        self._record = False
        self._default_return = float(default_return)
        self._enable_checkpoint = False
        self._name = name
        self._sharing = None
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
        self._dev = rrt.DeviceReplayBuffer(
            E * C, self._layout.fields, num_envs=E, finals_per_env=1, device=dev, seed=0
        )
        self._device = self._dev.device
        self._leaves = [(path, spec, self._names[path]) for path, spec in self._layout.leaves]
        self._fill: dict[int, dict[str, torch.Tensor]] = {}  # per batch size: built-in values

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
        """``initial_priority`` (this buffer draws uniformly: no priorities are stored)."""
        return torch.tensor(self._initial_priority, dtype=torch.float32, device=self._device)

    def _bounds(self) -> tuple[Array, Array]:
        """Per env: the oldest stored position and ``current_pos`` (read from the device)."""
        first, end = self._dev.stored_range()
        return first, end

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
            blocking: Only False (this buffer is used from one thread).
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
            raise _refuse("blocking", "is used from one thread, so no call can make room")
        given: Any = None
        if env_ids is None:
            B = self._num_envs
        elif isinstance(env_ids, torch.Tensor):
            if env_ids.dim() != 1:
                raise InvalidIdError(
                    f"env_ids: expected a 1-D tensor, got shape {tuple(env_ids.shape)}"
                )
            B, given = int(env_ids.shape[0]), env_ids
        else:
            host = env_array(env_ids, self._all_envs)
            B, given = int(host.shape[0]), host
        values = self._step_values(batch, B)
        try:
            self._dev.add(env_ids=given, **values)
        except DTypeError as exc:
            raise AssignDTypeError(str(exc)) from None

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
        draws them (uniform; env ``e`` gets ``B // E`` sequences and ``B % E`` random envs one
        more; ``recent_data_*``, ``with_replacement``). Reads the envs' stored ranges from the
        device (one wait) and gathers the rows there.

        Returns:
            ``(nest [B, L, ...], BatchInfo)`` on torch's (ALF's) default device.

        Raises:
            ReplayAssertionError: An env holds fewer than ``batch_length`` steps.
        """
        B = positive("batch_size", batch_size)
        L = positive("batch_length", batch_length)
        heads, counts = self._bounds()
        env, t, _ = draw_starts(
            self._rng, None, heads, counts, B, L, ignored=0, recent_ratio=self._recent_ratio,
            recent_steps=self._recent_steps, replacement=self._with_replacement,
        )  # fmt: skip
        order = np.argsort(env, kind="stable")
        env, t = env[order], t[order]
        ids = torch.from_numpy(t * self._num_envs + env).to(self._device)
        seq = self._dev.get_sequences(ids, L, within_episode=False)
        device = torch.get_default_device()
        info = BatchInfo(
            env_ids=torch.from_numpy(env).to(device),
            positions=torch.from_numpy(t).to(device),
            importance_weights=(),
            replay_buffer=self,
            discounted_return=(),
        )
        return self._pack(seq, device), info

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
        device = torch.get_default_device() if convert_to_default_device else self._device
        info = BatchInfo(
            env_ids=torch.from_numpy(self._all_envs.copy()).to(device),
            positions=torch.from_numpy(heads).to(device),
            replay_buffer=self,
            discounted_return=(),
        )
        return self._pack(got, device), info

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
            rlreplay.ConfigError: ``blocking=True`` (this buffer is used from one thread).
        """
        if timeout is not None:
            check_timeout(timeout)
        if blocking:
            raise _refuse("blocking", "is used from one thread, so no call can add steps")
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
        return self._pack(got, self._device)

    def clear(self, env_ids: Any = None) -> None:
        """Remove every stored step of ``env_ids`` (default: all). Positions keep counting."""
        if env_ids is None:
            self._dev.clear()
            return
        envs = env_array(env_ids, self._all_envs)
        heads, counts = self._bounds()
        n = counts.shape[0]
        out = envs[(envs >= n) | (envs < -n)]
        if out.size:  # ALF's indexing error, raised before any env is cleared
            raise IndexError(f"index {int(out[0])} is out of bounds for axis 0 with size {n}")
        for e in dict.fromkeys(e % n for e in envs.tolist()):  # an env named twice: once
            if counts[e] > heads[e]:
                self._dev.dequeue(int(counts[e] - heads[e]), [e])

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

    # ------------------------------------------------------------------ refused
    def update_priority(self, env_ids: Any, positions: Any, priorities: Any) -> None:
        """Refused, as by the host-backed buffer without ``prioritized_sampling``."""
        raise ReplayAssertionError("update_priority: needs prioritized_sampling=True")

    def steps_to_episode_end(self, pos: Any, env_ids: Any) -> torch.Tensor:
        """Refused: this buffer keeps no episode information."""
        raise ReplayAssertionError("steps_to_episode_end: needs keep_episodic_info=True")

    def get_episode_begin_position(self, pos: Any, env_ids: Any) -> torch.Tensor:
        """Refused: this buffer keeps no episode information."""
        raise ReplayAssertionError("get_episode_begin_position: needs keep_episodic_info=True")

    def get_disc_0_begin_position(self, pos: Any, env_ids: Any) -> torch.Tensor:
        """Refused: this buffer keeps no episode information."""
        raise ReplayAssertionError("get_disc_0_begin_position: needs keep_episodic_info=True")

    def get_extra_state(self) -> dict[str, Any]:
        """Nothing (``enable_checkpoint`` is refused)."""
        return {}

    def set_extra_state(self, state: Any) -> None:
        """Nothing to restore."""

    def extra_repr(self) -> str:
        return super().extra_repr() + f", device={str(self._device)!r}"


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
