"""The first samples of a buffer whose one-call kernel is not compiled yet (a cold Numba cache)
take the general path while a background thread compiles the kernel, with the same batches;
the buffer switches to the kernel when it is ready, and says once that it compiles."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.sampling import onecall

# Layouts no other test samples (odd dtypes and shapes), one per test, so their kernels are
# not compiled in this process when a test starts; the disk cache is bypassed below.
LAYOUTS = {
    "uniform": rr.Field((2, 3), np.complex64),
    "prioritized": rr.Field((3, 2), np.complex64),
}


def make(kind: str, seed: int = 4) -> rr.ReplayBuffer:
    cls = rr.PrioritizedReplayBuffer if kind == "prioritized" else rr.ReplayBuffer
    fields = {"obs": rr.Field((3,), np.float32), "odd_cold_start": LAYOUTS[kind]}
    buf = cls(64, fields, n_step=2, seed=seed)
    rng = np.random.default_rng(1)
    shape = LAYOUTS[kind].shape
    for t in range(50):
        buf.add(
            obs=rng.standard_normal(3).astype(np.float32),
            odd_cold_start=np.full(shape, t, np.complex64),
            reward=float(t),
            terminated=t % 9 == 8,
            truncated=False,
            next_obs=np.full(3, -t, np.float32),
        )
    return buf


@pytest.mark.parametrize("kind", list(LAYOUTS))
def test_general_path_while_compiling_then_the_kernel_same_batches(
    kind: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No compiled kernel anywhere: the first samples take the general path, then a thread
    compiles the kernel while sampling goes on, and the buffer switches to it; every batch
    equals the one a buffer that compiled the kernel at its first sample draws."""
    monkeypatch.setenv("RLREPLAY_BACKGROUND_COMPILE", "1")
    monkeypatch.setattr(onecall, "_in_disk_cache", lambda *a: False)
    monkeypatch.setattr(onecall, "_announced", False)
    calls: list[Any] = []
    real = onecall._compile
    monkeypatch.setattr(onecall, "_compile", lambda *a: (calls.append(a), real(*a)))
    buf = make(kind)
    got = []
    with caplog.at_level(logging.INFO, logger="rlreplay"):
        for _ in range(onecall._GENERAL_FIRST - 1):
            got.append(buf.sample(8))
        fast = buf._draws.fast_uniform or buf._draws.fast_prio
        assert not fast.ready and fast._warming is None and not calls  # general path so far
        got.append(buf.sample(8))
        assert fast._warming is not None and len(calls) == 1
        assert sum("compiling" in r.getMessage() for r in caplog.records) == 1
    deadline = time.monotonic() + 120
    while not fast.ready and time.monotonic() < deadline:
        got.append(buf.sample(8))  # sampling goes on meanwhile
    assert fast.ready
    got += [buf.sample(8) for _ in range(4)]

    monkeypatch.setenv("RLREPLAY_BACKGROUND_COMPILE", "0")
    sync = make(kind)
    for i, batch in enumerate(got):
        want = sync.sample(8)
        assert set(batch) == set(want)
        for key in batch:
            np.testing.assert_array_equal(batch[key], want[key], err_msg=f"sample {i}: {key}")


def test_a_kernel_compiled_in_this_process_is_used_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLREPLAY_BACKGROUND_COMPILE", "1")
    a = rr.ReplayBuffer(32, {"obs": rr.Field((2,), np.float32)}, seed=0)
    for t in range(20):
        a.add(obs=np.full(2, t, np.float32), reward=1.0, terminated=False, truncated=False)
    a.sample(4)
    a._draws.fast_uniform.ready = False  # as a new plan of the same layout would be
    a._draws.fast_uniform._sig = None
    a.sample(4)
    assert a._draws.fast_uniform.ready


def test_the_quick_start_does_not_wait_for_the_kernel(tmp_path: Any) -> None:
    """A script that samples once never waits for the one-call kernel: with an empty Numba
    cache it finishes without compiling it (seen as: the kernel is absent from the cache)."""
    code = """
import numpy as np, rlreplay as rr
from rlreplay.sampling import onecall
buf = rr.ReplayBuffer(1000, {"obs": rr.Field((4,), np.float32)}, n_step=3, seed=0)
for t in range(300):
    buf.add(obs=np.zeros(4, np.float32), reward=1.0, terminated=t % 50 == 49, truncated=False,
            next_obs=np.ones(4, np.float32))
b = buf.sample(256)
assert b.obs.shape == (256, 4)
fast = buf._draws.fast_uniform
print(fast.ready, fast._warming is None, len(onecall._sample_kernel.overloads))
"""
    env = {**__import__("os").environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "RLREPLAY_BACKGROUND_COMPILE": "1"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "True", "0"]


def test_a_fork_waits_for_background_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork while a kernel compiles in the background waits for it: the child inherits no
    compiler lock held by a thread it does not have."""
    import os
    import threading

    started, release = threading.Event(), threading.Event()

    def slow(*args: Any) -> None:
        started.set()
        release.wait(10)
        onecall._compiling.discard(threading.current_thread())

    thread = threading.Thread(target=slow, daemon=True)
    onecall._compiling.add(thread)
    thread.start()
    started.wait(10)
    threading.Timer(0.3, release.set).start()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: nothing to do
        os._exit(0)
    waited = time.monotonic() - t0
    os.waitpid(pid, 0)
    assert waited >= 0.25 and not thread.is_alive() and thread not in onecall._compiling
