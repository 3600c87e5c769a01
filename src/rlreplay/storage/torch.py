"""Field data on torch tensors, on any torch device (``"cpu"``, ``"cuda:0"``, ...).

:class:`TorchStorage` keeps the layout and the contract of :class:`rlreplay.storage.Columns`
(see :mod:`rlreplay.storage.base`): a step column per field of shape ``(E * C, *field.shape)``
(env ``e``'s ring is rows ``e * C .. e * C + C - 1``), a finals column per observation field of
shape ``(E * F, *field.shape)``, and derived columns of shape ``(E * C,)``, each a tensor
allocated once on the storage's device.

Dtypes. A field of NumPy dtype ``d`` is stored as the torch dtype of ``d`` in the host's byte
order (``">f8"`` becomes ``torch.float64``): torch knows one byte order. Unsigned 16-, 32- and
64-bit fields, which torch cannot gather or scatter, are held in the signed tensor of the same
width and shown as an unsigned view of it (:attr:`TorchStorage.steps` and the tensors
:meth:`TorchStorage.take` returns have the unsigned dtype; the bits are the same). Dtypes torch
lacks (``float128``, ``complex256``) are refused when the storage is made.

Inputs and outputs. :meth:`TorchStorage.write`, :meth:`~TorchStorage.write_finals`,
:meth:`~TorchStorage.take`, :meth:`~TorchStorage.take_finals` and
:meth:`~TorchStorage.grow_finals` take slots, positions, row selections and values as tensors
(moved to the storage's device if they are elsewhere) or as NumPy arrays and scalars (copied
to the device once). :meth:`~TorchStorage.take` and :meth:`~TorchStorage.take_finals` return
fresh tensors on the device.

Host synchronisation. Given tensors on the device, those methods,
:meth:`~TorchStorage.add_derived`, :meth:`~TorchStorage.set_finals_capacity` and
:attr:`~TorchStorage.nbytes` never wait for the device: they read no device value on the host
(no ``.item()``, ``.cpu()``, ``.tolist()`` or ``bool()`` of a device tensor) and make no
data-dependent shape (a bool mask of rows on the device is turned into row numbers with a
stable sort, whose size is known). A NumPy input costs one host-to-device copy, which a CUDA
device may order after the work already queued on it. What reads device data on the host, and
so waits for the device, says so: :meth:`~TorchStorage.to_numpy`,
:meth:`~TorchStorage.state_dict` (the checkpoint's arrays are NumPy arrays), and
:meth:`~TorchStorage.load_state_dict` and :meth:`~TorchStorage.assign` (they copy host arrays
in).

Joint observation tensors. Made with ``joint_finals=True``, the storage allocates each
observation field's step rows and final rows in one tensor (:meth:`~TorchStorage.joint`;
:attr:`~TorchStorage.steps` and :attr:`~TorchStorage.finals` are views of it), so a gather
mixing step and final rows is one index op (:meth:`~TorchStorage.take_joint`). Rows whose
bytes are whole int64 words (at least 64 bytes) are gathered and scattered as words.

Checkpoints. :meth:`~TorchStorage.state_dict` gives the arrays of the NumPy storage's format
(same names, NumPy dtypes including byte order, shapes), and
:meth:`~TorchStorage.load_state_dict` reads them, so a state moves between the two storages
and between devices. :meth:`~TorchStorage.state_arrays` gives the live tensors.

Torch is imported when a storage is made (or a function here is called), not when this module
is: ``import rlreplay`` and the import of this module stay free of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.errors import CheckpointError, ConfigError
from rlreplay.spec.schema import Schema

if TYPE_CHECKING:
    import torch
    from torch import Tensor

__all__ = ["TorchStorage", "numpy_dtype", "torch_dtype"]

#: Rows of at least this many bytes (a multiple of 8) are gathered and scattered as int64 words.
_WIDE_BYTES = 64

Array = np.ndarray[Any, Any]


_TWINS: dict[torch.dtype, torch.dtype] = {}


def _signed_twins() -> dict[torch.dtype, torch.dtype]:
    """Unsigned dtypes torch cannot index_select / index_copy, and the signed dtype of the same
    width that holds their bits here (filled on first use; a plain dict, which
    :func:`torch.compile` reads as a constant, unlike a cached function)."""
    if not _TWINS:
        import torch

        _TWINS.update(
            {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}
        )
    return _TWINS


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype holding NumPy ``dtype``'s values (in the host's byte order).

    Raises:
        ConfigError: Torch has no such dtype (``float128``, ``complex256``, non-numeric kinds).
    """
    import torch

    native = np.dtype(dtype).newbyteorder("=")
    try:
        return torch.from_numpy(np.empty(0, native)).dtype
    except TypeError:
        raise ConfigError(
            f"torch storage: torch has no dtype for {np.dtype(dtype)}; store the field as a "
            "dtype torch knows (bool, [u]int8-64, float16-64, complex64/128)"
        ) from None


def numpy_dtype(dtype: torch.dtype) -> np.dtype[Any]:
    """The NumPy dtype (host byte order) of torch ``dtype``."""
    import torch

    out: np.dtype[Any] = torch.empty(0, dtype=dtype).numpy().dtype
    return out


def _to(t: Tensor, device: torch.device, dtype: torch.dtype | None = None) -> Tensor:
    """``t`` on ``device`` (as ``dtype``): a copy from the host is queued without waiting; a copy
    from a device to the host waits for it (its result is read at once)."""
    return t.to(device=device, dtype=dtype, non_blocking=t.device.type == "cpu")


def _raw(t: Tensor) -> Tensor:
    """``t`` as a tensor torch can gather and scatter: an unsigned 16-64-bit tensor as its signed
    twin (same bits), anything else as it is."""
    twin = _signed_twins().get(t.dtype)
    return t if twin is None else t.view(twin)


class _Column:
    """One stored column: the tensor torch indexes (``raw``), the tensor shown (``public``: the
    same tensor, or an unsigned view of it), ``raw`` viewed as 2-D rows of int64 words where
    its rows are whole words of at least :data:`_WIDE_BYTES` (``flat``: torch's CPU row
    gather and scatter are several times faster on 2-D rows than on ``(n, 84, 84)`` ones, and
    on words than on bytes) and the NumPy dtype of the checkpoint format."""

    __slots__ = ("dtype", "flat", "public", "raw", "row_shape")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        device: torch.device,
        raw: Tensor | None = None,
    ) -> None:
        import torch

        self.dtype = dtype
        shown = torch_dtype(dtype)
        if raw is None:
            raw = torch.zeros(shape, dtype=_signed_twins().get(shown, shown), device=device)
        self.raw = raw
        self.row_shape: tuple[int, ...] = tuple(raw.shape[1:])
        self.public = self.raw if self.raw.dtype == shown else self.raw.view(shown)
        width = math.prod(raw.shape[1:])
        flat = raw.view(raw.shape[0], width) if raw.dim() > 2 else raw
        row_bytes = flat.shape[1] * flat.element_size() if flat.dim() == 2 else 0
        wide = row_bytes >= _WIDE_BYTES and row_bytes % 8 == 0 and flat.element_size() < 8
        if wide and not flat.dtype.is_complex:
            flat = flat.view(torch.int64)
        self.flat = flat

    def rows(self, values: Tensor) -> Tensor:
        """``values`` (``(R, *row_shape)``, ``raw``'s dtype) as rows of :attr:`flat`."""
        if self.flat is self.raw:
            return values
        words = values.reshape(values.shape[0], math.prod(values.shape[1:]))
        return words.contiguous().view(self.flat.dtype)


class TorchStorage:
    """Per-field columns of one buffer as torch tensors on ``device`` (a
    :class:`rlreplay.storage.Storage`; see the module docstring for dtypes, inputs and which
    methods wait for the device).

    Args:
        schema: The buffer's fields.
        num_envs: ``E``.
        env_capacity: ``C``, rows per env.
        finals_capacity: ``F``, final-observation rows per env.
        device: Any torch device (a ``torch.device`` or its name).
        joint_finals: Allocate each observation field's step rows, final rows, ``E`` spare
            rows and a row of zeros as one tensor (see :meth:`joint`), so one gather reads
            steps, finals and padding together (the device buffer's ``next_<obs>``).
            :meth:`grow_finals` and :meth:`set_finals_capacity` give the finals their own
            tensor again (:meth:`joint` is then ``None``).

    Raises:
        ConfigError: ``device`` is not a torch device, or a field's dtype has no torch dtype.
    """

    def __init__(
        self,
        schema: Schema,
        num_envs: int,
        env_capacity: int,
        finals_capacity: int,
        device: torch.device | str = "cpu",
        *,
        joint_finals: bool = False,
    ) -> None:
        import torch

        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ConfigError(f"torch storage: {device!r} is not a torch device ({exc})") from None
        for name, f in schema.fields.items():
            try:
                torch_dtype(f.dtype)
            except ConfigError as exc:
                raise ConfigError(f"field {name!r}: {exc}") from None
        self.schema = schema
        self.num_envs = num_envs
        self.env_capacity = env_capacity
        self.finals_capacity = finals_capacity
        rows = num_envs * env_capacity
        self._steps = {
            name: _Column((rows, *f.shape), f.dtype, self.device)
            for name, f in schema.fields.items()
        }
        self._joint: dict[str, _Column] = {}
        if joint_finals:
            self._make_joint(rows)
        self._finals = {
            name: self._joint_finals(name) if name in self._joint
            else self._alloc_finals(name, finals_capacity)
            for name in self._obs()
        }  # fmt: skip
        self._derived: dict[str, _Column] = {}
        self.steps: dict[str, Tensor] = {n: c.public for n, c in self._steps.items()}
        self.finals: dict[str, Tensor] = {n: c.public for n, c in self._finals.items()}
        self.derived: dict[str, Tensor] = {}
        # No host addresses for a sampling kernel to prefetch: device rows are read on the device.
        self.prefetch_table: Array = np.zeros((0, 2), np.int64)

    def __repr__(self) -> str:
        return (
            f"TorchStorage(num_envs={self.num_envs}, env_capacity={self.env_capacity}, "
            f"finals_capacity={self.finals_capacity}, device={str(self.device)!r})"
        )

    # ------------------------------------------------------------------ allocation
    def _obs(self) -> list[str]:
        return list(self.schema.observation_names)

    def _make_joint(self, rows: int) -> None:
        """One tensor per observation field: ``rows`` step rows, ``E * F`` final rows, ``E``
        spare rows and a row of zeros; its first ``rows`` rows become the field's step
        column."""
        E, F = self.num_envs, self.finals_capacity
        for name in self._obs():
            f = self.schema.fields[name]
            whole = _Column((rows + E * F + E + 1, *f.shape), f.dtype, self.device)
            self._joint[name] = whole
            self._steps[name] = _Column((), f.dtype, self.device, whole.raw[:rows])

    def _joint_finals(self, name: str) -> _Column:
        rows = self.num_envs * self.env_capacity
        whole = self._joint[name]
        end = rows + self.num_envs * self.finals_capacity
        return _Column((), whole.dtype, self.device, whole.raw[rows:end])

    def joint(self, name: str) -> Tensor | None:
        """The one tensor holding observation field ``name``'s step rows (``0 .. E*C - 1``),
        then its final rows (``E*C + p`` for finals position ``p``), then ``E`` spare rows
        (``E*C + E*F + e``: scratch a scatter may write to instead of a real row), then a row
        of zeros (``E*C + E*F + E``: nothing writes it; a gather of it pads), as the raw
        dtype torch indexes (see :func:`_raw`); ``None`` unless the storage was made
        with ``joint_finals`` and its finals were not reallocated since. Live: writes show in
        :attr:`steps` and :attr:`finals`."""
        col = self._joint.get(name)
        return None if col is None else col.raw

    def take_joint(self, name: str, rows: Tensor) -> Tensor:
        """Rows ``rows`` (int64 on the device, any shape ``S``) of :meth:`joint` ``(name)``: a
        fresh tensor of shape ``S + field.shape``, as :meth:`take` (one gather for step and
        final rows alike)."""
        return self._gather(self._joint[name], rows)

    def write_joint(self, name: str, rows: Tensor, values: Any) -> None:
        """Store ``values`` (``(R, *field.shape)``, cast as :meth:`write` casts) at the
        distinct rows ``rows`` (int64 ``(R,)`` on the device) of :meth:`joint` ``(name)``:
        one scatter for step, final and spare rows alike."""
        col = self._joint[name]
        self._put(col, rows, self._values(values, col))

    def _alloc_finals(self, name: str, finals_capacity: int) -> _Column:
        f = self.schema.fields[name]
        return _Column((self.num_envs * finals_capacity, *f.shape), f.dtype, self.device)

    def _set_finals(self, finals: dict[str, _Column], finals_capacity: int) -> None:
        self._joint.clear()  # the finals have their own tensors now
        self._finals = finals
        self.finals = {n: c.public for n, c in finals.items()}
        self.finals_capacity = finals_capacity

    def add_derived(self, name: str, dtype: np.dtype[Any], fill: float) -> Tensor:
        """Allocate a computed per-step column of ``(E * C,)`` rows of ``dtype``, every row
        ``fill``; returns the live tensor (also :attr:`derived` ``[name]``)."""
        col = _Column((self.num_envs * self.env_capacity,), np.dtype(dtype), self.device)
        col.public.fill_(fill)
        self._derived[name] = col
        self.derived[name] = col.public
        return col.public

    @property
    def nbytes(self) -> int:
        """Bytes allocated on the device for stored data (every step, finals and derived
        column)."""
        # A joint tensor counts once, in place of its step and final views.
        cols = [*self._joint.values(), *self._derived.values()]
        cols += [
            c for n, c in (*self._steps.items(), *self._finals.items()) if n not in self._joint
        ]
        return sum(c.raw.nbytes for c in cols)

    # ------------------------------------------------------------------ conversions
    def _index(self, index: Any) -> Tensor:
        """Row numbers as a flat int64 tensor on the device."""
        import torch

        if isinstance(index, torch.Tensor):
            t = index
        else:
            t = torch.from_numpy(_host_array(np.asarray(index, dtype=np.int64)))
        if t.dtype != torch.int64:
            t = t.to(torch.int64)
        if t.device != self.device:
            t = _to(t, self.device)
        return t.reshape(-1)

    def _values(self, value: Any, col: _Column) -> Tensor:
        """``value`` as a tensor of ``col``'s raw dtype on the device. A tensor of another
        dtype is cast where it is; a NumPy value is cast on the host, then copied once."""
        import torch

        if isinstance(value, torch.Tensor):
            t = value if value.dtype == col.public.dtype else value.to(col.public.dtype)
        else:
            a = np.asarray(value)
            native = col.dtype.newbyteorder("=")
            t = torch.from_numpy(_host_array(a if a.dtype == native else a.astype(native)))
        if t.device != self.device:
            t = _to(t, self.device)
        return _raw(t)

    def _rows(self, rows: Any, count: int) -> Tensor:
        """Row numbers (flat int64 on the device) of a row selection: a bool mask or row
        numbers, a tensor or a NumPy array; ``count`` is how many rows a mask selects (known on
        the host: the number of positions written)."""
        import torch

        if isinstance(rows, torch.Tensor) and rows.dtype == torch.bool:
            mask = _to(rows, self.device).reshape(-1)
            # The True entries' numbers, in order, without reading the mask on the host: a
            # stable sort puts them first, and there are count of them.
            return torch.argsort(mask.logical_not().to(torch.uint8), stable=True)[:count]
        if not isinstance(rows, torch.Tensor):
            host = np.asarray(rows)
            rows = np.flatnonzero(host) if host.dtype == np.bool_ else host
        return self._index(rows)

    def to_numpy(self, array: Tensor, dtype: Any = None) -> Array:
        """A fresh NumPy copy of ``array`` (a tensor of this storage, or one it returned).

        Waits for the device (the data is copied to the host).

        Args:
            array: A tensor.
            dtype: The field's NumPy dtype, when known: a result in the host's byte order is
                given ``dtype``'s byte order (so a ``">f8"`` field reads back as ``">f8"``).
                It never casts to another kind or size.
        """
        host = array.detach().resolve_conj().resolve_neg().to("cpu")
        out: Array = np.array(host.numpy())
        if dtype is not None:
            want = np.dtype(dtype)
            if want != out.dtype and want.newbyteorder("=") == out.dtype:
                out = out.astype(want)
        return out

    def assign(self, array: Tensor, index: Any, values: Any) -> None:
        """``array[index] = values`` for a tensor of this storage (a live column, as from
        :meth:`state_arrays`, or one it returned), with ``values`` a tensor, a NumPy array or
        anything :func:`numpy.asarray` takes, cast to ``array``'s dtype. How a checkpoint's host
        arrays are streamed into the live columns (a NumPy input waits for its copy)."""
        import torch

        target = _raw(array)
        if isinstance(values, torch.Tensor):
            v = values.to(device=array.device, dtype=array.dtype)
        else:
            a = np.asarray(values, dtype=numpy_dtype(array.dtype))
            v = torch.from_numpy(_host_array(a)).to(array.device, non_blocking=True)
        target[index] = _raw(v)

    @staticmethod
    def column_address(array: Tensor) -> tuple[int, int]:
        """``(address of the first byte, row stride in bytes)`` of a column: on its device, so
        not something a host kernel may read (hence the empty :attr:`prefetch_table`)."""
        stride = array.stride(0) * array.element_size() if array.dim() else 0
        return array.data_ptr(), stride

    # ------------------------------------------------------------------ reads
    def _gather(self, col: _Column, rows: Any) -> Tensor:
        import torch

        if isinstance(rows, torch.Tensor):
            shape = rows.shape
            if rows.dtype != torch.int64 or rows.device != self.device or rows.dim() != 1:
                rows = self._index(rows)
        else:
            shape, rows = np.shape(rows), self._index(rows)
        out = col.flat.index_select(0, rows)
        if col.flat is not col.raw:
            out = out.view(col.raw.dtype).view(*shape, *col.row_shape)
        elif len(shape) != 1:
            out = out.view(*shape, *col.row_shape)
        return out if col.public is col.raw else out.view(col.public.dtype)

    def take(self, name: str, slots: Any) -> Tensor:
        """Rows ``slots`` (int64, any shape ``S``; a tensor or a NumPy array) of step column
        ``name``: a fresh tensor on the device of shape ``S + field.shape``."""
        return self._gather(self._steps[name], slots)

    def take_checked(self, name: str, slots: Tensor) -> Tensor:
        """:meth:`take` of ``slots`` already checked (int64 ``(R,)`` on the storage's device),
        with no conversion: a fresh ``(R, *field.shape)`` tensor."""
        return self._gather_checked(self._steps[name], slots)

    def take_joint_checked(self, name: str, rows: Tensor) -> Tensor:
        """:meth:`take_joint` of ``rows`` already checked, as :meth:`take_checked`."""
        return self._gather_checked(self._joint[name], rows)

    def _gather_checked(self, col: _Column, rows: Tensor) -> Tensor:
        out = col.flat.index_select(0, rows)
        if col.flat is not col.raw:
            out = out.view(col.raw.dtype).view(rows.shape[0], *col.row_shape)
        return out if col.public is col.raw else out.view(col.public.dtype)

    def take_finals(self, name: str, positions: Any) -> Tensor:
        """Rows ``positions`` of the finals column of observation field ``name`` (a fresh
        tensor, as :meth:`take`)."""
        return self._gather(self._finals[name], positions)

    # ------------------------------------------------------------------ writes
    def _put(self, col: _Column, slots: Any, rows: Tensor) -> None:
        """Copy ``rows`` (``col``'s raw dtype, on the device) to ``slots`` of ``col``."""
        import torch

        if isinstance(slots, int | np.integer | slice):
            col.raw[slots].copy_(rows)
            return
        if isinstance(slots, torch.Tensor) and slots.dtype == torch.int64:
            idx = slots.reshape(-1) if slots.device == self.device else self._index(slots)
        else:
            idx = self._index(slots)
        want = (idx.shape[0], *col.row_shape)
        if rows.shape != want:
            rows = rows.expand(want)
        col.flat.index_copy_(0, idx, col.rows(rows))

    def write(self, slots: Any, values: Mapping[str, Any]) -> None:
        """Store one row of every field at ``slots`` (an int, a slice, or distinct int64 slot
        numbers ``(R,)`` as a tensor or a NumPy array); ``values[f]`` are tensors, NumPy arrays
        or scalars of the field's dtype, shape ``field.shape`` for an int slot and
        ``(R, *field.shape)`` otherwise. Other entries of ``values`` are ignored."""
        for name, col in self._steps.items():
            self._put(col, slots, self._values(values[name], col))

    def write_checked(self, slots: Tensor, values: Mapping[str, Tensor]) -> None:
        """:meth:`write` for inputs already checked, with no conversion: ``slots`` distinct
        int64 slot numbers ``(R,)`` and each ``values[f]`` a tensor ``(R, *field.shape)`` of
        the field's (shown) dtype, all on the storage's device."""
        for name, col in self._steps.items():
            self._put_checked(col, slots, values[name])

    def write_joint_checked(self, name: str, rows: Tensor, values: Tensor) -> None:
        """:meth:`write_joint` for inputs already checked, as :meth:`write_checked`."""
        self._put_checked(self._joint[name], rows, values)

    @staticmethod
    def _put_checked(col: _Column, rows: Tensor, values: Tensor) -> None:
        flat = col.flat
        if flat is col.public:  # (the tensor shown is the one indexed, rows as they are)
            flat.index_copy_(0, rows, values)
        else:
            flat.index_copy_(0, rows, col.rows(_raw(values)))

    def write_finals(self, positions: Any, values: Mapping[str, Any], rows: Any) -> None:
        """Store final observations ``values["next_<name>"]`` of every observation field at
        final ``positions`` (int64 ``(P,)``, distinct). ``rows`` is ``None`` for one unbatched
        step, else which rows of the batched values end their episode (a bool mask or row
        numbers, a tensor or a NumPy array)."""
        import torch

        count = int(positions.shape[0]) if hasattr(positions, "shape") else len(positions)
        for name, col in self._finals.items():
            v = values["next_" + name]
            if rows is None:
                t = self._values(v, col).unsqueeze(0)
            elif isinstance(v, torch.Tensor) or isinstance(rows, torch.Tensor):
                t = self._values(v, col).index_select(0, self._rows(rows, count))
            else:  # both on the host: copy only the rows that end
                t = self._values(np.asarray(v)[rows], col)
            self._put(col, positions, t)

    def grow_finals(self, new_capacity: int, old_pos: Any, new_pos: Any) -> None:
        """Reallocate the finals columns with ``new_capacity`` records per env, row
        ``new_pos[i]`` holding what row ``old_pos[i]`` held (zeros elsewhere)."""
        old_idx, new_idx = self._index(old_pos), self._index(new_pos)
        fresh: dict[str, _Column] = {}
        for name, old in self._finals.items():
            col = self._alloc_finals(name, new_capacity)
            col.raw.index_copy_(0, new_idx, old.raw.index_select(0, old_idx))
            fresh[name] = col
        self._set_finals(fresh, new_capacity)

    def set_finals_capacity(self, finals_capacity: int) -> None:
        """Reallocate the finals columns empty (zeros) with ``finals_capacity`` records per
        env; the step and derived columns keep their tensors and contents."""
        fresh = {name: self._alloc_finals(name, finals_capacity) for name in self._obs()}
        self._set_finals(fresh, finals_capacity)

    # ------------------------------------------------------------------ state
    def _columns(self) -> dict[str, _Column]:
        out = {f"steps/{k}": v for k, v in self._steps.items()}
        out.update({f"finals/{k}": v for k, v in self._finals.items()})
        out.update({f"derived/{k}": v for k, v in self._derived.items()})
        return out

    def state_arrays(self) -> dict[str, Tensor]:
        """Every column by checkpoint name (``steps/<field>``, ``finals/<obs field>``,
        ``derived/<name>``): the live tensors. :meth:`to_numpy` reads one to the host and
        :meth:`assign` writes host rows into one."""
        return {name: col.public for name, col in self._columns().items()}

    def state_dict(self) -> dict[str, Any]:
        """``{"finals_capacity": F, "arrays": {name: NumPy copy}}``, in the NumPy storage's
        checkpoint format (each array of its field's NumPy dtype). Waits for the device."""
        arrays = {k: self.to_numpy(c.public, c.dtype) for k, c in self._columns().items()}
        return {"finals_capacity": self.finals_capacity, "arrays": arrays}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (of this storage or of a NumPy
        :class:`~rlreplay.storage.Columns` with the same schema, sizes and derived columns):
        NumPy arrays copied into the step and derived tensors in place, the finals reallocated
        first if the state's capacity differs.

        Raises:
            CheckpointError: A state without ``finals_capacity`` and ``arrays``, a capacity that
                is not a positive int, a missing or unexpected array, or one of another dtype
                or shape. Checked before anything changes: the columns are then unchanged.
        """
        if not isinstance(state, Mapping) or set(state) != {"finals_capacity", "arrays"}:
            keys = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            raise CheckpointError(
                f"torch storage: expected a state_dict() ({{'finals_capacity', 'arrays'}}), "
                f"got {keys}"
            )
        finals, arrays = state["finals_capacity"], state["arrays"]
        if isinstance(finals, bool) or not isinstance(finals, int | np.integer) or finals < 1:
            raise CheckpointError(
                f"torch storage: finals_capacity must be a positive int, got {finals!r}"
            )
        finals = int(finals)
        dest = self._columns()
        if not isinstance(arrays, Mapping) or set(arrays) != set(dest):
            names = set(arrays) if isinstance(arrays, Mapping) else set()
            raise CheckpointError(
                f"torch storage: arrays {sorted(set(dest) - names)} are missing and "
                f"{sorted(names - set(dest))} unexpected; give a state_dict() of a storage "
                "with this schema and these derived columns"
            )
        for name, arr in arrays.items():
            col = dest[name]
            want = tuple(col.raw.shape)
            if name.startswith("finals/"):  # sized by the state's finals capacity
                want = (self.num_envs * finals, *want[1:])
            fits = isinstance(arr, np.ndarray) and arr.dtype == col.dtype
            if not fits or arr.shape != want:
                got = (arr.dtype, arr.shape) if isinstance(arr, np.ndarray) else type(arr).__name__
                raise CheckpointError(
                    f"torch storage: array {name!r} must be a {col.dtype} ndarray of shape "
                    f"{want}, got {got}"
                )
        if finals != self.finals_capacity:
            self.set_finals_capacity(finals)
            dest = self._columns()
        for name, arr in arrays.items():
            self.assign(dest[name].public, Ellipsis, arr)


def _host_array(a: Array) -> Array:
    """``a`` as an array :func:`torch.from_numpy` takes without a warning or an error: native
    byte order, writable, no negative strides (copied only when it is not)."""
    if a.dtype.byteorder not in "=|":
        a = a.astype(a.dtype.newbyteorder("="))
    if not a.flags.writeable or any(s < 0 for s in a.strides):
        a = np.array(a, order="C")
    return a
