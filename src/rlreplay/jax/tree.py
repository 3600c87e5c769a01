"""The prioritized buffer's sum and min tree, of fanout :data:`~rlreplay.jax.config.TREE_FANOUT`,
as pure functions.

Layout (sizes from :func:`~rlreplay.jax.config.tree_levels`, each a multiple of ``K`` but the
root's):

* ``leaves``: ``(n0, 2)`` float32, per slot ``[priority, mass]``; the mass is
  ``priority ** alpha`` while the slot's step is sampleable (0 otherwise, and for padding);
* ``nodes``: one ``(n_l, 2)`` array per level above, per node ``[sum, min]`` of its ``K``
  children: the sum of their masses, and the smallest mass ``> 0`` below it (``+inf`` if
  none). The last level is the root alone: the total mass and the smallest mass.

Priority and mass share a row, and sum and min share a node, so that an update writes one row
per level (on a CPU a scatter's cost is mostly per call, not per byte). Every node is
recomputed from its children (no running deltas), so the tree never drifts from its leaves.
Levels of at most :data:`WHOLE` nodes are recomputed whole, which is cheaper than a gather and
a scatter. Cost: setting ``M`` leaves reads ``M`` rows of ``K`` per lower level; a draw of
``B`` reads ``B`` rows per level.
"""

from __future__ import annotations

from typing import Any

from rlreplay.jax._lib import jnp, lax
from rlreplay.jax.config import TREE_FANOUT

__all__ = ["WHOLE", "build", "descend", "set_leaves"]

K = TREE_FANOUT
#: Levels whose children number at most this many are recomputed whole on every update.
WHOLE = 2048


def _children(below: Any) -> Any:
    """``below`` seen as ``(nodes, K, 2)``: each node's children are one row."""
    return below.reshape(-1, K, 2)


def _reduce(children: Any, from_leaves: bool) -> Any:
    """``[sum, min]`` of ``(..., K, 2)`` children (leaves: ``[priority, mass]``)."""
    if from_leaves:
        mass = children[..., 1]
        low = jnp.min(jnp.where(mass > 0, mass, jnp.inf), axis=-1)
        return jnp.stack([mass.sum(axis=-1), low], axis=-1)
    return jnp.stack([children[..., 0].sum(axis=-1), children[..., 1].min(axis=-1)], axis=-1)


def _whole(below: Any, size: int, from_leaves: bool) -> Any:
    """A level of ``size`` nodes recomputed from the whole level below (padding: ``[0, inf]``)."""
    level = _reduce(_children(below), from_leaves)
    pad = jnp.broadcast_to(jnp.array([0.0, jnp.inf], jnp.float32), (size - level.shape[0], 2))
    return jnp.concatenate([level, pad])


def set_leaves(
    leaves: Any,
    nodes: tuple[Any, ...],
    idx: Any,
    priority: Any,
    mass: Any,
    valid: Any,
    *,
    largest: bool = False,
) -> tuple[Any, tuple[Any, ...]]:
    """Set leaves ``idx`` (where ``valid``) to ``[priority, mass]``; recompute their ancestors.

    Duplicate indices must carry equal values, unless ``largest``: then a leaf named several
    times gets the largest of its values (the mass must not decrease as the priority grows).
    Either way the result does not depend on the order in which a scatter applies duplicates
    (which XLA leaves undefined); ancestors of duplicates are equal too.
    """
    # Invalid entries point one past the level's end, where a scatter drops them.
    node = jnp.where(valid, idx, leaves.shape[0])
    rows = jnp.stack([priority, mass], axis=-1)
    if largest:
        leaves = leaves.at[node].set(-1.0, mode="drop").at[node].max(rows, mode="drop")
    else:
        leaves = leaves.at[node].set(rows, mode="drop")
    below, from_leaves, whole = leaves, True, False
    out = []
    for level in nodes:
        whole = whole or below.shape[0] <= WHOLE
        if whole:
            level = _whole(below, level.shape[0], from_leaves)
        else:
            node = node // K  # (an invalid node stays past the end of every level)
            rows = _children(below).at[node].get(mode="clip")
            level = level.at[node].set(_reduce(rows, from_leaves), mode="drop")
        out.append(level)
        below, from_leaves = level, False
    return leaves, tuple(out)


def build(leaves: Any, sizes: tuple[int, ...]) -> tuple[Any, ...]:
    """Every level above ``leaves`` (``(sizes[0], 2)``), from scratch."""
    out = []
    below, from_leaves = leaves, True
    for size in sizes[1:]:
        below = _whole(below, size, from_leaves)
        out.append(below)
        from_leaves = False
    return tuple(out)


def descend(leaves: Any, nodes: tuple[Any, ...], target: Any) -> tuple[Any, Any]:
    """``(leaf, mass)``: the leaf where the running sum of the masses first exceeds
    ``target``, per target, and its mass.

    A target at or beyond the total (rounding) gets the last leaf with a mass ``> 0``, so a
    leaf of mass 0 is never chosen while the total is ``> 0``. The mass comes from the rows
    the descent read (not from a read of its own): every read of the tree then feeds the ids
    drawn, which orders it before a later update of the tree, and XLA updates in place
    instead of copying the leaves (see :func:`rlreplay.jax.ring.write_index`).
    """
    node = jnp.zeros(target.shape, jnp.int32)
    lanes = jnp.arange(K, dtype=jnp.int32)
    # Running sums of a node's children as one small matrix product (an upper triangle of
    # ones): one dot per level instead of a scan; float32 sums (HIGHEST: no TF32 on a GPU).
    upper = jnp.triu(jnp.ones((K, K), jnp.float32))
    levels = (leaves, *nodes)
    for lvl in range(len(levels) - 2, -1, -1):
        channel = 1 if lvl == 0 else 0  # masses of leaves, sums of nodes
        children = _children(levels[lvl]).at[node].get(mode="clip")[..., channel]  # (B, K)
        running = jnp.dot(children, upper, precision=lax.Precision.HIGHEST)
        pick = jnp.sum(running <= target[:, None], axis=1, dtype=jnp.int32)
        # The first child whose running sum passes the target has a mass > 0 when the sums
        # grow with every child of mass > 0; a target past the node's sum, or a rounding that
        # breaks that, falls back to the last child with a mass.
        last = jnp.max(jnp.where(children > 0, lanes, 0), axis=1)
        chosen = jnp.sum(jnp.where(lanes == pick[:, None], children, 0.0), axis=1)
        pick = jnp.where(chosen > 0, pick, last)
        before = jnp.sum(jnp.where(lanes == (pick - 1)[:, None], running, 0.0), axis=1)
        target = target - before
        node = node * K + pick
    mass = jnp.sum(jnp.where(lanes == pick[:, None], children, 0.0), axis=1)
    return node, mass
