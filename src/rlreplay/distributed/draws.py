"""The service's draws: the shards' masses and their shares of a request, in one round trip
or two. Both give each batch exactly one buffer's law at one reading of the masses.

* **Two trips** (:func:`draw_in_two_trips`): read every shard's mass ``M_k``, split each batch
  ``Multinomial(B, M_k / M)``, then have each shard draw the sum of its shares. Rows cross the
  network once; every shard is called twice per request.
* **One trip** (:func:`draw_in_one_trip`): every shard draws the whole request
  (``n = B * batches``, i.i.d. with its own law) and returns its masses at that draw; the split
  is then made with those masses and shard ``k`` contributes its first ``sum_j counts[j, k]``
  rows. The first ``c`` of ``n`` i.i.d. draws are ``c`` i.i.d. draws and the counts depend on
  the masses only (not on the rows), so each batch has the same law as with two trips, with
  masses read at the draw itself. It costs ``S`` times the rows drawn and sent and saves a
  round trip to every shard: the service uses it while the surplus stays small
  (``ReplayService.one_trip_bytes``).

Row ``i`` of shard ``k`` becomes part of batch ``j`` for ``sum_{i<j} counts[i, k] <= row <
sum_{i<=j} counts[i, k]`` (:func:`~rlreplay.distributed.split.merge_draws`).

The learner's queued priority updates (``update_priorities(..., wait=False)``) ride on the
first call to each shard (the draw, or the mass reading), which applies them first: the draw
sees them and they cost no call of their own. A shard's reply is packed (:mod:`.wire`). A
request retried because a shard restarted sends the same updates again (the surviving shards
set the same priorities twice; the restarted one lost everything since its checkpoint).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlreplay import Batch
from rlreplay.distributed.split import merge_draws, split_batch_size
from rlreplay.distributed.updates import UpdateQueue
from rlreplay.distributed.wire import Reply, unpack_columns
from rlreplay.distributed.writer import call, retried

__all__ = ["draw_in_one_trip", "draw_in_two_trips"]

Array = np.ndarray[Any, Any]
Draws = Sequence[tuple[float, np.random.Generator]]


def _splits(batch_size: int, masses: Array, draws: Draws) -> Array:
    """``counts[j, k]``: batch ``j``'s share of shard ``k`` (one multinomial per batch)."""
    return np.stack([split_batch_size(batch_size, masses.tolist(), rng) for _, rng in draws])


def draw_in_two_trips(
    ray: Any,
    shards: Sequence[Any],
    batch_size: int,
    draws: Draws,
    timeout: float | None,
    prioritized: bool,
    updates: UpdateQueue,
) -> list[Batch]:
    """One batch per ``(beta, generator)`` of ``draws``: masses first, then each shard's
    shares (consecutive slices of its i.i.d. draws are the batches')."""
    packed: dict[int, bytes] = {}

    def submit(queued: Mapping[int, bytes]) -> list[Any]:
        packed.update(queued)
        return [s.info.remote(packed.get(k, b"")) for k, s in enumerate(shards)]

    first = [True]

    def attempt(left: float | None) -> tuple[Any, Array, Array, list[Any]]:
        # Masses and draws again if a shard restarts in between (its contents changed).
        t0 = time.monotonic()
        refs = updates.dispatch(submit) if first[0] else submit({})
        first[0] = False
        infos = call(ray, refs, left, "sample")
        for info in infos:
            if info[3] is not None:
                updates.fail(info[3])
        masses = np.asarray([m for _, m, _, _ in infos])
        counts = _splits(batch_size, masses, draws)
        totals = counts.sum(axis=0)
        refs = [shards[k].sample.remote(int(totals[k])) for k in range(len(shards)) if totals[k]]
        left = None if left is None else max(0.0, left - (time.monotonic() - t0))
        return infos, masses, counts, list(call(ray, refs, left, "sample"))

    infos, masses, counts, got = retried(attempt, timeout, "sample")
    drawing = [k for k in range(len(shards)) if counts[:, k].sum()]
    answers = {k: _unpacked(reply) for k, reply in zip(drawing, got, strict=True)}
    lows = [low for _, _, low, _ in infos] + [low for _, _, low in answers.values()]
    return merge_draws(
        answers, counts, draws, len(shards), prioritized=prioritized,
        total_mass=float(masses.sum()), smallest_mass=min(lows),
    )  # fmt: skip


def draw_in_one_trip(
    ray: Any,
    shards: Sequence[Any],
    batch_size: int,
    draws: Draws,
    timeout: float | None,
    prioritized: bool,
    updates: UpdateQueue,
) -> list[Batch]:
    """:func:`draw_in_two_trips`' batches in one round trip: every shard draws the whole
    request, the split keeps each shard's first rows (see the module's docstring)."""
    n = batch_size * len(draws)
    packed: dict[int, bytes] = {}

    def submit(queued: Mapping[int, bytes]) -> list[Any]:
        packed.update(queued)
        return [s.draw.remote(n, packed.get(k, b"")) for k, s in enumerate(shards)]

    first = [True]

    def attempt(left: float | None) -> list[Reply]:
        refs = updates.dispatch(submit) if first[0] else submit({})
        first[0] = False
        return list(call(ray, refs, left, "sample"))

    got = retried(attempt, timeout, "sample")
    for reply in got:
        if reply[4] is not None:
            updates.fail(reply[4])
    masses = np.asarray([reply[2] for reply in got])
    counts = _splits(batch_size, masses, draws)
    answers = {
        k: _unpacked(reply) for k, reply in enumerate(got) if reply[0] and counts[:, k].sum()
    }
    return merge_draws(
        answers, counts, draws, len(shards), prioritized=prioritized,
        total_mass=float(masses.sum()), smallest_mass=min(reply[3] for reply in got),
    )  # fmt: skip


def _unpacked(reply: Reply) -> tuple[dict[str, Array], float, float]:
    """``(columns, mass, smallest mass)`` of a shard's packed reply."""
    layout, payload, mass, smallest, _ = reply
    return unpack_columns(layout, payload), float(mass), float(smallest)
