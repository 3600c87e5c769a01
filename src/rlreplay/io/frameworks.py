"""Batches as PyTorch tensors or JAX arrays (torch and jax are imported only when asked for).

:func:`convert` turns every array of a :class:`~rlreplay.Batch` (from ``sample``,
``sample_sequences``, ``sample_episodes``, ``get_transitions``, prioritized or not) into the
framework's array type:

* ``as_="torch"`` on the CPU: :func:`torch.from_numpy`, which shares memory with the batch's
  array (no copy; the batch's arrays are fresh copies that the buffer never touches again).
  To another device (``"cuda:0"``, ...): the array is copied once into pinned (page-locked)
  host memory when CUDA is available, then sent with ``non_blocking=True``, so the transfer
  overlaps whatever the caller does next on the host.
* ``as_="jax"``: through DLPack (:func:`jax.numpy.from_dlpack`). On the CPU JAX takes the
  memory as is when the array is 64-byte aligned and of a dtype it keeps; otherwise it copies
  (with JAX's default ``jax_enable_x64=False`` a float64/int64 array becomes a 32-bit copy,
  as ``jnp.asarray`` would make it). ``device=`` then places it with :func:`jax.device_put`.
* ``as_="numpy"``: the batch itself.

A read-only array (e.g. a view a user transform returned) is copied first: neither
``torch.from_numpy`` nor DLPack may share memory that must not be written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from rlreplay.batch import Batch
from rlreplay.errors import ConfigError

__all__ = ["FORMATS", "TensorBatch", "convert", "to_jax", "to_torch"]

Array = np.ndarray[Any, Any]
FORMATS = ("numpy", "torch", "jax")


class TensorBatch(Mapping[str, Any]):
    """A read-only batch of framework arrays: ``tb["obs"]`` and ``tb.obs`` both work.

    The same keys as the :class:`~rlreplay.Batch` it came from; values are
    :class:`torch.Tensor` or :class:`jax.Array`.
    """

    __slots__ = ("_data",)
    _data: dict[str, Any]

    def __init__(self, data: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_data", dict(data))

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_data":
            raise AttributeError(name)
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(
                f"TensorBatch has no field {name!r}; it holds {sorted(self._data)}"
            ) from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("TensorBatch is read-only")

    def __reduce__(self) -> tuple[type[TensorBatch], tuple[dict[str, Any]]]:
        return (TensorBatch, (self._data,))

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self._data.items())
        return f"TensorBatch({parts})"

    def to_dict(self) -> dict[str, Any]:
        """A plain ``dict`` of the same tensors."""
        return dict(self._data)


def _shareable(arr: Array) -> Array:
    """``arr`` itself if a framework may share its memory, else a native-order writable copy."""
    if not arr.flags.writeable or not arr.dtype.isnative:
        return np.array(arr, dtype=arr.dtype.newbyteorder("="), copy=True)
    return arr


def _can_pin() -> bool:
    """Whether host memory can be page-locked here (it needs a CUDA runtime)."""
    import torch

    return bool(torch.cuda.is_available())


def to_torch(batch: Mapping[str, Array], device: Any = None) -> TensorBatch:
    """Every array of ``batch`` as a :class:`torch.Tensor` (see the module docstring).

    Args:
        batch: A :class:`~rlreplay.Batch` or any mapping of NumPy arrays.
        device: ``None``/``"cpu"`` (shared memory), or any torch device.

    Raises:
        ConfigError: ``device`` is not a torch device, or a CUDA device without CUDA.
    """
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised without torch installed
        raise ImportError("as_='torch' needs torch: pip install 'rlreplay[torch]'") from exc
    try:
        dev = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"device: expected a torch device, got {device!r} ({exc})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"device: {device!r} needs CUDA, which this torch ({torch.__version__}) does not "
            "have here; use device='cpu' or None"
        )
    out: dict[str, Any] = {}
    pin = dev.type != "cpu" and _can_pin()
    for name, arr in batch.items():
        tensor = torch.from_numpy(_shareable(np.asarray(arr)))
        if dev.type != "cpu":
            if pin:
                tensor = tensor.pin_memory()
            tensor = tensor.to(dev, non_blocking=True)
        out[name] = tensor
    return TensorBatch(out)


def _jax_device(jax: Any, device: Any) -> Any:
    if device is None or not isinstance(device, str):
        return device
    kind, _, index = device.partition(":")
    kind = {"cuda": "gpu"}.get(kind, kind)
    try:
        return jax.devices(kind)[int(index or 0)]
    except (RuntimeError, IndexError, ValueError) as exc:
        raise ConfigError(f"device: JAX has no device {device!r} ({exc})") from None


def to_jax(batch: Mapping[str, Array], device: Any = None) -> TensorBatch:
    """Every array of ``batch`` as a :class:`jax.Array`, through DLPack.

    Args:
        batch: A :class:`~rlreplay.Batch` or any mapping of NumPy arrays.
        device: ``None`` (JAX's default device), a JAX device, or ``"cpu"``, ``"gpu:0"``,
            ``"cuda:0"``, ``"tpu:0"``.

    Raises:
        ConfigError: No such JAX device.
    """
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as exc:  # pragma: no cover - exercised without jax installed
        raise ImportError("as_='jax' needs jax: pip install 'rlreplay[jax]'") from exc
    dev = _jax_device(jax, device)
    out: dict[str, Any] = {}
    for name, arr in batch.items():
        value = jnp.from_dlpack(_shareable(np.asarray(arr)))
        out[name] = value if dev is None else jax.device_put(value, dev)
    return TensorBatch(out)


def convert(batch: Mapping[str, Array], as_: str = "numpy", device: Any = None) -> Any:
    """``batch`` as NumPy (unchanged), torch or JAX arrays.

    Args:
        batch: A :class:`~rlreplay.Batch` (or any mapping of arrays).
        as_: ``"numpy"``, ``"torch"`` or ``"jax"``.
        device: Where the arrays go (``"cpu"``, ``"cuda:0"``, a framework device object);
            ``None`` keeps the framework's default. NumPy arrays live on the CPU only.

    Returns:
        ``batch`` itself for ``"numpy"``, else a :class:`TensorBatch`.

    Raises:
        ConfigError: An unknown ``as_``, or a ``device`` the framework does not know.

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> from rlreplay.io.frameworks import convert
        >>> b = rr.Batch(obs=np.zeros((2, 3), np.float32))
        >>> convert(b, "torch").obs.shape
        torch.Size([2, 3])
    """
    if as_ == "numpy":
        if device not in (None, "cpu"):
            raise ConfigError(f"device: NumPy arrays live on the CPU; got device={device!r}")
        return batch if isinstance(batch, Batch) else Batch(batch)
    if as_ == "torch":
        return to_torch(batch, device)
    if as_ == "jax":
        return to_jax(batch, device)
    raise ConfigError(f"as_: expected one of {FORMATS}, got {as_!r}")
