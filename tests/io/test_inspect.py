"""rlreplay inspect: statistics of checkpoints of every buffer kind against the loaded buffer."""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.cli import main
from rlreplay.io._steps import episode_runs, stored_steps
from rlreplay.io.inspect import inspect_checkpoint, render, write_plots

pytest.importorskip("rich")


def make(kind: str, tmp: Path) -> rr.ReplayBuffer:
    obs = {"obs": rr.Field((4,), np.float32), "action": rr.Field((), np.int64)}
    frames = {"obs": rr.Field((8, 8), np.uint8), "action": rr.Field((), np.int64)}
    if kind == "uniform":
        return rr.ReplayBuffer(100, obs, seed=0)
    if kind == "multi_env_frames":
        return rr.ReplayBuffer(150, frames, num_envs=3, n_step=3, frame_stack=4, seed=0)
    if kind == "episodic_return":
        return rr.ReplayBuffer(120, obs, num_envs=2, record_episodic_return=True, seed=0)
    if kind == "vector_reward":
        return rr.ReplayBuffer(80, {**obs, "reward": rr.Field((2,), np.float32)}, seed=0)
    if kind == "memmap":
        return rr.ReplayBuffer(90, obs, num_envs=3, storage="memmap", path=tmp / "mm", seed=0)
    if kind == "proportional":
        return rr.PrioritizedReplayBuffer(120, obs, num_envs=2, n_step=2, alpha=0.7, seed=0)
    if kind == "rank_based":
        return rr.PrioritizedReplayBuffer(100, obs, variant="rank_based", alpha=0.5, seed=0)
    if kind == "empty":
        return rr.PrioritizedReplayBuffer(50, obs, seed=0)
    raise AssertionError(kind)


KINDS = ["uniform", "multi_env_frames", "episodic_return", "vector_reward", "memmap",
         "proportional", "rank_based", "empty"]  # fmt: skip


def fill(buf: rr.ReplayBuffer, steps: int, seed: int, abandon_p: float = 0.0) -> None:
    """Random steps in every env; with ``abandon_p``, each env's running episode is abandoned
    after a step with that probability, and env 0's last episode is abandoned at the end."""
    rng = np.random.default_rng(seed)
    E = buf.num_envs
    fields = buf.schema.fields
    for _ in range(steps):
        values = {
            name: rng.integers(0, 256, (E, *f.shape)).astype(f.dtype)
            if f.dtype == np.uint8
            else rng.normal(size=(E, *f.shape)).astype(f.dtype)
            if f.dtype.kind == "f"
            else rng.integers(0, 3, (E, *f.shape)).astype(f.dtype)
            for name, f in fields.items()
            if name not in ("terminated", "truncated")
        }
        ends = rng.random(E) < 0.08
        term = ends & (rng.random(E) < 0.5)
        values.update(terminated=term, truncated=ends & ~term, next_obs=values["obs"])
        if E == 1:
            values = {k: v[0] for k, v in values.items()}
        buf.add(**values)
        if abandon_p:
            for e in np.flatnonzero(rng.random(E) < abandon_p):
                buf.abandon_episode(int(e))
    if abandon_p and steps:
        buf.abandon_episode(0)
    if isinstance(buf, rr.PrioritizedReplayBuffer) and buf.num_sampleable:
        batch = buf.sample(64)
        buf.update_priorities(batch.ids, rng.exponential(size=64))


def reference(buf: rr.ReplayBuffer) -> dict[str, Any]:
    """Statistics computed the slow, obvious way through the loaded buffer's public API."""
    with buf.atomic():
        steps = stored_steps(buf)
        runs = episode_runs(steps)
        lengths, returns = [], []
        for first, n in runs.complete:
            ep = buf.get_episode(first)
            lengths.append(n)
            returns.append(float(np.sum(ep.reward, dtype=np.float64)))
        first, end = buf.stored_range()
        ids = buf.sampleable_ids()
        fields = {}
        for name in buf.schema.names:
            v = buf.get_field(name, steps.ids).astype(np.float64) if steps.ids.size else None
            fields[name] = (math.nan,) * 3 if v is None else (v.min(), v.max(), v.mean())
        prios = None
        if isinstance(buf, rr.PrioritizedReplayBuffer):
            p = buf.get_priorities(ids) if ids.size else np.zeros(0)
            if buf.variant == "rank_based":
                rank = np.array([1 + np.sum(p > x) for x in p])
                m = rank.astype(np.float64) ** -buf.alpha
            else:
                m = p**buf.alpha
            prob = m / m.sum() if p.size else m
            entropy = -sum(q * math.log(q) for q in prob if q > 0)
            top = np.sort(prob)[::-1][: max(1, p.size // 100)].sum() if p.size else math.nan
            prios = (np.sort(p), entropy, top)
        return {
            "stored": (end - first).tolist(),
            "sampleable": np.bincount(ids % buf.num_envs, minlength=buf.num_envs).tolist(),
            "lengths": sorted(lengths),
            "returns": sorted(returns),
            "running": runs.incomplete,
            "cut": runs.overwritten,
            "abandoned": runs.abandoned,
            "fields": fields,
            "prios": prios,
        }


@pytest.mark.parametrize("abandon", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_report_matches_the_loaded_buffer(kind: str, abandon: bool, tmp_path: Path) -> None:
    buf = make(kind, tmp_path)
    fill(buf, 0 if kind == "empty" else 130, seed=len(kind), abandon_p=0.05 if abandon else 0.0)
    buf.save(tmp_path / "b.ckpt")
    buf.close()
    report = inspect_checkpoint(tmp_path / "b.ckpt")
    loaded = rr.load(tmp_path / "b.ckpt")
    want = reference(loaded)
    assert report.cls == type(loaded).__name__
    assert [f.stored for f in report.envs] == want["stored"]
    assert [f.sampleable for f in report.envs] == want["sampleable"]
    assert all(f.capacity == loaded.env_capacity for f in report.envs)
    ep = report.episodes
    assert sorted(ep.lengths.tolist()) == want["lengths"]
    np.testing.assert_allclose(sorted(ep.returns.tolist()), want["returns"], rtol=1e-9)
    assert (ep.running, ep.cut, ep.abandoned) == (want["running"], want["cut"], want["abandoned"])
    if kind != "empty":
        assert ep.complete > 0
        assert kind == "uniform" or ep.cut + ep.running + ep.abandoned > 0
        # With abandons: several envs' episodes, and holes inside the sampleable ranges.
        assert (ep.abandoned >= buf.num_envs) == abandon
        assert (sum(f.sampleable for f in report.envs) < len(loaded) - ep.running) or not abandon
    stats = {s.name: s for s in report.fields}
    for name, (lo, hi, mean) in want["fields"].items():
        s = stats[name]
        np.testing.assert_allclose([s.min, s.max, s.mean], [lo, hi, mean], rtol=1e-9)
    if kind == "episodic_return":
        assert "discounted_return" in stats
    if want["prios"] is None:
        assert report.priorities is None
    else:
        p, entropy, top = want["prios"]
        got = report.priorities
        assert got is not None
        np.testing.assert_array_equal(np.sort(got.priorities), p)
        if p.size:
            np.testing.assert_allclose([got.entropy, got.top_share], [entropy, top], rtol=1e-9)
            assert got.min == p.min() and got.max == p.max()
    assert report.integrity.ok


@pytest.mark.parametrize("kind", ["multi_env_frames", "proportional", "empty"])
def test_cli_prints_tables_and_writes_pngs(kind: str, tmp_path: Path, capsys: Any) -> None:
    import matplotlib.image

    buf = make(kind, tmp_path)
    fill(buf, 0 if kind == "empty" else 100, seed=1)
    buf.save(tmp_path / "b.ckpt")
    assert main(["inspect", str(tmp_path / "b.ckpt"), "--plots", str(tmp_path / "png")]) == 0
    text = capsys.readouterr().out
    for title in ("Fill per env", "Episodes:", "Fields", "Integrity: OK"):
        assert title in text
    assert ("Priorities (" in text) == isinstance(buf, rr.PrioritizedReplayBuffer)
    names = {"episode_lengths.png", "episode_returns.png", "fill_per_env.png"}
    if isinstance(buf, rr.PrioritizedReplayBuffer):
        names.add("priorities.png")
    assert {p.name for p in (tmp_path / "png").iterdir()} == names
    for name in names:
        image = matplotlib.image.imread(tmp_path / "png" / name)
        assert image.shape[:2] == (400, 600), name  # 6 x 4 inches at 100 dpi
        assert image.std() > 0.01, name  # something was drawn


def test_corrupted_and_unreadable_files(tmp_path: Path, capsys: Any) -> None:
    buf = make("uniform", tmp_path)
    fill(buf, 50, seed=0)
    path = tmp_path / "b.ckpt"
    buf.save(path)
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # inside the data region
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(bytes(data))
    assert not inspect_checkpoint(bad).integrity.ok
    assert main(["inspect", str(bad)]) == 1
    assert "FAILED" in capsys.readouterr().out
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint at all")
    assert main(["inspect", str(tmp_path / "junk.ckpt")]) == 2
    assert "bad magic" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "missing.ckpt")]) == 2


def test_arrays_are_mapped_not_loaded(tmp_path: Path) -> None:
    """A 24 MB column: inspecting allocates a small fraction of it (the rest is mapped)."""
    fields = {"obs": rr.Field((84, 84), np.uint8), "action": rr.Field((), np.int64)}
    buf = rr.ReplayBuffer(3400, fields, seed=0)
    frame = np.zeros((84, 84), np.uint8)
    ids = np.arange(3400)
    buf.extend(obs=np.broadcast_to(frame, (3400, 84, 84)), action=ids, reward=np.ones(3400),
               terminated=ids % 100 == 99, truncated=np.zeros(3400, bool),
               next_obs=np.broadcast_to(frame, (3400, 84, 84)))  # fmt: skip
    buf.save(tmp_path / "big.ckpt")
    column = 3400 * 84 * 84
    tracemalloc.start()
    try:
        report = inspect_checkpoint(tmp_path / "big.ckpt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.episodes.complete == 34 and report.integrity.ok
    assert peak < column / 4, peak


def test_render_to_a_recording_console(tmp_path: Path) -> None:
    from rich.console import Console

    buf = make("rank_based", tmp_path)
    fill(buf, 120, seed=2, abandon_p=0.05)
    buf.save(tmp_path / "b.ckpt")
    report = inspect_checkpoint(tmp_path / "b.ckpt")
    console = Console(record=True, width=120)
    render(report, console)
    text = console.export_text()
    assert "rank_based" in text and "top 1% share" in text
    assert f"{report.episodes.complete} complete" in text
    assert report.episodes.abandoned > 0 and f"{report.episodes.abandoned} abandoned" in text
    assert len(write_plots(report, tmp_path / "p")) == 4
