"""storage="shared": writer processes over shared memory (real processes, spawn context)."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.storage.shared import PREFIX
from tests.shared._workers import EPISODE, hold, step_values, write_forever, write_steps

CTX = mp.get_context("spawn")
FIELDS = {"obs": rr.Field((2,), np.float64), "action": rr.Field((), np.int64)}


def segments(buf: rr.ReplayBuffer) -> list[str]:
    """This buffer's segments in /dev/shm."""
    token = buf._backend.token  # type: ignore[attr-defined]
    return [f for f in os.listdir("/dev/shm") if f.startswith(f"{PREFIX}{token}_")]


def scheduled_end(t: np.ndarray) -> np.ndarray:
    return (t % EPISODE == EPISODE - 1) | (t % 53 == 52)


def check_batch(b: rr.Batch, num_envs: int) -> None:
    """Every transition (n_step=1) is exactly what its writer stored (tests/shared/_workers)."""
    e, t = b.env_ids, b.ids // num_envs
    assert np.array_equal(b.ids % num_envs, e)
    np.testing.assert_array_equal(b.obs, np.stack([e, t], 1).astype(np.float64))
    np.testing.assert_array_equal(b.action, t % 5)
    np.testing.assert_array_equal(b.reward, t.astype(np.float32))
    ends = scheduled_end(t)
    # A step cut because its writer died ends truncated with its own observation as final.
    cut = b.truncated & ~ends
    want = np.where(
        ends[:, None], np.stack([-e, -t], 1), np.where(cut[:, None], np.stack([e, t], 1),
                                                       np.stack([e, t + 1], 1))
    )  # fmt: skip
    np.testing.assert_array_equal(b.next_obs, want.astype(np.float64))
    np.testing.assert_array_equal(b.terminated, t % EPISODE == EPISODE - 1)


def reference(num_envs: int, capacity: int, steps: dict[int, int], cls: Any = rr.ReplayBuffer):
    """A one-process buffer given the same steps (env by env)."""
    ref = cls(capacity, FIELDS, num_envs=num_envs, seed=0)
    for e, n in steps.items():
        vals = [step_values(e, t) for t in range(n)]
        ref.extend(env_id=e, **{k: np.stack([np.asarray(v[k]) for v in vals]) for k in vals[0]})
    return ref


@pytest.mark.parametrize(
    ("cls", "N"),
    [
        (rr.ReplayBuffer, 1500),
        pytest.param(rr.PrioritizedReplayBuffer, 1500, marks=pytest.mark.slow),
        pytest.param(rr.ReplayBuffer, 50_000, marks=pytest.mark.slow),
    ],
)
def test_four_writer_processes_feed_one_buffer(cls: Any, N: int) -> None:
    E, C = 4, 256
    buf = cls(E * C, FIELDS, num_envs=E, seed=0, storage="shared")
    procs = [CTX.Process(target=write_steps, args=(buf.share([e]), e, 0, N)) for e in range(E)]
    for p in procs:
        p.start()
    samples = 0
    deadline = time.monotonic() + 60
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        if buf.num_sampleable:
            try:
                b = buf.sample(64)
            except rr.EmptyBufferError:
                # Writers that lap their rings between the count and the draw leave nothing
                # to draw (the steps they overwrite are dropped when folded).
                continue
            check_batch(b, E)
            if cls is rr.PrioritizedReplayBuffer:
                buf.update_priorities(b.ids, np.abs(np.sin(b.ids)) + 0.1)
            samples += 1
        else:
            time.sleep(0.001)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    check_batch(buf.sample(512), E)
    # Nothing lost or duplicated: the buffer now stores exactly what a one-process buffer
    # given the same steps stores (less the guard band folded away ahead of the writers).
    ref = reference(E, E * C, dict.fromkeys(range(E), N))
    if cls is rr.PrioritizedReplayBuffer:  # every sampleable transition has a priority > 0
        assert buf._prios.drawable and (buf.get_priorities(ids_of(buf)) > 0).all()
    env = buf._index.env
    ids = np.concatenate([np.arange(env[e, 3], env[e, 4]) * E + e for e in range(E)])
    assert ids.size > E * (C - buf._sync.shared.guard - 2)
    got, want = buf.get_transitions(ids), ref.get_transitions(ids)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert segments(buf)
    buf.close()
    assert not segments(buf)


def test_attach_in_process_add_extend_end_episode_and_errors() -> None:
    E = 2
    buf = rr.ReplayBuffer(64, FIELDS, num_envs=E, seed=0, storage="shared")
    with pytest.raises(rr.ConfigError):
        rr.ReplayBuffer(64, FIELDS, storage="memory").share()
    h = buf.share([1])
    w = rr.attach(h)
    with pytest.raises(rr.ConfigError, match="attached"):
        rr.attach(h)  # one writer per env at a time
    with pytest.raises(rr.ConfigError, match="writer processes"):
        buf.add(**{k: np.stack([v, v]) for k, v in step_values(0, 0).items()})
    buf.add(env_ids=[0], **{k: np.asarray(v)[None] for k, v in step_values(0, 0).items()})
    vals = [step_values(1, t) for t in range(10)]
    w.extend(env_id=1, **{k: np.stack([np.asarray(v[k]) for v in vals]) for k in vals[0]})
    w.add(**step_values(1, 10))
    w.add(**step_values(1, 11))
    with pytest.raises(rr.FieldError):
        w.add(obs=np.zeros(2))
    with pytest.raises(rr.ShapeError):
        w.add(**{**step_values(1, 12), "obs": np.zeros(3)})
    assert w.next_step(1) == 12
    assert len(buf) == 1 + 12
    w.end_episode(1, next_obs=np.array([-1.0, -11.0]))
    with pytest.raises(rr.InvalidIdError):
        w.end_episode(1, next_obs=np.zeros(2))
    b = buf.get_transitions(np.array([11 * E + 1, 10 * E + 1]))
    assert b.truncated.tolist() == [True, False]
    np.testing.assert_array_equal(b.next_obs, [[-1.0, -11.0], [1.0, 11.0]])
    w.close()
    w2 = rr.attach(h)  # closed cleanly: the episode stays as it was, the writer goes on
    assert w2.next_step(1) == 12
    w2.close()
    buf.close()
    with pytest.raises(rr.ReplayClosed):
        rr.attach(h)


def test_prioritized_folds_new_steps_with_max_priority() -> None:
    buf = rr.PrioritizedReplayBuffer(64, FIELDS, num_envs=2, seed=0, storage="shared")
    w = rr.attach(buf.share([1]))
    for t in range(5):
        w.add(**step_values(1, t))
    ids = np.arange(4) * 2 + 1
    buf.update_priorities(ids, [1.0, 5.0, 2.0, 3.0])
    for t in range(5, 8):
        w.add(**step_values(1, t))
    np.testing.assert_allclose(buf.get_priorities(np.arange(5, 8) * 2 + 1), 5.0 + buf.eps)
    assert buf.get_priorities(np.array([9]))[0] == 1.0  # folded before the update: initial
    check_batch(buf.sample(32), 2)
    w.close()
    buf.close()


def ids_of(buf: rr.ReplayBuffer) -> np.ndarray:
    """Ids of every sampleable transition."""
    E, env = buf.num_envs, buf._index.env
    return np.concatenate([np.arange(env[e, 3], env[e, 4]) * E + e for e in range(E)])


@pytest.mark.parametrize("rounds", [4, pytest.param(15, marks=pytest.mark.slow)])
def test_sigkill_of_writers_never_shows_a_torn_step_and_envs_reattach(rounds: int) -> None:
    """Writers killed at random instants, one calling ``add`` and one ``extend`` (they swap
    every round, so each env's writer dies in both kinds of call)."""
    rng = np.random.default_rng(14)
    E, C = 2, 64
    buf = rr.ReplayBuffer(E * C, FIELDS, num_envs=E, seed=0, storage="shared")
    handles = [buf.share([e]) for e in range(E)]
    counters = [CTX.Value("q", 0, lock=False) for _ in range(E)]  # SIGKILL: no lock
    for _round in range(rounds):
        procs = [
            CTX.Process(
                target=write_forever, args=(handles[e], e, counters[e], (e + _round) % 2 == 1)
            )
            for e in range(E)
        ]
        before = [c.value for c in counters]
        for p in procs:
            p.start()
        deadline = time.monotonic() + 60
        while any(c.value <= v for c, v in zip(counters, before, strict=True)):
            assert time.monotonic() < deadline, "writers did not start"
            time.sleep(0.01)
        # Kill each writer at a random instant (seeded) while it writes and the owner samples.
        kill_at = [time.monotonic() + x for x in rng.uniform(0, 0.3, E)]
        while any(p.is_alive() for p in procs):
            for p, at in zip(procs, kill_at, strict=True):
                if p.is_alive() and time.monotonic() >= at and p.pid is not None:
                    os.kill(p.pid, signal.SIGKILL)
                    p.join(10)
            if buf.num_sampleable:
                check_batch(buf.sample(32), E)
        assert [p.exitcode for p in procs] == [-signal.SIGKILL] * E
    check_batch(buf.sample(256), E)
    buf.close()
    assert not segments(buf)


def test_a_live_writer_holds_its_env_and_a_dead_one_frees_it() -> None:
    buf = rr.ReplayBuffer(64, FIELDS, seed=0, storage="shared")
    h = buf.share()
    ready = CTX.Event()
    p = CTX.Process(target=hold, args=(h, ready))
    p.start()
    assert ready.wait(30)
    with pytest.raises(rr.ConfigError, match=f"process {p.pid}"):
        rr.attach(h, timeout=0.1)
    assert p.pid is not None
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    w = rr.attach(h, timeout=5.0)
    w.add(**step_values(0, 0))
    w.close()
    buf.close()
    assert not segments(buf)


def test_segments_are_unlinked_when_the_owner_is_collected() -> None:
    buf = rr.ReplayBuffer(64, FIELDS, seed=0, storage="shared")
    buf.share()
    names = segments(buf)
    assert names
    del buf
    gc.collect()
    assert not set(names) & set(os.listdir("/dev/shm"))


def stacked(e: int, ts: range) -> dict[str, np.ndarray]:
    vals = [step_values(e, t) for t in ts]
    return {k: np.stack([np.asarray(v[k]) for v in vals]) for k in vals[0]}


def assert_same_sampleable(buf: rr.ReplayBuffer, ref: rr.ReplayBuffer) -> None:
    """``buf`` samples from exactly ``ref``'s transitions (less steps dropped ahead of the
    writers), each equal to ``ref``'s."""
    E = buf.num_envs
    assert buf.num_sampleable <= ref.num_sampleable  # folds what the writers published
    env, renv = buf._index.env, ref._index.env
    for e in range(E):
        assert env[e, 4] == renv[e, 4]  # the same newest sampleable step
        assert renv[e, 3] <= env[e, 3] <= renv[e, 3] + buf._sync.shared.guard + ref.frame_stack
    ids = np.concatenate([np.arange(env[e, 3], env[e, 4]) * E + e for e in range(E)])
    got, want = buf.get_transitions(ids), ref.get_transitions(ids)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("frame_stack", [1, 3])
def test_a_writer_that_laps_the_ring_between_folds(frame_stack: int) -> None:
    E, C = 3, 40
    kw = {"num_envs": E, "n_step": 3, "frame_stack": frame_stack, "seed": 0}
    buf = rr.ReplayBuffer(E * C, FIELDS, storage="shared", **kw)  # type: ignore[arg-type]
    ref = rr.ReplayBuffer(E * C, FIELDS, **kw)  # type: ignore[arg-type]
    w = rr.attach(buf.share([1, 2]))
    rng = np.random.default_rng(3)
    t = 0
    for chunk in rng.integers(1, 3 * C, 12):
        for e in (1, 2):  # extend (longer than the ring at times) and vector adds
            w.extend(env_id=e, **stacked(e, range(t, t + int(chunk))))
            ref.extend(env_id=e, **stacked(e, range(t, t + int(chunk))))
        t += int(chunk)
        if chunk % 2:
            both = {k: np.stack([stacked(1, range(t, t + 1))[k][0],
                                 stacked(2, range(t, t + 1))[k][0]]) for k in FIELDS | {
                "reward": 0, "terminated": 0, "truncated": 0, "next_obs": 0}}  # fmt: skip
            w.add(env_ids=[1, 2], **both)
            ref.add(env_ids=[1, 2], **both)
            t += 1
        assert_same_sampleable(buf, ref)
    w.close()
    buf.close()


def test_a_checkpoint_loaded_into_shared_memory_can_be_shared(tmp_path: Any) -> None:
    mem = rr.ReplayBuffer(64, FIELDS, num_envs=2, seed=0)
    ref = rr.ReplayBuffer(64, FIELDS, num_envs=2, seed=0)
    for e in range(2):
        mem.extend(env_id=e, **stacked(e, range(20)))
        ref.extend(env_id=e, **stacked(e, range(20)))
    mem.save(tmp_path / "c.ckpt")
    buf = rr.load(tmp_path / "c.ckpt", storage="shared")
    w = rr.attach(buf.share([0]))
    for t in range(20, 90):
        w.add(**step_values(0, t))
        ref.add(env_ids=[0], **{k: np.asarray(v)[None] for k, v in step_values(0, t).items()})
    assert_same_sampleable(buf, ref)
    w.close()
    buf.close()
    assert not segments(buf)


def test_a_killed_owner_leaves_no_segment_behind() -> None:
    """The owner (a fresh interpreter) and its writer children: SIGKILL the owner; the writers
    notice within a second and stop, and the resource tracker unlinks every segment."""
    import subprocess
    import sys

    from tests.shared._workers import OWNER_SCRIPT

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the writers' ReplayClosed tracebacks, the tracker's note
        text=True,
        cwd=root,
    )
    try:
        assert owner.stdout is not None
        token, *pids = owner.stdout.readline().split()
        assert [f for f in os.listdir("/dev/shm") if f.startswith(f"{PREFIX}{token}_")]
        owner.kill()
        owner.wait(10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = [f for f in os.listdir("/dev/shm") if f.startswith(f"{PREFIX}{token}_")]
            alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
            if not left and not alive:
                break
            time.sleep(0.1)
        assert not left, left
        assert not alive, "writers did not stop after their owner died"
    finally:
        owner.kill()
        owner.wait(10)
        if owner.stdout is not None:
            owner.stdout.close()


@settings(max_examples=40, deadline=None)
@given(
    n_step=st.integers(1, 3),
    frame_stack=st.integers(1, 3),
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "extend", "end", "fold"]), st.integers(1, 30)),
        max_size=40,
    ),
)
def test_random_writer_operations_fold_like_one_buffer(
    n_step: int, frame_stack: int, ops: list[tuple[str, int]]
) -> None:
    """Random add/extend/end_episode sequences of a writer, folded at random points, leave the
    owner sampling exactly what a one-process buffer given the same calls samples."""
    E, C = 2, 24
    kw: dict[str, Any] = {"num_envs": E, "n_step": n_step, "frame_stack": frame_stack}
    buf = rr.ReplayBuffer(E * C, FIELDS, storage="shared", **kw)
    ref = rr.ReplayBuffer(E * C, FIELDS, **kw)
    w = rr.attach(buf.share([1]))
    t = 0
    for op, n in ops:
        if op == "add":
            w.add(**step_values(1, t))
            ref.add(env_ids=[1], **{k: np.asarray(v)[None] for k, v in step_values(1, t).items()})
            t += 1
        elif op == "extend":
            w.extend(env_id=1, **stacked(1, range(t, t + n)))
            ref.extend(env_id=1, **stacked(1, range(t, t + n)))
            t += n
        elif op == "end":
            final = np.array([-1.0, -(t - 1)])
            try:
                ref.end_episode(1, next_obs=final)
            except rr.InvalidIdError:
                with pytest.raises(rr.InvalidIdError):
                    w.end_episode(1, next_obs=final)
            else:
                w.end_episode(1, next_obs=final)
        else:
            assert_same_sampleable(buf, ref)
    assert_same_sampleable(buf, ref)
    w.close()
    buf.close()


def test_growing_final_records_keeps_the_arrays_in_use_mapped() -> None:
    """A shared buffer whose final-observation records grow (every step ends an episode)
    replaces those arrays while the index and columns still read the old ones: the old
    mappings must stay alive until then (they used to be unmapped at once, a segfault)."""
    code = """
import gc, numpy as np, rlreplay as rr
buf = rr.ReplayBuffer(8, {"obs": rr.Field((2,), np.float32)}, storage="shared", seed=0)
for t in range(40):
    buf.add(obs=np.full(2, t, np.float32), reward=1.0, terminated=True, truncated=False,
            next_obs=np.full(2, -t, np.float32))
b = buf.sample(16)
assert (b.next_obs[:, 0] == -b.obs[:, 0]).all() and (b.obs[:, 0] >= 32).all()
buf.close()
del buf, b
gc.collect()
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
