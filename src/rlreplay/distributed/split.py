"""The global sampler's arithmetic: pure functions, no Ray.

A service of ``S`` shards stores env ``e`` in shard ``e % S`` as its local env ``e // S``; a
transition that shard ``k`` calls ``local`` is the service's id ``local * S + k``. Drawing ``B``
transitions as one buffer holding every shard's data would, with per-shard masses ``M_k``
(sampleable counts for uniform sampling, sums of ``p ** alpha`` for prioritized)::

    P(i) = m_i / M,  M = sum_k M_k,  i in shard k
         = (M_k / M) * (m_i / M_k)              (choose the shard, then draw inside it)

so the counts per shard are ``Multinomial(B, M_k / M)`` and each shard draws its share with its
own law ``m_i / M_k``. Importance weights use the global law and the global smallest mass::

    w_i = (P_min / P(i)) ** beta = (min_k minmass_k / m_i) ** beta,   m_i = P_k(i) * M_k

A final random permutation makes the batch exchangeable, as a single buffer's i.i.d. draws are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlreplay import Batch, EmptyBufferError, InvalidIdError

__all__ = [
    "encode_env_ids",
    "encode_ids",
    "merge_batches",
    "merge_draws",
    "pack_updates",
    "route_env_ids",
    "route_ids",
    "split_batch_size",
    "unpack_updates",
]

Array = np.ndarray[Any, Any]


def split_batch_size(batch_size: int, masses: Sequence[float], rng: np.random.Generator) -> Array:
    """How many of ``batch_size`` draws each shard makes: ``Multinomial(B, M_k / sum M)``.

    Raises:
        EmptyBufferError: Every shard's mass is 0.
    """
    m = np.asarray(masses, np.float64)
    total = float(m.sum())
    if not total > 0.0:
        raise EmptyBufferError(
            "sample: nothing is sampleable in any shard yet (or every priority is 0)"
        )
    counts: Array = rng.multinomial(batch_size, m / total)
    return counts


def route_env_ids(env_ids: Array, num_shards: int) -> tuple[Array, Array]:
    """``(shard, local env)`` of service env ids."""
    env_ids = np.asarray(env_ids, np.int64)
    return env_ids % num_shards, env_ids // num_shards


def encode_env_ids(local_env: Array, shard: int, num_shards: int) -> Array:
    """Service env ids of a shard's local envs."""
    out: Array = np.asarray(local_env, np.int64) * num_shards + shard
    return out


def encode_ids(local_ids: Array, shard: int, num_shards: int) -> Array:
    """Service transition ids of a shard's ids (the shard is the remainder)."""
    out: Array = np.asarray(local_ids, np.int64) * num_shards + shard
    return out


def route_ids(ids: Any, num_shards: int) -> tuple[Array, Array]:
    """``(shard, local id)`` of service ids, flattened.

    Raises:
        InvalidIdError: Non-integer or negative ids (never issued by any shard).
    """
    try:
        arr = np.asarray(ids)
    except (ValueError, TypeError, OverflowError):  # ragged nests, unconvertible objects
        arr = np.empty(0, object)
    if arr.dtype.kind not in "iu":
        raise InvalidIdError(f"ids: expected integer ids, got dtype {arr.dtype}")
    flat = arr.reshape(-1).astype(np.int64)
    if flat.shape[0] and flat.min() < 0:
        raise InvalidIdError(f"ids: {flat[flat < 0][:5].tolist()} were never issued (negative)")
    return flat % num_shards, flat // num_shards


def pack_updates(local_ids: Array, priorities: Array) -> bytes:
    """``n`` local ids (int64) then their ``n`` priorities (float64) as one ``bytes``.

    A Ray call pickles each NumPy argument on its own (~0.15 ms apiece here); one ``bytes``
    argument goes through Ray's fast path, so a priority update is one cheap argument.
    ``priorities`` must already be real numbers (the core's check), as float64 is what the
    core converts them to anyway.
    """
    ids = np.ascontiguousarray(local_ids, np.int64).reshape(-1)
    p = np.ascontiguousarray(priorities, np.float64).reshape(-1)
    return ids.tobytes() + p.tobytes()


def unpack_updates(data: bytes) -> tuple[Array, Array]:
    """``(local ids, priorities)`` of :func:`pack_updates`' bytes (views of ``data``)."""
    n = len(data) // 16
    ids: Array = np.frombuffer(data, np.int64, n)
    p: Array = np.frombuffer(data, np.float64, n, offset=8 * n)
    return ids, p


def merge_batches(
    parts: Sequence[tuple[int, Batch, float, float]],
    num_shards: int,
    rng: np.random.Generator,
    *,
    prioritized: bool,
    total_mass: float,
    smallest_mass: float,
    beta: float,
) -> Batch:
    """One batch from the shards' parts, with service ids, global probabilities and weights.

    Args:
        parts: ``(shard, batch, mass at draw time, smallest mass at draw time)`` per shard that
            drew; a prioritized shard's batch carries its own ``probabilities`` ``m_i / M_k``.
        num_shards: ``S``.
        rng: Draws the final permutation.
        prioritized: Whether to compute ``probabilities`` and ``weights`` (else weights 1).
        total_mass: ``M`` the split used (sum of the shards' masses).
        smallest_mass: Smallest positive mass over every shard (not only those that drew).
        beta: Importance exponent.
    """
    keys = list(parts[0][1].keys())
    data = {k: np.concatenate([np.asarray(b[k]) for _, b, _, _ in parts]) for k in keys}
    data["ids"] = np.concatenate([encode_ids(b["ids"], k, num_shards) for k, b, _, _ in parts])
    data["env_ids"] = np.concatenate(
        [encode_env_ids(b["env_ids"], k, num_shards) for k, b, _, _ in parts]
    )
    n = data["ids"].shape[0]
    if prioritized:
        mass = np.concatenate([np.asarray(b["probabilities"]) * m for _, b, m, _ in parts])
        data["probabilities"] = mass / total_mass
        data["weights"] = ((smallest_mass / mass) ** beta).astype(np.float32)
    else:
        data["weights"] = np.ones(n, np.float32)
    order = rng.permutation(n)
    return Batch({k: v[order] for k, v in data.items()})


def merge_draws(
    answers: Mapping[int, tuple[Mapping[str, Array], float, float]],
    counts: Array,
    draws: Sequence[tuple[float, np.random.Generator]],
    num_shards: int,
    *,
    prioritized: bool,
    total_mass: float,
    smallest_mass: float,
) -> list[Batch]:
    """Batches ``j = 0, 1, ...`` from shards that drew every batch's share in one call.

    Batch ``j`` is :func:`merge_batches` of its rows of each shard (in shard order), permuted
    by its generator; the rows every batch uses are joined once per field and each batch is
    one gather from them (the same values, a quarter of the copies with 4 batches).

    Args:
        answers: Per shard that drew, ``(columns of at least sum_j counts[j, k]`` i.i.d. draws,
            mass, smallest mass)``; batch ``j`` takes rows ``sum_{i<j} counts[i, k]`` onwards.
        counts: ``counts[j, k]``, batch ``j``'s share of shard ``k``.
        draws: ``(beta, generator)`` per batch (the generator draws its permutation).
        num_shards: ``S``.
        prioritized: As for :func:`merge_batches`.
        total_mass: ``M`` the splits used.
        smallest_mass: Smallest positive mass over every shard.
    """
    ks = [k for k in answers if counts[:, k].sum()]
    used = [int(counts[:, k].sum()) for k in ks]
    first = answers[ks[0]][0]
    # Every field, the shards' used rows one after the other (shard k's from base[k]).
    joined: dict[str, Array] = {}
    for name in first:
        if name not in ("ids", "env_ids", "weights"):
            joined[name] = np.concatenate(
                [np.asarray(answers[k][0][name])[:n] for k, n in zip(ks, used, strict=True)]
            )
    joined["ids"] = np.concatenate(
        [encode_ids(np.asarray(answers[k][0]["ids"])[:n], k, num_shards) for k, n in
         zip(ks, used, strict=True)]
    )  # fmt: skip
    joined["env_ids"] = np.concatenate(
        [encode_env_ids(np.asarray(answers[k][0]["env_ids"])[:n], k, num_shards) for k, n in
         zip(ks, used, strict=True)]
    )  # fmt: skip
    mass = None
    if prioritized:
        mass = np.concatenate(
            [np.asarray(answers[k][0]["probabilities"])[:n] * answers[k][1]
             for k, n in zip(ks, used, strict=True)]
        )  # fmt: skip
        joined["probabilities"] = mass / total_mass
    base = np.concatenate([[0], np.cumsum(used)[:-1]]).astype(np.int64)
    starts = np.concatenate([np.zeros((1, counts.shape[1]), np.int64), counts.cumsum(axis=0)])
    out = []
    for j, (beta, rng) in enumerate(draws):
        rows = np.concatenate(
            [base[i] + np.arange(starts[j, k], starts[j + 1, k]) for i, k in enumerate(ks)]
        )
        rows = rows[rng.permutation(rows.shape[0])]
        data = {name: v[rows] for name, v in joined.items()}
        if mass is not None:
            data["weights"] = ((smallest_mass / mass[rows]) ** beta).astype(np.float32)
        else:
            data["weights"] = np.ones(rows.shape[0], np.float32)
        out.append(Batch({name: data[name] for name in _order(first, data)}))
    return out


def _order(first: Mapping[str, Array], data: Mapping[str, Array]) -> list[str]:
    """:func:`merge_batches`' key order: the shard's fields, then what the merge adds."""
    keys = list(first.keys())
    return keys + [name for name in data if name not in keys]
