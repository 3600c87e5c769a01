"""ReplayService on a local Ray: its samples follow one buffer's law on the same data."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from scipy import stats

import rlreplay as rr
from rlreplay.distributed import ReplayService

E, S, CAP = 6, 3, 120  # 6 envs over 3 shards: 2 local envs each, 20-step rings like the reference
FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}


def trajectories(seed: int, steps: int) -> list[list[dict[str, Any]]]:
    """Per env, ``steps`` steps with random episode ends (more than a ring holds)."""
    rng = np.random.default_rng(seed)
    out = []
    for env in range(E):
        run = []
        for t in range(steps):
            done = bool(rng.random() < 0.15)
            run.append(
                dict(
                    obs=np.array([env, t], np.float32),
                    action=int(rng.integers(4)),
                    reward=float(rng.normal()),
                    terminated=done and bool(rng.random() < 0.5),
                    truncated=False,
                    next_obs=np.array([env, t + 1], np.float32),
                )
            )
            if done and not run[-1]["terminated"]:
                run[-1]["truncated"] = True
        out.append(run)
    return out


def fill(svc: ReplayService, ref: rr.ReplayBuffer, runs: list[list[dict[str, Any]]]) -> None:
    writers = [svc.writer([0, 3], flush_every=7), svc.writer([1, 2, 4, 5], flush_every=64)]
    for t in range(len(runs[0])):
        for w in writers:
            rows = [runs[e][t] for e in w.env_ids]
            w.add(**{k: np.stack([np.asarray(r[k]) for r in rows]) for k in rows[0]})
        for e in range(E):
            ref.add(env_ids=[e], **{k: np.asarray(v)[None] for k, v in runs[e][t].items()})
    for w in writers:
        w.close()


def service_to_ref(ids: np.ndarray) -> np.ndarray:
    """Map service ids to the reference's ids of the same (env, step)."""
    k, local = ids % S, ids // S
    n_local = np.array([len(range(j, E, S)) for j in range(S)])[k]
    t, local_env = local // n_local, local % n_local
    return t * E + (local_env * S + k)


def ref_to_service(ids: np.ndarray) -> np.ndarray:
    env, t = ids % E, ids // E
    k, local_env = env % S, env // S
    n_local = np.array([len(range(j, E, S)) for j in range(S)])[k]
    return (t * n_local + local_env) * S + k


def draw_counts(
    svc: ReplayService, ref_ids: np.ndarray, batches: int, b: int, per_call: int = 1
) -> np.ndarray:
    position = {int(i): j for j, i in enumerate(ref_ids)}
    counts = np.zeros(ref_ids.shape[0], np.int64)
    for batch in svc.iterate(b, prefetch=2, per_call=per_call):
        for i in service_to_ref(batch.ids):
            counts[position[int(i)]] += 1
        batches -= 1
        if not batches:
            break
    return counts


def test_uniform_sampling_is_one_buffers(ray_local):
    runs = trajectories(1, 50)  # 50 steps per env: rings of 20 overwrite
    with ReplayService(S, CAP, FIELDS, n_step=3, gamma=0.9, seed=3, num_envs=E) as svc:
        ref = rr.ReplayBuffer(CAP, FIELDS, num_envs=E, n_step=3, gamma=0.9, seed=0)
        fill(svc, ref, runs)
        ref_ids = ref.sampleable_ids()
        assert svc.stats()["sampleable"] == ref_ids.shape[0]
        # Same transitions, same contents (windows, discounts, next observations).
        got = svc.get_transitions(ref_to_service(ref_ids))
        want = ref.get_transitions(ref_ids)
        for name in ("obs", "action", "reward", "next_obs", "discount", "steps", "env_ids"):
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        for one_trip_bytes in (svc.one_trip_bytes, 0):  # one round trip; masses, then draws
            svc.one_trip_bytes = one_trip_bytes
            counts = draw_counts(svc, ref_ids, 24, 1024, per_call=6)
            expected = np.full(ref_ids.shape[0], counts.sum() / ref_ids.shape[0])
            assert stats.chisquare(counts, expected).pvalue > 1e-3
            batch = svc.sample(64)
            assert (batch.weights == 1).all() and set(service_to_ref(batch.ids)) <= set(ref_ids)


def test_prioritized_sampling_and_weights_are_one_buffers(ray_local):
    runs = trajectories(2, 40)
    alpha, beta = 0.7, 0.5
    svc = ReplayService(
        S, CAP, FIELDS, prioritized=True, alpha=alpha, beta=beta, n_step=2, seed=5, num_envs=E
    )
    ref = rr.PrioritizedReplayBuffer(
        CAP, FIELDS, num_envs=E, n_step=2, alpha=alpha, beta=beta, stratified=False, seed=0
    )
    fill(svc, ref, runs)
    ref_ids = ref.sampleable_ids()
    p = np.random.default_rng(0).gamma(0.5, 1.0, ref_ids.shape[0]) + 0.01
    assert ref.update_priorities(ref_ids, p) == 0
    assert svc.update_priorities(ref_to_service(ref_ids), p) == 0
    mass = (p + ref.eps) ** alpha
    law = mass / mass.sum()
    want = ref.sample(4096)
    by_id = {
        int(i): (pr, w) for i, pr, w in zip(want.ids, want.probabilities, want.weights, strict=True)
    }
    position = {int(i): j for j, i in enumerate(ref_ids)}
    for one_trip_bytes in (svc.one_trip_bytes, 0):  # one round trip; masses, then draws
        svc.one_trip_bytes = one_trip_bytes
        counts = draw_counts(svc, ref_ids, 24, 1024, per_call=6)  # 6 batches per request
        assert stats.chisquare(counts, law * counts.sum()).pvalue > 1e-3
        # Probabilities and weights: those of the single buffer for the same transitions.
        batch = svc.sample(512)
        mapped = service_to_ref(batch.ids)
        hits = [j for j, i in enumerate(mapped) if int(i) in by_id]
        assert len(hits) > 400
        np.testing.assert_allclose(
            batch.probabilities[hits], [by_id[int(mapped[j])][0] for j in hits]
        )
        np.testing.assert_allclose(batch.weights[hits], [by_id[int(mapped[j])][1] for j in hits])
        exact = law[[position[int(i)] for i in mapped]]
        np.testing.assert_allclose(batch.probabilities, exact, rtol=1e-12)
        np.testing.assert_allclose(batch.weights, (law.min() / exact) ** beta, rtol=1e-6)
    svc.close()


def test_priority_updates_route_and_skip_stale_ids(ray_local):
    svc = ReplayService(2, 40, FIELDS, prioritized=True, seed=0, num_envs=2)
    ref = rr.PrioritizedReplayBuffer(40, FIELDS, num_envs=2, seed=0)
    w = svc.writer([0, 1], flush_every=1)

    def step(t: int) -> None:
        values = dict(
            obs=np.zeros((2, 2), np.float32), action=[0, 0], reward=[0.0, 0.0],
            terminated=[False, False], truncated=[False, False],
        )  # fmt: skip
        w.add(**values)
        ref.add(**values)

    for t in range(10):
        step(t)
    old = svc.sample(16).ids
    assert set(old % 2) == {0, 1}  # ids name their shard
    assert svc.update_priorities(old, np.full(old.shape, 3.0)) == 0
    for t in range(40):  # rings of 20 per env: everything above is overwritten
        step(t)
    fresh = svc.sample(8).ids
    ids = np.concatenate([old, fresh])
    assert svc.update_priorities(ids, np.ones(ids.shape)) == old.shape[0]
    with pytest.raises(rr.InvalidIdError):
        svc.update_priorities(np.array([10**9]), np.ones(1))
    with pytest.raises(rr.InvalidIdError):
        svc.update_priorities(np.array([-1]), np.ones(1))
    with pytest.raises(rr.ShapeError):
        svc.update_priorities(fresh, np.ones(3))
    with pytest.raises(rr.PriorityError):  # checked before the float64 packing, as the core does
        svc.update_priorities(fresh, np.ones(8, bool))
    with pytest.raises(rr.PriorityError):
        svc.update_priorities(fresh, np.full(8, np.nan))
    # wait=False: queued, sent before the next draw (later updates win), errors come later.
    assert svc.update_priorities(fresh, np.full(8, 1e-6), wait=False) is None
    svc.update_priorities(fresh[:1], np.full(1, 1e6), wait=False)
    assert (svc.sample(64).ids == fresh[0]).mean() > 0.9
    svc.update_priorities(np.array([10**9]), np.ones(1), wait=False)
    svc.sample(4)  # sends it
    with pytest.raises(rr.InvalidIdError):
        for _ in range(100):  # the error surfaces once the shard has answered (bounded)
            svc.stats()
            time.sleep(0.05)
    svc.close()
    with pytest.raises(rr.ReplayClosed):
        svc.sample(1)


def test_rate_limiter_blocks_samples_and_times_out(ray_local):
    lim = rr.SampleToInsertRatio(samples_per_insert=2.0, min_size_to_sample=10, error_buffer=40.0)
    svc = ReplayService(2, 200, FIELDS, seed=0, num_envs=2, rate_limiter=lim)
    t0 = time.monotonic()
    with pytest.raises(rr.ReplayTimeout):
        svc.sample(4, timeout=0.3)
    assert time.monotonic() - t0 >= 0.25
    w = svc.writer([0, 1], flush_every=4)
    for _ in range(10):
        w.add(obs=np.zeros((2, 2), np.float32), action=[0, 0], reward=[0.0, 0.0],
              terminated=[False, False], truncated=[False, False])  # fmt: skip
    w.flush()
    st = svc.stats()["rate_limiter"]
    # size: sampleable transitions (each env's newest step waits for its next observation).
    assert st["inserts"] == 20 and st["size"] == 18 and st["sample_timeouts"] == 1
    # diff = 20 * 2 = 40; band [20 - 40, 20 + 40]: samples until diff would drop below -20.
    for _ in range(15):
        svc.sample(4, timeout=60)
    with pytest.raises(rr.ReplayTimeout):
        svc.sample(4, timeout=0.2)  # 40 - 60 - 4 < -20
    # Inserts are blocked once diff would exceed 60: 20 more steps bring it to 20, fine.
    svc.close()
