"""The sample type of the JAX buffer: a read-only mapping of arrays that is a pytree."""

from __future__ import annotations

from typing import Any

from rlreplay.batch import ReadOnlyBatch

__all__ = ["JaxBatch", "register_batch"]


class JaxBatch(ReadOnlyBatch[Any]):
    """A sampled batch of JAX arrays: ``batch["obs"]`` and ``batch.obs`` both work.

    The keys of :class:`rlreplay.Batch`, in its order. A pytree (its keys are static), so it
    passes through ``jit``, ``vmap`` and ``lax.scan`` and ``jax.tree.map`` maps its arrays.
    """

    __slots__ = ()


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
