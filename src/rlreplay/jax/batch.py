"""The sample type of the JAX buffer: a read-only mapping of arrays that is a pytree."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["JaxBatch", "register_batch"]


class JaxBatch(Mapping[str, Any]):
    """A sampled batch of JAX arrays: ``batch["obs"]`` and ``batch.obs`` both work.

    The keys of :class:`rlreplay.Batch`, in its order. A pytree (its keys are static), so it
    passes through ``jit``, ``vmap`` and ``lax.scan`` and ``jax.tree.map`` maps its arrays.
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
                f"JaxBatch has no field {name!r}; it holds {sorted(self._data)}"
            ) from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("JaxBatch is read-only; use batch.replace(name=array)")

    def __reduce__(self) -> tuple[type[JaxBatch], tuple[dict[str, Any]]]:
        return (JaxBatch, (self._data,))

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{k}: {getattr(v, 'dtype', type(v).__name__)}{list(getattr(v, 'shape', ()))}"
            for k, v in self._data.items()
        )
        return f"JaxBatch({parts})"

    def replace(self, **arrays: Any) -> JaxBatch:
        """A new batch with some arrays replaced or added; this one is unchanged."""
        return JaxBatch({**self._data, **arrays})

    def to_dict(self) -> dict[str, Any]:
        """A plain ``dict`` of the same arrays."""
        return dict(self._data)


def _flatten(batch: JaxBatch) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    data = batch._data
    return tuple(data.values()), tuple(data)


def _unflatten(keys: tuple[str, ...], values: Any) -> JaxBatch:
    return JaxBatch(dict(zip(keys, values, strict=True)))


_registered = False


def register_batch() -> None:
    """Make :class:`JaxBatch` a pytree (once; JAX is imported by then)."""
    global _registered
    if not _registered:
        from rlreplay.jax._lib import jax

        jax.tree_util.register_pytree_node(JaxBatch, _flatten, _unflatten)
        _registered = True
