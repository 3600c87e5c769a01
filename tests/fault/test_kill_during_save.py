"""A save killed by SIGKILL at a random instant never costs the previous checkpoint.

A seeded driver picks the instants: a byte offset into the new file (the writer is killed once
that many bytes reached the disk), a phase (at the fsync, right after the rename, at the
directory's fsync), or a delay after the save started. Each instant runs in a forked child that
holds the new buffer and is killed there. Afterwards the target is byte for byte either the
previous checkpoint or the complete new one, and it loads; the next save removes the dead
writer's temporary file. The same holds for a memmap buffer: its working directory is free
again after the kill (a new buffer can take it, and loading a checkpoint into it works), and
the checkpoint it was saving is the previous or the new one.

The default run takes a handful of instants; ``-m slow`` takes 100 per scenario.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.checkpoint import file as ck

FIELDS = {"obs": rr.Field((16,), np.float32), "action": rr.Field((), np.int64)}
CAPACITY = 3000  # about 250 kB per checkpoint: a few 16 MiB chunks would hide the offsets
Instant = tuple[str, float]


def build(stage: int, **kw: Any) -> rr.PrioritizedReplayBuffer:
    """Stage 0 is the previous checkpoint's buffer, stage 1 the one being saved."""
    buf = rr.PrioritizedReplayBuffer(CAPACITY, FIELDS, seed=3, **kw)
    for t in range(2500 + 700 * stage):
        end = t % 97 == 96
        extra = {"next_obs": np.full(16, -t, np.float32)} if end else {}
        buf.add(obs=np.full(16, t, np.float32), action=t, reward=float(t % 7),
                terminated=end, truncated=False, **extra)  # fmt: skip
    if stage:
        batch = buf.sample(64)
        buf.update_priorities(batch.ids, np.arange(64) + 0.5)
    return buf


def instants(seed: int, count: int, size: int) -> list[Instant]:
    """``count`` kill instants: the four phases first, then offsets and delays at random."""
    rng = random.Random(seed)
    out: list[Instant] = [("fsync", 0), ("replace", 0), ("dirsync", 0), ("bytes", 0)]
    while len(out) < count:
        if rng.random() < 0.75:
            out.append(("bytes", rng.randrange(size + 1)))
        else:
            out.append(("delay", rng.uniform(0.0, 0.05)))
    return out[:count]


def _die(*_: Any, **__: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _DyingFile:
    """A file that is killed once ``limit`` bytes were written (and flushed to the kernel)."""

    def __init__(self, f: Any, limit: int) -> None:
        self._f, self._limit, self._written = f, limit, 0

    def write(self, data: Any) -> int:
        room = self._limit - self._written
        if len(data) >= room:
            self._f.write(memoryview(data)[:room])
            self._f.flush()
            _die()
        self._written += len(data)
        return int(self._f.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> _DyingFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.__exit__(*exc)


def arm(kind: str, value: float) -> None:
    """In the child: make the save die at this instant (monkeypatching; the child is gone)."""
    if kind == "bytes":
        real_open = open
        ck.open = lambda *a, **k: _DyingFile(real_open(*a, **k), int(value))  # type: ignore[attr-defined]
    elif kind == "fsync":
        ck.os.fsync = _die
    elif kind == "replace":
        real_replace = os.replace

        def replace_and_die(*a: Any) -> None:
            real_replace(*a)
            _die()

        ck.os.replace = replace_and_die
    elif kind == "dirsync":
        ck._fsync_dir = _die
    # "delay": the parent kills the child after ``value`` seconds


def run_killed(kind: str, value: float, work: Callable[[], None]) -> bool:
    """Runs ``work`` in a forked child armed to die at the instant; True if it was killed."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            arm(kind, value)
            work()
            code = 0
        finally:
            os._exit(code)
    if kind == "delay":
        time.sleep(value)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, f"the child failed before its instant ({kind}, {value})"
    return False


def same_contents(a: rr.ReplayBuffer, b: rr.ReplayBuffer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["meta"] == sb["meta"]
    for k in sa["arrays"]:
        np.testing.assert_array_equal(sa["arrays"][k], sb["arrays"][k], err_msg=k)


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("references")
    old, new = build(0), build(1)
    old.save(root / "old")
    new.save(root / "new")
    return {
        "old": (root / "old").read_bytes(),
        "new_bytes": (root / "new").read_bytes(),
        "old_buf": old,
        "new_buf": new,
    }


def check_target(target: Path, refs: dict[str, Any]) -> str:
    """The target is the old or the new checkpoint, whole, and loads to its buffer."""
    data = target.read_bytes()
    which = "old" if data == refs["old"] else "new" if data == refs["new_bytes"] else None
    assert which is not None, f"torn checkpoint: {len(data)} bytes, neither the old nor the new"
    same_contents(rr.load(target), refs[f"{which}_buf"])
    return which


def scenario_save(tmp_path: Path, refs: dict[str, Any], points: list[Instant]) -> None:
    target = tmp_path / "ckpt"
    new = refs["new_buf"]
    outcomes = []
    for kind, value in points:
        target.write_bytes(refs["old"])
        killed = run_killed(kind, value, lambda: new.save(target))
        outcomes.append(check_target(target, refs))
        assert killed or kind == "delay"
        new.save(tmp_path / "ckpt")  # the next save removes the dead writer's temporary file
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert "old" in outcomes  # the driver reached both sides of the rename
    assert "new" in outcomes


def scenario_memmap(tmp_path: Path, refs: dict[str, Any], points: list[Instant]) -> None:
    """A memmap buffer in the child: loaded from the old checkpoint, grown to the new one's
    contents, then saved over it; killed at the instant (``bytes`` counts into the save)."""
    target, store = tmp_path / "ckpt", tmp_path / "store"
    shutil.rmtree(store, ignore_errors=True)
    for kind, value in points:
        target.write_bytes(refs["old"])

        def work() -> None:
            buf = build(1, storage="memmap", path=store)
            buf.save(target)
            buf.close()

        if kind == "delay":  # spread over building the buffer too (about 0.2 s)
            value *= 8
        run_killed(kind, value, work)
        check_target(target, refs)
        # The directory is free: the dead buffer's lock went with it, its files are swept.
        again = rr.load(target, storage="memmap", path=store)
        same_contents(again, rr.load(target))
        again.close()
        assert sorted(p.name for p in store.iterdir() if not p.name.startswith("rlreplay-")) == [
            "rlreplay.lock"
        ]


SCENARIOS = {"save": scenario_save, "memmap": scenario_memmap}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_killed_save_leaves_the_old_or_the_new_checkpoint(
    name: str, tmp_path: Path, references: dict[str, Any]
) -> None:
    points = instants(seed=16, count=8, size=len(references["new_bytes"]))
    SCENARIOS[name](tmp_path, references, points)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_killed_save_leaves_the_old_or_the_new_checkpoint_100_instants(
    name: str, tmp_path: Path, references: dict[str, Any]
) -> None:
    points = instants(seed=1600, count=100, size=len(references["new_bytes"]))
    SCENARIOS[name](tmp_path, references, points)
