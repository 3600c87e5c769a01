"""The sample type: a read-only mapping of arrays with attribute access."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

import numpy as np

__all__ = ["Batch"]

Array = np.ndarray[Any, Any]
V = TypeVar("V")


class ReadOnlyBatch(Mapping[str, V]):
    """A read-only mapping of a batch's arrays: ``batch["obs"]`` and ``batch.obs`` both work;
    :meth:`replace` derives a new batch.

    The base of :class:`Batch` (NumPy arrays), :class:`rlreplay.io.TensorBatch`,
    :class:`rlreplay.jax.JaxBatch` and :class:`rlreplay.torch.DeviceBatch`, which differ only
    in what they hold (and, for JAX, in being a pytree). Messages and ``repr`` name the
    subclass.
    """

    __slots__ = ("_data",)
    _data: dict[str, V]
    #: What the batch holds, as the read-only message names it (``replace(name=...)``).
    _VALUE = "value"

    def __init__(self, data: Mapping[str, V]) -> None:
        object.__setattr__(self, "_data", dict(data))

    def __getitem__(self, key: str) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name: str) -> V:
        if name.startswith("__") or name == "_data":  # copy/pickle probe before _data exists
            raise AttributeError(name)
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no field {name!r}; it holds {sorted(self._data)}"
            ) from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"{type(self).__name__} is read-only; use batch.replace(name={self._VALUE}) for a "
            "new one"
        )

    def __reduce__(self) -> tuple[type[Self], tuple[dict[str, V]]]:
        return (type(self), (self._data,))

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{k}: {getattr(v, 'dtype', type(v).__name__)}{list(getattr(v, 'shape', ()))}"
            for k, v in self._data.items()
        )
        return f"{type(self).__name__}({parts})"

    def replace(self, **values: V) -> Self:
        """A new batch of the same type with some values replaced or added; this one is
        unchanged."""
        return type(self)({**self._data, **values})

    def to_dict(self) -> dict[str, V]:
        """A plain ``dict`` of the same values (not copied)."""
        return dict(self._data)


class Batch(ReadOnlyBatch[Array]):
    """A sampled batch: ``batch["obs"]`` and ``batch.obs`` both work.

    A batch from :meth:`rlreplay.ReplayBuffer.sample` holds ``obs``, ``action`` (and every other
    declared field), ``reward``, ``next_obs`` (and ``next_<name>`` for every observation field),
    ``terminated``, ``truncated``, ``discount``, ``steps``, ``ids``, ``env_ids`` and ``weights``,
    each with a leading batch axis. The mapping itself is read-only (use :meth:`replace` to derive
    a new batch); the arrays are fresh, writable copies that share nothing with the buffer.

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> b = rr.Batch(obs=np.zeros((2, 3)), reward=np.ones(2))
        >>> b.reward.sum(), sorted(b)
        (np.float64(2.0), ['obs', 'reward'])
    """

    __slots__ = ()
    _VALUE = "array"

    if TYPE_CHECKING:  # the keys every buffer sample has; extras are reached the same way
        obs: Array
        action: Array
        reward: Array
        next_obs: Array
        terminated: Array
        truncated: Array
        discount: Array
        steps: Array
        ids: Array
        env_ids: Array
        weights: Array

    def __init__(self, data: Mapping[str, Array] | None = None, /, **arrays: Array) -> None:
        merged = dict(data) if data is not None else {}
        merged.update(arrays)
        object.__setattr__(self, "_data", merged)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._data))

    @property
    def batch_size(self) -> int:
        """Length of the leading axis (0 for an empty batch)."""
        for v in self._data.values():
            return int(v.shape[0]) if v.ndim else 0
        return 0
