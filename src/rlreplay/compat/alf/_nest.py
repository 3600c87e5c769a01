"""ALF's nests and tensors to and from the core's named arrays (private to the ALF front-end).

Inputs (tensors on any device, arrays) become NumPy arrays: a batch of steps becomes the
core's ``add`` arguments (:func:`step_values`), env ids and positions become core ids
(:func:`env_array`, :func:`broadcast_ids`; the core id of ``(env, pos)`` is ``pos * E + env``).
Outputs are tensors (:func:`to_tensor`) packed in the structure of the ``data_spec``
(:func:`pack_rows`) or of a nest of dotted field names (:func:`field_tensors`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlreplay import DTypeError, FieldError, InvalidIdError, ShapeError
from rlreplay.compat.alf.segment_tree import as_numpy
from rlreplay.compat.alf.tensor_specs import (
    Path,
    TensorSpec,
    carrier,
    get_path,
    is_namedtuple,
    pack,
    split_path,
)

if TYPE_CHECKING:
    from rlreplay.compat.alf._setup import SpecLayout

__all__ = [
    "AssignDTypeError",
    "AssignShapeError",
    "as_spec",
    "broadcast_ids",
    "broadcast_leaf",
    "env_array",
    "field_tensors",
    "flag",
    "int_array",
    "leaf_values",
    "map_names",
    "narrowed",
    "pack_rows",
    "step_values",
    "to_tensor",
]

Array = np.ndarray[Any, Any]


# ---------------------------------------------------------------------- inputs
def int_array(value: Any, what: str) -> Array:
    """An int64 array of ``value`` (a tensor, array or list of integers)."""
    arr = as_numpy(value)
    if arr.dtype.kind not in "iu":
        raise InvalidIdError(f"{what}: expected integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def env_array(env_ids: Any, all_envs: Array) -> Array:
    """The 1-D env ids given, or ``all_envs`` for ``None``."""
    if env_ids is None:
        return all_envs
    arr = int_array(env_ids, "env_ids")
    if arr.ndim != 1:
        raise InvalidIdError(f"env_ids: expected a 1-D tensor, got shape {arr.shape}")
    return arr


def runs_to_clear(
    env_ids: Any, all_envs: Array, heads: Array, counts: Array
) -> list[tuple[int, int]]:
    """``(env, stored steps)`` of each env ``clear(env_ids)`` empties (``heads``/``counts``: the
    envs' stored ranges), each env once, in the order given; an env out of range raises ALF's
    indexing error before any env is cleared."""
    envs = env_array(env_ids, all_envs)
    n = counts.shape[0]
    out = envs[(envs >= n) | (envs < -n)]
    if out.size:
        raise IndexError(f"index {int(out[0])} is out of bounds for axis 0 with size {n}")
    return [
        (e, int(counts[e] - heads[e]))
        for e in dict.fromkeys(e % n for e in envs.tolist())  # an env named twice: once
        if counts[e] > heads[e]
    ]


def broadcast_ids(env_ids: Any, positions: Any, num_envs: int) -> tuple[Array, Array, Array]:
    """Broadcast ``env_ids`` and ``positions``; return ``(env, pos, core ids)``."""
    env = int_array(env_ids, "env_ids")
    pos = int_array(positions, "positions")
    try:
        env, pos = np.broadcast_arrays(env, pos)
    except ValueError:
        raise ShapeError(
            f"env_ids {env.shape} and positions {pos.shape} do not broadcast"
        ) from None
    bad = (env < 0) | (env >= num_envs) | (pos < 0)
    if bad.any():
        raise InvalidIdError(
            f"env_ids must be in [0, {num_envs}) and positions >= 0; got env "
            f"{env[bad][:5].tolist()} at positions {pos[bad][:5].tolist()}"
        )
    return env, pos, pos * num_envs + env


def step_values(
    batch: Any, layout: SpecLayout, rows: int, last_type: int
) -> tuple[dict[str, Any], Array | None]:
    """The core ``add`` arguments of a batch of ``rows`` steps, and which have discount 0.

    A step whose ``step_type`` is ``last_type`` ends its episode: ``terminated`` if its
    discount is 0 (or there is no discount), else ``truncated``. Without a top-level
    ``reward`` the core's reward is 0; the observation placeholder gets zero bytes.
    """
    values = leaf_values(batch, layout.leaves, layout.names)
    for path, spec in layout.leaves:  # ALF writes buffer[(env_ids, idx)] = value: broadcasts
        name = layout.names[path]
        values[name] = broadcast_leaf(name, values[name], (rows, *spec.shape))
    last = np.zeros(rows, np.bool_)
    disc0 = None
    if layout.step_type is not None:
        last = flag(values, layout.step_type, rows) == last_type
    if layout.discount is not None:
        disc0 = flag(values, layout.discount, rows) == 0
    values["terminated"] = last if disc0 is None else last & disc0
    values["truncated"] = np.zeros(rows, np.bool_) if disc0 is None else last & ~disc0
    if ("reward",) not in layout.names:
        values["reward"] = np.zeros(rows, np.float32)
    empty = np.zeros((rows, 0), np.uint8)
    values[layout.placeholder] = empty
    values["next_" + layout.placeholder] = empty
    return values, disc0


class AssignShapeError(ShapeError, RuntimeError):
    """A value that does not broadcast to its leaf's shape (torch's ``RuntimeError`` in ALF)."""


class AssignDTypeError(DTypeError, RuntimeError):
    """A value the leaf's dtype cannot hold (torch's ``RuntimeError`` in ALF's indexed write)."""


def broadcast_leaf(name: str, value: Any, shape: tuple[int, ...]) -> Any:
    """``value`` broadcast to ``shape``, as ALF's indexed write ``buffer[(env_ids, idx)] = v``.

    Raises:
        AssignShapeError: ``value`` does not broadcast to ``shape``, or is a batch of
            another size.
    """
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.shape == shape:
        return value
    if arr.ndim == len(shape) and arr.shape[0] != shape[0]:
        # ALF: "If None, batch_size must be num_environments"; "batch[i] is generated by
        # environment env_ids[i]": a batch of another size is not spread over the envs.
        raise AssignShapeError(
            f"{name}: batch_size {arr.shape[0]} given for {shape[0]} environments (env_ids)"
        )
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        raise AssignShapeError(
            f"{name}: value of shape {arr.shape} cannot be broadcast to {shape} "
            "([batch_size] + the TensorSpec's shape)"
        ) from None


# torch's scalar type names, as its index_put_ error message prints them.
_TORCH_NAMES: dict[torch.dtype, str] = {
    torch.float64: "Double", torch.float32: "Float", torch.float16: "Half",
    torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int", torch.int16: "Short",
    torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}  # fmt: skip


def leaf_values(
    batch: Any, leaves: list[tuple[Path, TensorSpec]], names: dict[Path, str]
) -> dict[str, Any]:
    """Core field name -> the batch's value of that leaf (tensors as NumPy arrays).

    A leaf whose dtype NumPy lacks (``bfloat16``) gets its value rounded to that dtype, as
    ALF's indexed write stores it, then widened exactly to the stored dtype (:func:`narrowed`).
    """
    values: dict[str, Any] = {}
    for path, spec in leaves:
        value = get_path(batch, path)
        if isinstance(value, torch.Tensor) and value.dtype != spec.dtype:
            # ALF writes ``buffer[(env_ids, pos)] = value``: torch's index_put_ refuses any
            # source dtype but the buffer's (float64 into float32, int64 into int32 too).
            raise AssignDTypeError(
                f"{names[path]}: Index put requires the source and destination dtypes match, "
                f"got {_TORCH_NAMES.get(spec.dtype, str(spec.dtype))} for the destination and "
                f"{_TORCH_NAMES.get(value.dtype, str(value.dtype))} for the source (the leaf's "
                f"TensorSpec dtype is {spec.dtype}, the tensor's {value.dtype})"
            )
        if carrier(spec.dtype) != spec.dtype:
            value = narrowed(names[path], value, spec.dtype)
        values[names[path]] = as_numpy(value) if isinstance(value, torch.Tensor) else value
    return values


def narrowed(name: str, value: Any, dtype: torch.dtype) -> Any:
    """``value`` rounded to ``dtype`` and widened back to :func:`carrier` ``(dtype)``.

    Non-numeric values are returned as they are (the core refuses them as for any leaf).

    Raises:
        AssignDTypeError: A kind NumPy's ``same_kind`` rule does not cast to the stored dtype
            (complex into ``bfloat16``), as the front-end refuses it for any other leaf.
    """
    wide = carrier(dtype)
    tensor = value if isinstance(value, torch.Tensor) else None
    if tensor is None:
        arr = np.asarray(value)
        if arr.dtype.kind not in "biufc":
            return value
        tensor = torch.from_numpy(np.ascontiguousarray(arr)).reshape(arr.shape)
    source = torch.empty(0, dtype=carrier(tensor.dtype)).numpy().dtype
    target = torch.empty(0, dtype=wide).numpy().dtype
    if not np.can_cast(source, target, casting="same_kind"):
        raise AssignDTypeError(
            f"{name}: cannot store {tensor.dtype} values in a {dtype} leaf (only casts of the "
            f"same kind, such as float32 into {dtype}, are made)"
        )
    return tensor.detach().cpu().to(dtype).to(wide)


def flag(values: dict[str, Any], name: str, rows: int) -> Array:
    """The ``(rows,)`` array of scalar field ``name`` of ``values``."""
    arr = np.asarray(values[name])
    if arr.shape != (rows,):
        raise ShapeError(f"{name}: expected shape ({rows},), got {arr.shape}")
    return arr


# ---------------------------------------------------------------------- outputs
def to_tensor(array: Array, device: torch.device) -> torch.Tensor:
    """A tensor of ``array`` on ``device`` (sharing memory on the CPU), of the same shape.

    (``np.ascontiguousarray`` alone would turn a 0-d array into shape ``(1,)``.)
    """
    arr = np.asarray(array)
    tensor = torch.from_numpy(np.ascontiguousarray(arr)).reshape(arr.shape)
    return tensor if device.type == "cpu" else tensor.to(device)


def pack_rows(
    spec: Any,
    names: dict[Path, str],
    data: Mapping[str, Array],
    device: torch.device,
    length: int | None = None,
) -> Any:
    """The nest of ``spec`` whose leaves are tensors of the core fields in ``data``.

    With ``length``, each field is cut to its first ``length`` steps (axis 1).
    """

    def leaf(path: Path) -> torch.Tensor:
        arr = data[names[path]]
        return as_spec(to_tensor(arr if length is None else arr[:, :length], device), spec, path)

    return pack(spec, leaf)


def as_spec(tensor: torch.Tensor, spec: Any, path: Path) -> torch.Tensor:
    """``tensor`` (a leaf at ``path`` of the nest ``spec``) in the leaf's dtype.

    Only a dtype NumPy lacks differs from the stored one (``bfloat16`` is stored as float32,
    which holds its values exactly).
    """
    leaf = get_path(spec, path)
    if isinstance(leaf, TensorSpec) and tensor.dtype != leaf.dtype:
        return tensor.to(leaf.dtype)
    return tensor


def field_tensors(
    field_name: Any,
    spec: Any,
    names: dict[Path, str],
    get: Callable[[str], Array],
    device: torch.device,
) -> Any:
    """Tensors of the core fields ``get`` reads, for a dotted path or a nest of them.

    A path to a sub-nest of ``spec`` gives that nest; the result has the structure of
    ``field_name``.

    Raises:
        rlreplay.FieldError: A name that is not a string, or no such field.
    """

    def one(name: str) -> Any:
        if not isinstance(name, str):
            raise FieldError(f"get_field: expected dotted field names, got {name!r}")
        path = split_path(name)
        sub = get_path(spec, path)
        return pack(sub, lambda rel: as_spec(to_tensor(get(names[path + rel]), device), sub, rel))

    return map_names(field_name, one)


def map_names(names: Any, fn: Any) -> Any:
    """Apply ``fn`` to every string of a nest of field names, keeping its structure."""
    if isinstance(names, str):
        return fn(names)
    if isinstance(names, Mapping):
        return {k: map_names(v, fn) for k, v in names.items()}
    if is_namedtuple(names):
        return type(names)(*(map_names(v, fn) for v in names))
    if isinstance(names, tuple | list):
        return type(names)(map_names(v, fn) for v in names)
    return fn(names)
