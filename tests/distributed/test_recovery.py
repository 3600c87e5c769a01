"""ReplayService checkpoints, shard restarts and writer processes on a local Ray."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.distributed import ReplayService
from rlreplay.distributed.manifest import MANIFEST

FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}
WAIT = 120.0  # seconds: a restart imports rlreplay in a new worker on a busy 2-core machine


def write_steps(w: Any, t0: int, steps: int, *, end: bool = False) -> None:
    """Steps ``t0 .. t0 + steps - 1`` of each of ``w``'s envs, obs ``(env, t)``."""
    envs = np.asarray(w.env_ids)
    n = envs.shape[0]
    for t in range(t0, t0 + steps):
        last = end and t == t0 + steps - 1
        w.add(
            obs=np.stack([envs, np.full(n, t)], axis=1).astype(np.float32),
            action=(envs + t) % 4, reward=np.full(n, 0.5), terminated=np.full(n, last),
            truncated=np.zeros(n, bool), next_obs=np.zeros((n, 2), np.float32),
        )  # fmt: skip


def service_ids(env: int, steps: range, num_shards: int, num_envs: int) -> np.ndarray:
    """Service ids of env ``env``'s steps (no ring wrapped): a shard's local id is
    ``t * local_envs + local_env``, the service's ``local * num_shards + shard``."""
    k, local_env = env % num_shards, env // num_shards
    n_local = len(range(k, num_envs, num_shards))
    return (np.asarray(steps) * n_local + local_env) * num_shards + k


def assert_same_batches(a: rr.Batch, b: rr.Batch) -> None:
    assert sorted(a.keys()) == sorted(b.keys())
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


# ---------------------------------------------------------------------- save / restore
@pytest.fixture(scope="module")
def saved(ray_local: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A prioritized 2-shard service with a rate limiter, filled, reprioritized and saved."""
    lim = rr.SampleToInsertRatio(samples_per_insert=4.0, min_size_to_sample=10, error_buffer=1e6)
    svc = ReplayService(
        2, 400, FIELDS, prioritized=True, alpha=0.7, beta=0.5, beta_final=1.0, beta_steps=50,
        n_step=2, gamma=0.9, seed=11, num_envs=4, rate_limiter=lim,
    )  # fmt: skip
    w = svc.writer([0, 1, 2, 3], flush_every=12)
    write_steps(w, 0, 40)
    w.flush()
    batch = svc.sample(64)
    p = np.random.default_rng(1).gamma(0.5, 1.0, batch.ids.shape[0]) + 0.05
    svc.update_priorities(batch.ids, p)
    directory = tmp_path_factory.mktemp("svc")
    svc.save(directory / "ckpt", timeout=WAIT)
    write_steps(w, 40, 5)  # after the save: not in the checkpoint
    w.flush()
    svc.save(directory / "ckpt", timeout=WAIT)  # a second generation replaces the first
    yield svc, w, directory / "ckpt"
    svc.close()


def test_save_restore_round_trip(saved: Any) -> None:
    svc, _, directory = saved
    files = sorted(p.name for p in directory.iterdir())
    assert files == [MANIFEST, "shard-0-000002.rlr", "shard-1-000002.rlr"]
    manifest = json.loads((directory / MANIFEST).read_text())
    assert manifest["num_shards"] == 2 and manifest["capacity"] == 400
    assert [s["added"] for s in manifest["shards"]] == [90, 90]
    back = ReplayService.restore(directory, timeout=WAIT)
    try:
        st, st2 = svc.stats(), back.stats()
        assert [s["stored"] for s in st2["shards"]] == [s["stored"] for s in st["shards"]]
        assert st2["rate_limiter"]["inserts"] == st["rate_limiter"]["inserts"] == 180
        assert st2["rate_limiter"]["samples"] == st["rate_limiter"]["samples"] == 64
        assert back.beta == svc.beta and back.alpha == 0.7 and back.prioritized
        # Contents: every transition of every env, windows and discounts included.
        ids = np.concatenate([service_ids(e, range(42), 2, 4) for e in range(4)])
        assert_same_batches(svc.get_transitions(ids), back.get_transitions(ids))
        # Priorities and generators: the next draws are the same, probabilities and weights
        # included, so the sampling law is unchanged.
        for _ in range(3):
            assert_same_batches(svc.sample(256), back.sample(256))
        a = svc.sample(32)
        assert_same_batches(a, back.sample(32))
        svc.update_priorities(a.ids, np.full(32, 2.0))
        back.update_priorities(a.ids, np.full(32, 2.0))
        assert_same_batches(svc.sample(256), back.sample(256))
    finally:
        back.close()


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / MANIFEST).unlink(), "cannot read"),
        (lambda d: (d / MANIFEST).write_text('{"format": "rlreplay.Repl'), "not valid JSON"),
        (lambda d: (d / MANIFEST).write_text("[1, 2]"), "expected a JSON object"),
        (lambda d: _edit(d, version=99), "version: expected 1"),
        (lambda d: _edit(d, num_shards=3), "shards: expected 3 entries"),
        (lambda d: _edit(d, shards=None), "shards: expected 2 entries"),
        (lambda d: (d / "shard-1-000002.rlr").unlink(), "is missing"),
        (lambda d: _truncate(d / "shard-0-000002.rlr"), "expected"),
        (lambda d: _edit(d, format="other"), "format: expected"),
    ],
)
def test_a_damaged_checkpoint_is_refused(
    saved: Any, tmp_path: Path, damage: Any, message: str
) -> None:
    copy = _copy(saved[2], tmp_path)
    damage(copy)
    with pytest.raises(rr.CheckpointError, match=message):
        ReplayService.restore(copy, timeout=WAIT)


def test_a_corrupt_shard_file_is_refused(saved: Any, tmp_path: Path) -> None:
    copy = _copy(saved[2], tmp_path)
    path = copy / "shard-1-000002.rlr"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # same size: only the core checkpoint's checksum notices
    path.write_bytes(bytes(data))
    with pytest.raises(rr.CheckpointError, match="checksum"):
        ReplayService.restore(copy, timeout=WAIT)


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def _edit(d: Path, **changes: Any) -> None:
    m = json.loads((d / MANIFEST).read_text())
    (d / MANIFEST).write_text(json.dumps({**m, **changes}))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-10])


# ---------------------------------------------------------------------- shard death
def kill_and_wait(ray: Any, svc: ReplayService, k: int, restarts: int) -> dict[str, Any]:
    """SIGKILL shard ``k`` (Ray restarts it), then the stats once its restart shows."""
    ray.kill(svc._shards[k], no_restart=False)
    for _ in range(3000):  # ray.kill is asynchronous: poll (bounded) until the restart shows
        st: dict[str, Any] = svc.stats(timeout=WAIT)
        if st["shards"][k]["restarts"] == restarts:
            return st
        time.sleep(0.02)
    raise AssertionError(f"shard {k} was not restarted")


def test_killed_shard_restarts_and_reloads_its_checkpoint(ray_local: Any, tmp_path: Path) -> None:
    ray = ray_local
    svc = ReplayService(2, 200, FIELDS, seed=0, num_envs=2, rate_limiter=rr.MinSize(1))
    try:
        w = svc.writer([0, 1], flush_every=2)
        write_steps(w, 0, 10)
        # No checkpoint yet: shard 1 restarts empty and has lost its 10 steps.
        st = kill_and_wait(ray, svc, 1, 1)
        assert st["shards"][1]["restarts"] == 1 and st["shards"][1]["lost"] == 10
        assert st["shards"][1]["stored"] == 0 and st["shards"][0]["stored"] == 10
        assert st["shards"][1]["checkpoint"] is None
        for _ in range(500):  # the restarted shard tells the limiter its size (bounded poll)
            if svc.stats(timeout=WAIT)["rate_limiter"]["size"] == 9:
                break
            time.sleep(0.02)
        assert svc.stats(timeout=WAIT)["rate_limiter"]["size"] == 9  # shard 0's 9 only
        write_steps(w, 10, 10)  # env 1 starts again in its empty shard
        svc.save(tmp_path, timeout=WAIT)
        before = svc.get_transitions(service_ids(0, range(19), 2, 2))
        write_steps(w, 20, 7)
        st = svc.stats(timeout=WAIT)
        assert [s["since_checkpoint"] for s in st["shards"]] == [7, 7]
        st = kill_and_wait(ray, svc, 0, 1)
        assert st["shards"][0] == {
            "stored": 20, "sampleable": 19, "restarts": 1, "lost": 7, "abandoned": 1,
            "since_checkpoint": 0, "checkpoint": str(tmp_path / "shard-0-000001.rlr"),
        }  # fmt: skip
        assert st["shards"][1]["abandoned"] == 0  # it restarted empty: nothing ran
        assert st["shards"][1]["stored"] == 17
        assert (st["restarts"], st["lost"], st["abandoned"]) == (2, 17, 1)  # summed
        assert_same_batches(svc.get_transitions(service_ids(0, range(19), 2, 2)), before)
        # Writers go on: a flush to the restarted shard succeeds.
        write_steps(w, 27, 2)
        w.flush(timeout=WAIT)
        st = svc.stats(timeout=WAIT)
        assert [s["stored"] for s in st["shards"]] == [22, 19]
        # The reload cut env 0's episode at step 19: no window spans the lost steps 20..26.
        with pytest.raises(rr.InvalidIdError, match="not sampleable"):
            svc.get_transitions(service_ids(0, range(19, 20), 2, 2), timeout=WAIT)
        b = svc.sample(256, timeout=WAIT)
        assert (b.next_obs[:, 1] - b.obs[:, 1] == 1).all()  # every window inside its episode
        first = svc.get_transitions(service_ids(0, range(20, 21), 2, 2), timeout=WAIT)
        assert (first.obs[0, 1], first.next_obs[0, 1]) == (27, 28)  # a new episode
        # A shard dead for good: an error, no hang; the live shard's steps are sent, the dead
        # one's stay buffered (a retry would not store the live shard's twice).
        ray.kill(svc._shards[1], no_restart=True)
        with pytest.raises(ray.exceptions.RayActorError):
            for _ in range(500):  # ray.kill is asynchronous: until the actor is gone (bounded)
                ray.get(svc._shards[1].sizes.remote(), timeout=WAIT)
                time.sleep(0.02)
        with pytest.raises(rr.ReplayClosed):
            write_steps(w, 29, 1)  # one step of each env: flush_every=2 sends them at once
        assert w.pending == 1
        with pytest.raises(rr.ReplayClosed):
            w.flush(timeout=WAIT)
        assert ray.get(svc._shards[0].sizes.remote(), timeout=WAIT)[0] == 23
        with pytest.raises(rr.ReplayClosed):
            svc.stats(timeout=WAIT)
    finally:
        svc.close()


# ---------------------------------------------------------------------- writer processes
def test_four_writer_processes_and_a_killed_one(ray_local: Any) -> None:
    """Writers pickled into Ray tasks (4 at once, plus one killed mid-run)."""
    ray = ray_local
    S, E, T, FOREVER = 2, 10, 60, 20_000
    svc = ReplayService(S, S * 5 * (FOREVER + 8), FIELDS, seed=2, num_envs=E)

    @ray.remote(num_cpus=0, max_retries=0)
    def collect(w: Any, steps: int) -> int:
        write_steps(w, 0, steps, end=True)
        w.close()
        return int(w.sent)

    @ray.remote(num_cpus=0, max_retries=0)
    def trickle(w: Any) -> None:  # the victim: writes until killed, leaving the CPU to others
        for t in range(FOREVER):
            write_steps(w, t, 1)
            time.sleep(0.002)

    try:
        writers = [svc.writer([2 * i, 2 * i + 1], flush_every=8 + 6 * i) for i in range(4)]
        victim = trickle.remote(svc.writer([8, 9], flush_every=8))
        sent = ray.get([collect.remote(w, T) for w in writers], timeout=WAIT)
        assert sent == [2 * T] * 4
        for _ in range(2000):  # until the victim has written something (bounded)
            stored = [s["stored"] for s in svc.stats(timeout=WAIT)["shards"]]
            if min(stored) > 4 * T + 16:
                break
            time.sleep(0.01)
        ray.cancel(victim, force=True)  # SIGKILL of its worker process, mid-run
        with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError)):
            ray.get(victim, timeout=WAIT)
        stored = [s["stored"] for s in svc.stats(timeout=WAIT)["shards"]]
        victim_steps = [n - 4 * T for n in stored]  # env 8 in shard 0, env 9 in shard 1
        assert min(victim_steps) > 0 and max(victim_steps) < FOREVER
        # Nothing lost or duplicated: each env's steps, in order, at their ids.
        for env in range(8):
            got = svc.get_transitions(service_ids(env, range(T), S, E))
            np.testing.assert_array_equal(got.obs[:, 0], env)
            np.testing.assert_array_equal(got.obs[:, 1], np.arange(T))
        for env, m in zip((8, 9), victim_steps, strict=True):
            got = svc.get_transitions(service_ids(env, range(m - 1), S, E))
            np.testing.assert_array_equal(got.obs[:, 1], np.arange(m - 1))
        # A sample reads what the tasks wrote; their episode ends are not bootstrapped.
        batch = svc.sample(256, timeout=WAIT)
        np.testing.assert_array_equal(svc.get_transitions(batch.ids).obs, batch.obs)
        np.testing.assert_array_equal(batch.obs[:, 0], batch.env_ids)
        last = np.concatenate([service_ids(e, range(T - 1, T), S, E) for e in range(8)])
        ends = svc.get_transitions(last)
        assert ends.terminated.all() and (ends.discount == 0).all()
        # Another writer takes the dead one's envs over.
        w = svc.writer([8, 9], flush_every=4)
        write_steps(w, FOREVER, 4)
        w.close(timeout=WAIT)
        stored = [s["stored"] for s in svc.stats(timeout=WAIT)["shards"]]
        assert [n - 4 * T for n in stored] == [m + 4 for m in victim_steps]
    finally:
        svc.close()
