"""Batches as PyTorch tensors or JAX arrays (torch and jax are imported only when asked for).

:func:`convert` turns every array of a :class:`~rlreplay.Batch` (from ``sample``,
``sample_sequences``, ``sample_episodes``, ``get_transitions``, prioritized or not) into the
framework's array type:

* ``as_="torch"`` on the CPU: :func:`torch.from_numpy`, which shares memory with the batch's
  array (no copy; the batch's arrays are fresh copies that the buffer never touches again).
  To another device (``"cuda:0"``, ...): the array is copied once into pinned (page-locked)
  host memory when CUDA is available, then sent with ``non_blocking=True``, so the transfer
  overlaps whatever the caller does next on the host. A buffer's output to a CUDA device
  (and :meth:`~rlreplay.ReplayBuffer.iterate`'s) goes through a
  :class:`~rlreplay.io.staging.PinnedRing` instead: pinned buffers allocated once and reused,
  and the copies on a side stream, so they also overlap the learner's kernels.
* ``as_="jax"``: through DLPack (:func:`jax.numpy.from_dlpack`). On the CPU JAX takes the
  memory as is when the array is 64-byte aligned and of a dtype it keeps; otherwise it copies
  (with JAX's default ``jax_enable_x64=False`` a float64/int64 array becomes a 32-bit copy,
  as ``jnp.asarray`` would make it). ``device=`` then places it with :func:`jax.device_put`.
* ``as_="numpy"``: the batch itself.

The sampling calls of a buffer (``sample``, ``sample_sequences``, ``sample_episodes``,
``iterate``) take ``as_=``/``device=`` too, over a buffer-wide default given at construction:
:func:`resolve_output` checks a pair once (before anything is drawn) into an :class:`Output`,
and :func:`choose_output` picks a call's output, returning ``None`` for NumPy batches (the
buffer then returns its batch untouched, so the NumPy path costs two identity tests).

A read-only array (e.g. a view a user transform returned) is copied first: neither
``torch.from_numpy`` nor DLPack may share memory that must not be written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlreplay.batch import Batch, ReadOnlyBatch
from rlreplay.errors import ConfigError
from rlreplay.spec.arguments import shown

__all__ = [
    "FORMATS",
    "Output",
    "TensorBatch",
    "buffer_output",
    "choose_output",
    "convert",
    "resolve_output",
    "to_jax",
    "to_torch",
]

Array = np.ndarray[Any, Any]
FORMATS = ("numpy", "torch", "jax")


class TensorBatch(ReadOnlyBatch[Any]):
    """A read-only batch of framework arrays: ``tb["obs"]`` and ``tb.obs`` both work.

    The same keys as the :class:`~rlreplay.Batch` it came from; values are
    :class:`torch.Tensor` or :class:`jax.Array`.
    """

    __slots__ = ()


def _shareable(arr: Array) -> Array:
    """``arr`` itself if a framework may share its memory, else a native-order writable copy."""
    if not arr.flags.writeable or not arr.dtype.isnative:
        return np.array(arr, dtype=arr.dtype.newbyteorder("="), copy=True)
    return arr


def _can_pin() -> bool:
    """Whether host memory can be page-locked here (it needs a CUDA runtime)."""
    import torch

    return bool(torch.cuda.is_available())


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised without torch installed
        raise ImportError("as_='torch' needs torch: pip install 'rlreplay[torch]'") from exc
    return torch


def _torch_device(device: Any) -> Any:
    """``device`` as a :class:`torch.device` that this process can use.

    Raises:
        ConfigError: Not a torch device, or a CUDA device without CUDA.
    """
    torch = _torch()
    try:
        dev = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError, ValueError, OverflowError) as exc:
        raise ConfigError(f"device: expected a torch device, got {shown(device)} ({exc})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"device: {device!r} needs CUDA, which this torch ({torch.__version__}) does not "
            "have here; use device='cpu' or None"
        )
    return dev


def _to_torch(batch: Mapping[str, Array], dev: Any) -> TensorBatch:
    """:func:`to_torch` to an already checked :class:`torch.device`."""
    torch = _torch()
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


def to_torch(batch: Mapping[str, Array], device: Any = None) -> TensorBatch:
    """Every array of ``batch`` as a :class:`torch.Tensor` (see the module docstring).

    Args:
        batch: A :class:`~rlreplay.Batch` or any mapping of NumPy arrays.
        device: ``None``/``"cpu"`` (shared memory), or any torch device.

    Raises:
        ConfigError: ``device`` is not a torch device, or a CUDA device without CUDA.
    """
    return _to_torch(batch, _torch_device(device))


def _jax() -> Any:
    try:
        import jax
        import jax.numpy  # jax.numpy.from_dlpack below
    except ImportError as exc:  # pragma: no cover - exercised without jax installed
        raise ImportError("as_='jax' needs jax: pip install 'rlreplay[jax]'") from exc
    return jax


def _jax_device(device: Any) -> Any:
    """``device`` as a JAX device (``None`` stays ``None``: JAX's default device).

    Raises:
        ConfigError: No such JAX device, or neither a string nor a JAX device.
    """
    jax = _jax()
    if device is None:
        return device
    if not isinstance(device, str):
        if hasattr(device, "platform"):  # a jax.Device (checked here, not after a draw)
            return device
        raise ConfigError(f"device: expected a JAX device or a string, got {shown(device)}")
    kind, _, index = device.partition(":")
    kind = {"cuda": "gpu"}.get(kind, kind)
    try:
        return jax.devices(kind)[int(index or 0)]
    except (RuntimeError, IndexError, ValueError) as exc:
        raise ConfigError(f"device: JAX has no device {device!r} ({exc})") from None


def _to_jax(batch: Mapping[str, Array], dev: Any) -> TensorBatch:
    """:func:`to_jax` to an already resolved JAX device (or ``None``)."""
    jax = _jax()
    out: dict[str, Any] = {}
    for name, arr in batch.items():
        value = jax.numpy.from_dlpack(_shareable(np.asarray(arr)))
        out[name] = value if dev is None else jax.device_put(value, dev)
    return TensorBatch(out)


def to_jax(batch: Mapping[str, Array], device: Any = None) -> TensorBatch:
    """Every array of ``batch`` as a :class:`jax.Array`, through DLPack.

    Args:
        batch: A :class:`~rlreplay.Batch` or any mapping of NumPy arrays.
        device: ``None`` (JAX's default device), a JAX device, or ``"cpu"``, ``"gpu:0"``,
            ``"cuda:0"``, ``"tpu:0"``.

    Raises:
        ConfigError: No such JAX device, or neither a string nor a JAX device.
    """
    return _to_jax(batch, _jax_device(device))


class Output:
    """A checked output format: calling it turns a NumPy batch into ``as_`` arrays on ``device``.

    Built by :func:`resolve_output`, which resolves the device once (a :class:`torch.device`
    checked for CUDA, or a JAX device), so a call only converts.

    Attributes:
        as_: ``"torch"`` or ``"jax"``.
        device: The device as given (``None``, a string or a framework device).
    """

    __slots__ = ("_resolved", "_ring", "as_", "device")

    def __init__(self, as_: str, device: Any) -> None:
        self.as_ = as_
        self.device = device
        self._resolved = _torch_device(device) if as_ == "torch" else _jax_device(device)
        self._ring: Any = None  # a PinnedRing, made on the first batch to a CUDA device

    def __call__(self, batch: Mapping[str, Array]) -> TensorBatch:
        if self.as_ == "torch":
            dev = self._resolved
            if dev.type == "cuda" and _can_pin():
                ring = self._ring
                if ring is None:
                    from rlreplay.io.staging import PinnedRing

                    ring = self._ring = PinnedRing(dev)
                return TensorBatch(ring(batch))
            return _to_torch(batch, dev)
        return _to_jax(batch, self._resolved)

    def __repr__(self) -> str:
        return f"Output(as_={self.as_!r}, device={self.device!r})"


def resolve_output(as_: str, device: Any) -> Output | None:
    """``(as_, device)`` checked: ``None`` for NumPy batches, else an :class:`Output`.

    Raises:
        ConfigError: An unknown ``as_``, a ``device`` the framework does not know (a CUDA
            device without CUDA), or a device other than the CPU for NumPy.
        ImportError: The framework is not installed.
    """
    if not isinstance(as_, str):
        raise ConfigError(f"as_: expected one of {FORMATS}, got {shown(as_)}")
    if as_ == "numpy":
        if device is not None and str(device) != "cpu":
            raise ConfigError(
                f"device: NumPy arrays live on the CPU; got device={device!r} with as_='numpy' "
                "(pass as_='torch' or as_='jax' to send batches to a device)"
            )
        return None
    if as_ not in FORMATS:
        raise ConfigError(f"as_: expected one of {FORMATS}, got {shown(as_)}")
    return Output(as_, device)


def buffer_output(as_: str, device: Any) -> Output | None:
    """A buffer's default output, checked at construction (see :func:`resolve_output`).

    Checkpoints keep it, so its device is a string (a :class:`torch.device` is taken as its
    string); device objects of other kinds go to the sampling calls instead.

    Raises:
        ConfigError: As :func:`resolve_output`, or a device that is no string.
    """
    if device is not None and not isinstance(device, str):
        if type(device).__module__.partition(".")[0] != "torch":
            raise ConfigError(
                f"device: a buffer-wide device is a string such as 'cpu', 'cuda:0' or 'gpu:0' "
                f"(checkpoints keep it), got {device!r}; pass device objects per call"
            )
        device = str(device)
    return resolve_output(as_, device)


def choose_output(default: Output | None, as_: str | None, device: Any) -> Output | None:
    """The output of one sampling call: its ``as_``/``device`` over the buffer's ``default``.

    ``as_=None`` means the buffer's format. ``device=None`` means the buffer's device when
    the call's format is the buffer's, else the framework's default device.

    Raises:
        ConfigError: As :func:`resolve_output`.
    """
    if as_ is not None and not isinstance(as_, str):  # (an array would compare elementwise)
        raise ConfigError(f"as_: expected one of {FORMATS} or None, got {shown(as_)}")
    if as_ is None or as_ == ("numpy" if default is None else default.as_):
        if device is None:
            return default
        as_ = "numpy" if default is None else default.as_
    return resolve_output(as_, device)


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
    output = resolve_output(as_, device)
    if output is None:
        return batch if isinstance(batch, Batch) else Batch(batch)
    return output(batch)
