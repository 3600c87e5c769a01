"""Concurrent use from several threads: one lock keeps every call atomic."""

from __future__ import annotations

import threading

import numpy as np

import rlreplay as rr
from tests.reference import RefBuffer, assert_batch_matches


def test_concurrent_adds_and_samples_stay_consistent() -> None:
    E, steps = 4, 300
    buf = rr.ReplayBuffer(
        E * 64, {"obs": rr.Field((2,), np.float32)}, num_envs=E, n_step=2, frame_stack=2,
        seed=0,
    )  # fmt: skip
    ref = RefBuffer(E, 64, 2, 0.99, 2, True, ("obs",))
    values = {
        e: [
            {
                "obs": np.array([e, t], np.float32),
                "reward": float(t % 4),
                "terminated": t % 17 == 16,
                "truncated": t % 23 == 22,
                "next_obs": np.array([-e, -t], np.float32),
            }
            for t in range(steps)
        ]
        for e in range(E)
    }
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(e: int) -> None:
        try:
            for v in values[e]:  # each thread owns one env, so per-env order is fixed
                buf.add(env_ids=[e], **{k: np.asarray(x)[None] for k, x in v.items()})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            while not stop.is_set():
                if buf.num_sampleable:
                    b = buf.sample(32)
                    assert (b.obs[:, 1, 0] == b.env_ids).all()  # rows never mix envs
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(e,)) for e in range(E)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for th in threads + readers:
        th.start()
    for th in threads:
        th.join(timeout=60)
    stop.set()
    for th in readers:
        th.join(timeout=60)
    assert not errors, errors
    for e in range(E):
        for v in values[e]:
            ref.add(e, v)
    assert sorted(buf.sampleable_ids().tolist()) == ref.sampleable_ids()
    assert_batch_matches(buf.get_transitions(buf.sampleable_ids()), ref)
