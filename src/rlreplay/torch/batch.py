"""The sample type of the device buffer: a read-only mapping of tensors on the device."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["DeviceBatch"]


class DeviceBatch(Mapping[str, "Tensor"]):
    """A sampled batch of device tensors: ``batch["obs"]`` and ``batch.obs`` both work.

    The keys of :class:`rlreplay.Batch`, in its order: every declared field, ``reward``,
    ``next_<obs>`` (and ``next_<name>`` per ``next_fields``), ``terminated``, ``truncated``,
    ``discount``, ``steps``, ``ids``, ``env_ids``, ``weights`` and, when prioritized,
    ``probabilities``.
    """

    __slots__ = ("_data",)
    _data: dict[str, Tensor]

    def __init__(self, data: Mapping[str, Tensor]) -> None:
        object.__setattr__(self, "_data", dict(data))

    def __getitem__(self, key: str) -> Tensor:
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
                f"DeviceBatch has no field {name!r}; it holds {sorted(self._data)}"
            ) from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("DeviceBatch is read-only; use batch.replace(name=tensor)")

    def __reduce__(self) -> tuple[type[DeviceBatch], tuple[dict[str, Tensor]]]:
        return (DeviceBatch, (self._data,))

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{k}: {getattr(v, 'dtype', type(v).__name__)}{list(getattr(v, 'shape', ()))}"
            for k, v in self._data.items()
        )
        return f"DeviceBatch({parts})"

    def replace(self, **tensors: Tensor) -> DeviceBatch:
        """A new batch with some tensors replaced or added; this one is unchanged."""
        return DeviceBatch({**self._data, **tensors})

    def to_dict(self) -> dict[str, Tensor]:
        """A plain ``dict`` of the same tensors."""
        return dict(self._data)
