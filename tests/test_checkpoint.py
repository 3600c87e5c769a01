"""Checkpoints: round trips with identical sample streams, corruption, atomicity."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import rlreplay as rr


def make(**kw: object) -> rr.ReplayBuffer:
    fields = {
        "obs": rr.Field((3,), np.uint8),
        "action": rr.Field((), np.int64),
        "goal": rr.Field((2,), np.float32, observation=True),
    }
    args = {"num_envs": 2, "n_step": 3, "frame_stack": 2, "gamma": 0.9, "seed": 11, **kw}
    return rr.ReplayBuffer(40, fields, **args)  # type: ignore[arg-type]


def step(buf: rr.ReplayBuffer, t: int) -> None:
    obs = np.array([[t, t + 1, t + 2], [2 * t, 1, 0]], np.uint8) % 250
    goal = np.array([[t, -t], [t, t]], np.float32)
    buf.add(
        obs=obs,
        action=np.array([t, -t]),
        reward=np.array([t % 3, 1.0]),
        terminated=np.array([t % 7 == 6, t % 9 == 8]),
        truncated=np.array([False, t % 5 == 4]),
        next_obs=obs + 1,
        next_goal=goal * 2,
        goal=goal,
    )


def same(a: rr.Batch, b: rr.Batch) -> None:
    assert list(a) == list(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_round_trip_mid_episode_gives_the_identical_sample_stream(tmp_path: Path) -> None:
    live = make()
    for t in range(53):  # past capacity, both envs mid-episode
        step(live, t)
    live.save(tmp_path / "ckpt")
    twin = make()
    for t in range(53):
        step(twin, t)
    loaded = rr.load(tmp_path / "ckpt")
    assert loaded.sampleable_ids().tolist() == twin.sampleable_ids().tolist()
    assert len(loaded) == len(twin) and loaded.nbytes == twin.nbytes
    for t in range(53, 90):
        step(loaded, t)
        step(twin, t)
        same(loaded.sample(8), twin.sample(8))


def test_state_dict_round_trip() -> None:
    a = make()
    for t in range(30):
        step(a, t)
    b = make()
    b.load_state_dict(a.state_dict())
    same(a.sample(16), b.sample(16))
    with pytest.raises(rr.CheckpointError, match="configuration"):
        make(n_step=1).load_state_dict(a.state_dict())


def test_finals_growth_survives_a_checkpoint(tmp_path: Path) -> None:
    """Many one-step episodes make the final-observation store grow; the checkpoint keeps it."""
    buf = rr.ReplayBuffer(400, {"obs": rr.Field((), np.int64)}, seed=2)
    for t in range(300):
        buf.add(obs=t, reward=0.0, next_obs=-t, terminated=True, truncated=False)
    buf.save(tmp_path / "c")
    loaded = rr.load(tmp_path / "c")
    b = loaded.get_transitions(loaded.sampleable_ids())
    assert b.next_obs.tolist() == [-t for t in range(300)]


def saved(tmp_path: Path) -> Path:
    buf = make()
    for t in range(20):
        step(buf, t)
    path = tmp_path / "ckpt"
    buf.save(path)
    return path


@pytest.mark.parametrize(
    ("where", "message"),
    [(10, "version"), (40, "header checksum"), (-100, "data checksum"), (-5, "data checksum")],
)
def test_corrupted_checkpoint_is_rejected(tmp_path: Path, where: int, message: str) -> None:
    path = saved(tmp_path)
    data = bytearray(path.read_bytes())
    data[where] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(rr.CheckpointError, match=message):
        rr.load(path)


@pytest.mark.parametrize("keep", [0, 7, 30, 2000, -1])
def test_truncated_checkpoint_is_rejected(tmp_path: Path, keep: int) -> None:
    path = saved(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    with pytest.raises(rr.CheckpointError, match=r"truncated|expected"):
        rr.load(path)


def test_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"hello world, this is not a checkpoint at all")
    with pytest.raises(rr.CheckpointError, match="magic"):
        rr.load(tmp_path / "x")
    with pytest.raises(rr.CheckpointError, match="no such file"):
        rr.load(tmp_path / "missing")
    with pytest.raises(rr.CheckpointError, match="directory"):
        make().save(tmp_path)
    assert isinstance(rr.CheckpointError("x"), ValueError)


KILL_MID_SAVE = """
import os, signal, sys
import numpy as np
import rlreplay as rr
import rlreplay.checkpoint.file as ck

buf = rr.ReplayBuffer(1000, {"obs": rr.Field((64,), np.float32)}, seed=0)
for t in range(500):
    buf.add(obs=np.full(64, t, np.float32), reward=1.0, terminated=False, truncated=False)
buf.add(obs=np.zeros(64, np.float32), reward=0.0, terminated=True, truncated=False,
        next_obs=np.zeros(64, np.float32))
path = sys.argv[1]
if sys.argv[2] == "first":
    buf.save(path)
    sys.exit(0)
for t in range(100):  # different contents for the second save
    buf.add(obs=np.full(64, -t, np.float32), reward=2.0, terminated=False, truncated=False)
die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[2] == "in-data":
    ck._byte_view = die        # dies when the first array is written
else:
    ck.os.fsync = die          # dies after everything is written, before the rename
buf.save(path)
"""


@pytest.mark.parametrize("when", ["in-data", "before-rename"])
def test_kill_mid_save_leaves_the_previous_checkpoint(tmp_path: Path, when: str) -> None:
    script = tmp_path / "kill.py"
    script.write_text(textwrap.dedent(KILL_MID_SAVE))
    path = tmp_path / "ckpt"
    subprocess.run([sys.executable, str(script), str(path), "first"], check=True, timeout=120)
    before = path.read_bytes()
    proc = subprocess.run([sys.executable, str(script), str(path), when], timeout=120)
    assert proc.returncode == -9  # killed mid-save
    assert path.read_bytes() == before
    loaded = rr.load(path)
    assert len(loaded) == 501
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ckpt")) == ["ckpt"]
