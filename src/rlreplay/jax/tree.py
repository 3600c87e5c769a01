"""The prioritized buffer's sum and min tree, of fanout :data:`~rlreplay.jax.config.TREE_FANOUT`,
as pure functions.

Layout (sizes from :func:`~rlreplay.jax.config.tree_levels`, each a multiple of ``K`` but the
root's):

* ``prio``: ``(n0,)`` float32, the priority of each slot's occupant;
* ``sums``: the sum tree's levels, leaves first: ``sums[0][s]`` is slot ``s``'s mass,
  ``prio ** alpha`` while its step is sampleable (0 otherwise, and for padding); node ``i`` of
  ``sums[l + 1]`` is the sum of children ``i * K .. i * K + K - 1`` of ``sums[l]``; the last
  level holds the total alone;
* ``mins``: the min tree's levels above the leaves (``mins[l]`` beside ``sums[l + 1]``): the
  smallest mass ``> 0`` below each node, ``+inf`` if none; the last is the smallest over the
  buffer.

Every node is recomputed from its children (no running deltas), so the tree never drifts from
its leaves. Levels of at most :data:`WHOLE` children are recomputed whole, cheaper than a
gather and a scatter. A node's children are one contiguous row of ``K`` values, gathered at
once. Cost: setting ``M`` leaves reads ``M`` rows per lower level; a draw of ``B`` reads
``B`` rows per level.
"""

from __future__ import annotations

from typing import Any

from rlreplay.jax._lib import jnp, lax
from rlreplay.jax.config import TREE_FANOUT

__all__ = ["WHOLE", "Tree", "build", "descend", "set_leaves"]

K = TREE_FANOUT
#: Levels whose children number at most this many are recomputed whole on every update.
WHOLE = 2048

#: ``(prio, sums, mins)``: see the module docstring.
Tree = tuple[Any, tuple[Any, ...], tuple[Any, ...]]


def _positive(mass: Any) -> Any:
    return jnp.where(mass > 0, mass, jnp.inf)


def _whole(values: Any, size: int, reduce: str) -> Any:
    """A level of ``size`` nodes from the whole level below (padding: 0 sums, inf mins)."""
    rows = values.reshape(-1, K)
    level = rows.sum(axis=1) if reduce == "sum" else rows.min(axis=1)
    pad = 0.0 if reduce == "sum" else jnp.inf
    return jnp.pad(level, (0, size - level.shape[0]), constant_values=pad)


def set_leaves(
    tree: Tree, idx: Any, priority: Any, mass: Any, valid: Any, *, largest: bool = False
) -> Tree:
    """Set leaves ``idx`` (where ``valid``) to ``priority`` and ``mass``; recompute their
    ancestors.

    Duplicate indices must carry equal values, unless ``largest``: then a leaf named several
    times gets the largest of its values (the mass must not decrease as the priority grows).
    Either way the result does not depend on the order in which a scatter applies duplicates
    (which XLA leaves undefined); ancestors of duplicates are equal too.
    """
    prio, sums, mins = tree[0], list(tree[1]), list(tree[2])
    # Invalid entries point one past the level's end, where a scatter drops them.
    node = jnp.where(valid, idx, prio.shape[0])
    if largest:
        prio = prio.at[node].set(-1.0, mode="drop").at[node].max(priority, mode="drop")
        sums[0] = sums[0].at[node].set(-1.0, mode="drop").at[node].max(mass, mode="drop")
    else:
        prio = prio.at[node].set(priority, mode="drop")
        sums[0] = sums[0].at[node].set(mass, mode="drop")
    whole = False
    for lvl in range(1, len(sums)):
        below_sums = sums[lvl - 1]
        below_mins = _positive(below_sums) if lvl == 1 else mins[lvl - 2]
        whole = whole or below_sums.shape[0] <= WHOLE
        if whole:
            sums[lvl] = _whole(below_sums, sums[lvl].shape[0], "sum")
            mins[lvl - 1] = _whole(below_mins, mins[lvl - 1].shape[0], "min")
            continue
        node = node // K  # (an invalid node stays past the end of every level)
        s = below_sums.reshape(-1, K).at[node].get(mode="clip").sum(axis=1)
        m = below_mins.reshape(-1, K).at[node].get(mode="clip").min(axis=1)
        sums[lvl] = sums[lvl].at[node].set(s, mode="drop")
        mins[lvl - 1] = mins[lvl - 1].at[node].set(m, mode="drop")
    return prio, tuple(sums), tuple(mins)


def build(prio: Any, mass: Any, sizes: tuple[int, ...]) -> Tree:
    """The tree from scratch over ``prio`` and the leaf masses ``mass`` (both ``(sizes[0],)``)."""
    sums = [mass]
    mins: list[Any] = []
    for lvl, size in enumerate(sizes[1:], start=1):
        sums.append(_whole(sums[-1], size, "sum"))
        below = _positive(mass) if lvl == 1 else mins[-1]
        mins.append(_whole(below, size, "min"))
    return prio, tuple(sums), tuple(mins)


def descend(sums: tuple[Any, ...], target: Any) -> tuple[Any, Any]:
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
    children = None
    pick = node
    for lvl in range(len(sums) - 2, -1, -1):
        children = sums[lvl].reshape(-1, K).at[node].get(mode="clip")  # (B, K)
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
