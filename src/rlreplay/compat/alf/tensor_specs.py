"""Stand-in for ``alf.tensor_specs``: :class:`TensorSpec` and the nests the replay buffer reads.

A *nest* is a :class:`TensorSpec` (a leaf), or a ``dict``, ``tuple``, ``list`` or
``namedtuple`` of nests, as in ALF. A leaf has a *path*: the dict keys, namedtuple field names
or tuple positions leading to it, written with dots (``"observation.image"``,
``"rollout_info.0"``), as ALF's ``get_field`` takes them.

The functions below (not part of ALF's API) flatten a spec nest to ``(path, spec)`` pairs, look
a path up in a nest of values, and rebuild a nest of the spec's structure from its leaves.
"""

from __future__ import annotations

import keyword
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch

from rlreplay import ConfigError, FieldError
from rlreplay.spec import RESERVED_NAMES

__all__ = ["TensorSpec"]

Path = tuple[str, ...]

# Core names a leaf may not take: built-in fields, and ``obs``, which the core always makes an
# observation field (the adapter's zero-byte placeholder takes it).
_BUILTIN = frozenset({"reward", "terminated", "truncated", "obs"})


#: Torch dtypes without a NumPy counterpart -> the torch dtype whose NumPy one holds every value
#: exactly (bfloat16 and the float8 formats have fewer exponent and mantissa bits than float32;
#: complex32 is two float16).
_WIDER: dict[torch.dtype, torch.dtype] = {
    dt: wide
    for name, wide in (
        ("bfloat16", torch.float32),
        ("float8_e4m3fn", torch.float32),
        ("float8_e4m3fnuz", torch.float32),
        ("float8_e5m2", torch.float32),
        ("float8_e5m2fnuz", torch.float32),
        ("float8_e8m0fnu", torch.float32),
        ("complex32", torch.complex64),
    )
    if isinstance(dt := getattr(torch, name, None), torch.dtype)
}


def carrier(dtype: torch.dtype) -> torch.dtype:
    """The torch dtype a tensor of ``dtype`` is stored as: ``dtype`` itself if NumPy has it,
    else a wider one that holds its every value exactly (``bfloat16`` -> ``float32``)."""
    return _WIDER.get(dtype, dtype)


def _torch_dtype(dtype: Any) -> torch.dtype:
    """A torch dtype from a torch dtype, a NumPy dtype (or type) or a name such as ``"int64"``."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        np_dtype = np.dtype(dtype)
        return torch.from_numpy(np.zeros(0, np_dtype)).dtype
    except (TypeError, ValueError):
        raise ConfigError(
            f"TensorSpec dtype: expected a torch dtype, a NumPy dtype or its name, got {dtype!r}"
        ) from None


class TensorSpec:
    """Shape and dtype of one tensor of a nest, without its batch dimensions (ALF's TensorSpec).

    Args:
        shape: The shape (``()`` for a scalar); an int ``n`` means ``(n,)``.
        dtype: A torch dtype (default ``torch.float32``), a NumPy dtype or a dtype name. A
            torch dtype without a NumPy counterpart (``bfloat16``, the float8 formats,
            ``complex32``) is stored losslessly in a wider NumPy dtype (:attr:`numpy_dtype`);
            tensors handed back are of ``dtype``.

    Example:
        >>> import torch
        >>> from rlreplay.compat.alf import TensorSpec
        >>> spec = TensorSpec((2, 3), torch.uint8)
        >>> spec.zeros(outer_dims=(4,)).shape
        torch.Size([4, 2, 3])
    """

    __slots__ = ("_dtype", "_np_dtype", "_shape")

    def __init__(self, shape: int | Iterable[int], dtype: Any = torch.float32) -> None:
        dims = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
        if not all(isinstance(d, int | np.integer) and not isinstance(d, bool) for d in dims):
            raise ConfigError(f"TensorSpec shape: expected ints, got {shape!r}")
        if any(d < 0 for d in dims):
            raise ConfigError(f"TensorSpec shape: expected sizes >= 0, got {tuple(dims)}")
        self._shape = torch.Size(int(d) for d in dims)
        self._dtype = _torch_dtype(dtype)
        try:
            if str(self._dtype).startswith(("torch.qint", "torch.quint")):
                raise TypeError("quantized")  # (making one warns that they are deprecated)
            self._np_dtype = torch.empty(0, dtype=carrier(self._dtype)).numpy().dtype
        except TypeError:  # quantized dtypes: a buffer of them cannot be written by index
            raise ConfigError(
                f"TensorSpec dtype: expected a numeric torch dtype, got {self._dtype}"
            ) from None

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, from_dim: int = 0) -> TensorSpec:
        """The spec of ``tensor`` with its first ``from_dim`` dimensions dropped."""
        return cls(tuple(tensor.shape[from_dim:]), tensor.dtype)

    @classmethod
    def from_array(cls, array: Any, from_dim: int = 0) -> TensorSpec:
        """The spec of a NumPy array with its first ``from_dim`` dimensions dropped."""
        arr = np.asarray(array)
        return cls(arr.shape[from_dim:], arr.dtype)

    @property
    def shape(self) -> torch.Size:
        """The shape, without batch dimensions."""
        return self._shape

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype."""
        return self._dtype

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        """The NumPy dtype the replay buffer stores this tensor in (float32 for bfloat16)."""
        return self._np_dtype

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._shape)

    def numel(self) -> int:
        """Number of elements of one tensor of this spec."""
        return int(np.prod(self._shape, dtype=np.int64))

    def is_discrete(self) -> bool:
        """Whether the dtype is an integer (or bool) type."""
        return not (self._dtype.is_floating_point or self._dtype.is_complex)

    def is_continuous(self) -> bool:
        """Whether the dtype is a floating-point type."""
        return self._dtype.is_floating_point

    def zeros(self, outer_dims: Iterable[int] | None = None) -> torch.Tensor:
        """A zero tensor of shape ``outer_dims + shape``."""
        outer = tuple(outer_dims) if outer_dims is not None else ()
        return torch.zeros(outer + tuple(self._shape), dtype=self._dtype)

    def ones(self, outer_dims: Iterable[int] | None = None) -> torch.Tensor:
        """A tensor of ones of shape ``outer_dims + shape``."""
        outer = tuple(outer_dims) if outer_dims is not None else ()
        return torch.ones(outer + tuple(self._shape), dtype=self._dtype)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorSpec):
            return NotImplemented
        return self._shape == other._shape and self._dtype == other._dtype

    def __hash__(self) -> int:
        return hash((tuple(self._shape), self._dtype))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={tuple(self._shape)}, dtype={self._dtype!r})"


# ---------------------------------------------------------------------------------- nests
def is_namedtuple(node: object) -> bool:
    """Whether ``node`` is a namedtuple instance (a tuple whose type has ``_fields``)."""
    return isinstance(node, tuple) and hasattr(type(node), "_fields")


def flatten_spec(spec: Any) -> list[tuple[Path, TensorSpec]]:
    """Every leaf of a spec nest with its path, depth first in the nest's own order.

    Raises:
        ConfigError: A node that is neither a TensorSpec nor a dict/tuple/list/namedtuple, a
            dict key that is not a string or contains a dot, or a nest without leaves.
    """
    out: list[tuple[Path, TensorSpec]] = []

    def walk(node: Any, path: Path) -> None:
        if isinstance(node, TensorSpec):
            out.append((path, node))
        elif isinstance(node, Mapping):
            for key, value in node.items():
                if not isinstance(key, str) or "." in key or not key:
                    raise ConfigError(
                        f"data_spec: dict keys must be non-empty strings without dots (they "
                        f"form the dotted field paths), got {key!r} at {'.'.join(path) or '<top>'}"
                    )
                walk(value, (*path, key))
        elif is_namedtuple(node):
            for key, value in zip(type(node)._fields, node, strict=True):
                walk(value, (*path, key))
        elif isinstance(node, tuple | list):
            for i, value in enumerate(node):
                walk(value, (*path, str(i)))
        else:
            raise ConfigError(
                f"data_spec: expected a nest (dict, tuple, list, namedtuple) of "
                f"rlreplay.compat.alf.TensorSpec, got {type(node).__name__} at "
                f"{'.'.join(path) or '<top>'}"
            )

    walk(spec, ())
    if not out:
        raise ConfigError("data_spec: the nest holds no TensorSpec")
    return out


def child(node: Any, key: str) -> Any:
    """The member ``key`` of a nest node: a dict key, a namedtuple field or a tuple position.

    Raises:
        FieldError: ``node`` has no member ``key``.
    """
    try:
        if isinstance(node, Mapping):
            return node[key]
        if is_namedtuple(node):
            return getattr(node, key)
        if isinstance(node, tuple | list):
            return node[int(key)]
        return getattr(node, key)
    except (KeyError, AttributeError, IndexError, ValueError):
        raise FieldError(f"no field {key!r} in {type(node).__name__}") from None


def get_path(node: Any, path: Path) -> Any:
    """The sub-nest (or leaf) of ``node`` at ``path``.

    Raises:
        FieldError: A component of ``path`` is missing (the message names the full path).
    """
    for depth, key in enumerate(path):
        try:
            node = child(node, key)
        except FieldError:
            where = ".".join(path[:depth]) or "the top level"
            raise FieldError(
                f"field {'.'.join(path)!r}: {type(node).__name__} at {where} has no {key!r}"
            ) from None
    return node


def pack(spec: Any, leaf: Callable[[Path], Any], path: Path = ()) -> Any:
    """A nest of the structure of ``spec`` whose leaf at path ``p`` is ``leaf(p)``."""
    if isinstance(spec, TensorSpec):
        return leaf(path)
    if isinstance(spec, Mapping):
        items = [(k, pack(v, leaf, (*path, k))) for k, v in spec.items()]
        return OrderedDict(items) if isinstance(spec, OrderedDict) else dict(items)
    if is_namedtuple(spec):
        fields = type(spec)._fields
        return type(spec)(*(pack(v, leaf, (*path, k)) for k, v in zip(fields, spec, strict=True)))
    values = [pack(v, leaf, (*path, str(i))) for i, v in enumerate(spec)]
    return values if isinstance(spec, list) else tuple(values)


def split_path(name: str) -> Path:
    """``"a.b.0"`` -> ``("a", "b", "0")``; ``""`` is the whole nest."""
    return tuple(name.split(".")) if name else ()


def core_field_names(paths: list[Path]) -> dict[Path, str]:
    """A core field name per leaf path: ``a.b`` -> ``a__b``.

    The top-level ``reward`` is the core's ``reward``; names the core reserves or builds in
    (``discount``, ``env_id``, ``terminated``, ``obs``, ...) and non-identifiers get an ``f_``
    prefix; clashes get trailing underscores.
    """
    used: set[str] = set()
    out: dict[Path, str] = {}
    for path in paths:
        base = "__".join(path) or "data"
        if path == ("reward",):
            name = "reward"
        elif _usable(base):
            name = base
        else:
            name = "f_" + re.sub(r"\W", "_", base)
        while name in used or (name != "reward" and not _usable(name)):
            name += "_"
        used.add(name)
        out[path] = name
    return out


def _usable(name: str) -> bool:
    return (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and not name.startswith(("_", "next_"))
        and name not in RESERVED_NAMES
        and name not in _BUILTIN
    )
