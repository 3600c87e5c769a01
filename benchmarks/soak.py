"""Soak: many threads on one prioritized buffer for a long run, invariants checked throughout.

Four writer threads (one env each) add steps, two samplers draw batches, one updater sets the
priorities of sampled ids, and a saver checkpoints the buffer every ``save_every`` operations
and reloads the checkpoint. Every step carries a ``tag`` equal to the id it will get, and its
other values are functions of that tag, so every check is exact:

* every writer's ``add`` returns the id it expects (``t * num_envs + env``);
* every sampled transition is what was written for its id: ``tag == id``, ``obs``, ``reward``
  and ``next_obs`` (the next step's ``obs``, or the episode's final observation) match;
* no id is sampled after it was overwritten: its step is at most ``env_capacity`` behind what
  its writer had stored before the sample began;
* the sum tree's root equals the sum of its leaves (relative error ``<= 1e-9``), checked under
  the buffer's lock by the updater and the saver;
* every checkpoint reloads to a consistent buffer: the same invariants hold on the reloaded
  one, and saving it again gives the same bytes.

Resident memory (``/proc/self/statm``) is sampled every 1000 operations; the report gives,
per tenth of the run, its mean and its floor (the smallest sample), and states the growth
between the second and the last tenth of both (``memory``). The floor is what stays resident:
the saver's reload allocates a second buffer for a moment (a fixed cost, paid again at every
save), which lifts the mean of the tenths it falls in without being a leak. To tell the two
apart the run is made twice by default, with the saver and without it, each in a fresh
process (``--saver both``; ``on`` or ``off`` runs one here), and both reports are printed.

Resident memory and the allocator: with the saver, glibc's malloc raised resident memory by
+7% (mean) between the second and the last tenth of 10^6 operations, in steps that level off
(171 -> 193 MiB). It is not a leak: a one-thread loop of save, reload and close stays flat
(resident and traced Python memory, 30 cycles), and the growth goes away when glibc's
``M_MMAP_THRESHOLD`` is fixed. By default glibc raises that threshold to the size of every
mmapped block freed (up to 32 MiB), so after the first reloaded buffer is freed, blocks of up to
its arrays' size come from the eight threads' arenas, where they fragment. ``--malloc pinned``
(the default) fixes the threshold at glibc's default (128 KiB, ``mallopt(M_MMAP_THRESHOLD)``,
what ``MALLOC_MMAP_THRESHOLD_=131072`` does): large blocks always go back to the system when
freed. ``--malloc dynamic`` keeps glibc's behaviour, to see the difference.

Run: ``python benchmarks/soak.py [--ops 1000000] [--seed 0] [--saver both] [--malloc pinned]
[--json out.json]``; exits 1 if an invariant was violated. ``tests/test_soak.py`` runs a short
version (in its own process's allocator: ``run`` leaves it dynamic unless asked).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import itertools
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from subprocess import DEVNULL
from typing import Any

import numpy as np

import rlreplay as rr

# Kernels compile in the untimed warm-up, never in the background during a timed window.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")


WRITERS = 4
SAMPLERS = 2
OBS = 4
_PAGE = os.sysconf("SC_PAGE_SIZE")


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def pin_mmap_threshold(nbytes: int = 128 * 1024) -> bool:
    """Fix glibc's mmap threshold at ``nbytes`` (no dynamic raise); False if not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, nbytes))


def obs_of(tags: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The observation stored with ``tags`` (float32, exact below 2**24 per lane)."""
    tags = np.asarray(tags, np.int64)
    return np.stack([(tags + k) % 1_000_003 for k in range(OBS)], -1).astype(np.float32)


def final_of(tags: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The final observation of an episode that ends at the step tagged ``tags``."""
    return -obs_of(tags) - 1.0


def reward_of(tags: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return (np.asarray(tags, np.int64) % 13).astype(np.float32)


def ends(tags: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Whether the step tagged ``tags`` ends its episode (about one step in 50)."""
    return (np.asarray(tags, np.int64) * 2654435761 % 997) < 20


def priority_of(ids: np.ndarray[Any, Any], version: int) -> np.ndarray[Any, Any]:
    return 0.1 + (np.asarray(ids, np.int64) * 7 + version) % 11


@dataclass
class Report:
    ops: int = 0
    seconds: float = 0.0
    adds: int = 0
    samples: int = 0
    sampled_transitions: int = 0
    updates: int = 0
    stale_updates: int = 0
    saves: int = 0
    tree_checks: int = 0
    violations: list[str] = field(default_factory=list)
    rss_mb_second_tenth: float = 0.0
    rss_mb_last_tenth: float = 0.0
    rss_growth_pct: float = 0.0
    rss_mb_by_tenth: list[float] = field(default_factory=list)
    rss_floor_mb_second_tenth: float = 0.0
    rss_floor_mb_last_tenth: float = 0.0
    rss_floor_growth_pct: float = 0.0
    rss_floor_mb_by_tenth: list[float] = field(default_factory=list)
    saver: bool = True
    malloc: str = "dynamic"
    memory: str = ""

    def fail(self, message: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(message)


class Soak:
    def __init__(
        self, ops: int, capacity: int, batch: int, save_every: int, seed: int, saver: bool = True
    ) -> None:
        self.ops, self.batch, self.save_every, self.saver_on = ops, batch, save_every, saver
        self.buf = rr.PrioritizedReplayBuffer(
            capacity,
            {"obs": rr.Field((OBS,), np.float32), "tag": rr.Field((), np.int64)},
            num_envs=WRITERS,
            alpha=0.6,
            beta=0.4,
            seed=seed,
        )
        self.env_capacity = self.buf.env_capacity
        self.stored = [0] * WRITERS  # steps each writer has seen stored (written after add)
        self.counter = itertools.count()
        self.report = Report()
        self.lock = threading.Lock()  # for the report's counters
        self.updates: queue.Queue[np.ndarray[Any, Any] | None] = queue.Queue(maxsize=64)
        self.rss: list[tuple[int, int]] = []
        self.stop = threading.Event()

    # ---------------------------------------------------------------- operations
    def take(self) -> int | None:
        """The number of the next operation, or None once the run is over."""
        n = next(self.counter)
        if n >= self.ops or self.stop.is_set():
            self.stop.set()
            return None
        if n % 1000 == 0:
            with open("/proc/self/statm") as f:
                self.rss.append((n, int(f.read().split()[1]) * _PAGE))
        return n

    def count(self, **counts: int) -> None:
        with self.lock:
            for k, v in counts.items():
                setattr(self.report, k, getattr(self.report, k) + v)

    def writer(self, env: int) -> None:
        t = 0
        while self.take() is not None:
            tag = np.array([t * WRITERS + env])
            end = ends(tag)
            extra = {"next_obs": final_of(tag)} if end[0] else {}
            ids = self.buf.add(
                env_ids=[env], obs=obs_of(tag), tag=tag, reward=reward_of(tag),
                terminated=end, truncated=np.zeros(1, bool), **extra,
            )  # fmt: skip
            if ids.tolist() != tag.tolist():
                self.report.fail(f"writer {env}: add returned ids {ids} for step {t}")
            t += 1
            self.stored[env] = t
            self.count(adds=1)

    def check_batch(self, batch: rr.Batch, before: list[int], where: str) -> None:
        ids = batch.ids
        if not np.array_equal(batch.tag, ids):
            bad = np.flatnonzero(batch.tag != ids)[0]
            self.report.fail(f"{where}: id {ids[bad]} holds the step tagged {batch.tag[bad]}")
            return
        if not np.array_equal(batch.obs, obs_of(ids)) or not np.array_equal(
            batch.reward, reward_of(ids)
        ):
            self.report.fail(f"{where}: obs or reward of ids {ids[:4]}... differ from theirs")
        ended = ends(ids)
        expected_next = np.where(ended[:, None], final_of(ids), obs_of(ids + WRITERS))
        if not np.array_equal(batch.next_obs, expected_next):
            self.report.fail(f"{where}: next_obs differs from the next step's or final obs")
        env, t = ids % WRITERS, ids // WRITERS
        oldest = np.asarray(before)[env] - self.env_capacity
        if (t < oldest).any():
            bad = np.flatnonzero(t < oldest)[0]
            self.report.fail(f"{where}: id {ids[bad]} sampled after it was overwritten")

    def sampler(self) -> None:
        while self.take() is not None:
            before = list(self.stored)
            if len(self.buf) < self.batch:
                continue
            try:
                batch = self.buf.sample(self.batch)
            except rr.EmptyBufferError:
                continue
            self.check_batch(batch, before, "sample")
            self.count(samples=1, sampled_transitions=len(batch.ids))
            with contextlib.suppress(queue.Full):  # the updater is behind: skip this one
                self.updates.put_nowait(batch.ids)

    def updater(self) -> None:
        version = 0
        while self.take() is not None:
            try:
                ids = self.updates.get(timeout=0.05)
            except queue.Empty:
                continue
            if ids is None:
                return
            version += 1
            stale = self.buf.update_priorities(ids, priority_of(ids, version))
            self.count(updates=1, stale_updates=int(stale))
            if version % 50 == 0:
                self.check_tree(self.buf, "updater")

    def check_tree(self, buf: rr.PrioritizedReplayBuffer, where: str) -> None:
        with buf._lock:
            tree = buf._prios.sum_tree
            leaves = tree.get(np.arange(tree.capacity))
            total, direct = tree.total, float(leaves.sum())
        if not abs(total - direct) <= 1e-9 * max(abs(direct), 1.0):
            self.report.fail(f"{where}: sum tree root {total!r} != sum of leaves {direct!r}")
        self.count(tree_checks=1)

    def saver(self, directory: Path) -> None:
        path, again = directory / "soak.ckpt", directory / "again.ckpt"
        while (n := self.take()) is not None:
            if n < self.save_every * (self.report.saves + 1):
                time.sleep(0.001)
                continue
            self.check_tree(self.buf, "saver")
            before = list(self.stored)
            self.buf.save(path)
            loaded = rr.load(path)
            assert isinstance(loaded, rr.PrioritizedReplayBuffer)
            loaded.save(again)  # first: sampling moves its RNG and beta schedule on
            if again.read_bytes() != path.read_bytes():
                self.report.fail("a reloaded checkpoint does not save back to the same bytes")
            self.check_tree(loaded, "reloaded checkpoint")
            if len(loaded) >= self.batch:
                self.check_batch(loaded.sample(self.batch), before, "reloaded checkpoint")
            loaded.close()
            self.count(saves=1)

    # ---------------------------------------------------------------- the run
    def run(self) -> Report:
        with tempfile.TemporaryDirectory(prefix="rlreplay-soak-") as tmp:
            jobs: list[tuple[Any, tuple[Any, ...]]] = [(self.writer, (e,)) for e in range(WRITERS)]
            jobs += [(self.sampler, ())] * SAMPLERS + [(self.updater, ())]
            if self.saver_on:
                jobs.append((self.saver, (Path(tmp),)))
            threads = [threading.Thread(target=self._guard, args=job) for job in jobs]
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            self.report.seconds = time.perf_counter() - start
        self.check_tree(self.buf, "end")
        self.report.ops = min(next(self.counter), self.ops)
        self._memory()
        return self.report

    def _guard(self, job: Any, args: tuple[Any, ...]) -> None:
        """Runs a thread's job; an exception is a violation and ends the run."""
        try:
            job(*args)
        except Exception as exc:
            self.report.fail(f"{job.__name__}: {type(exc).__name__}: {exc}")
            self.stop.set()

    def _memory(self) -> None:
        report = self.report
        report.saver = self.saver_on
        if len(self.rss) < 10:
            report.memory = f"too few resident-memory samples ({len(self.rss)}) to compare"
            return
        tenth = self.ops / 10
        for k in range(10):
            part = [r for n, r in self.rss if k * tenth <= n < (k + 1) * tenth]
            report.rss_mb_by_tenth.append(round(float(np.mean(part)) / 2**20, 2) if part else 0)
            report.rss_floor_mb_by_tenth.append(round(min(part) / 2**20, 2) if part else 0)
        second = [r for n, r in self.rss if tenth <= n < 2 * tenth]
        last = [r for n, r in self.rss if n >= 9 * tenth]
        if not (second and last):
            report.memory = "no resident-memory sample in the second or the last tenth"
            return
        a, b = float(np.mean(second)), float(np.mean(last))
        report.rss_mb_second_tenth = round(a / 2**20, 2)
        report.rss_mb_last_tenth = round(b / 2**20, 2)
        report.rss_growth_pct = round(100.0 * (b - a) / a, 3)
        fa, fb = float(min(second)), float(min(last))
        report.rss_floor_mb_second_tenth = round(fa / 2**20, 2)
        report.rss_floor_mb_last_tenth = round(fb / 2**20, 2)
        report.rss_floor_growth_pct = round(100.0 * (fb - fa) / fa, 3)
        report.memory = (
            f"resident memory {'with' if self.saver_on else 'without'} the saver, second -> "
            f"last tenth of {self.ops} operations: mean {report.rss_mb_second_tenth} -> "
            f"{report.rss_mb_last_tenth} MiB ({report.rss_growth_pct:+.3f}%), floor "
            f"{report.rss_floor_mb_second_tenth} -> {report.rss_floor_mb_last_tenth} MiB "
            f"({report.rss_floor_growth_pct:+.3f}%); flat (< 2%): "
            f"{'yes' if abs(report.rss_growth_pct) < 2.0 else 'no'} (mean), "
            f"{'yes' if abs(report.rss_floor_growth_pct) < 2.0 else 'no'} (floor)"
        )


def run(
    ops: int = 1_000_000,
    capacity: int = 65_536,
    batch: int = 64,
    save_every: int = 100_000,
    seed: int = 0,
    saver: bool = True,
    malloc: str = "dynamic",
) -> Report:
    """Runs the soak; see the module docstring. Returns the report (violations included).

    ``malloc="pinned"`` fixes glibc's mmap threshold for this process first (for the rest of
    its life); ``"dynamic"`` leaves the allocator as it is.
    """
    pinned = malloc == "pinned" and pin_mmap_threshold()
    report = Soak(ops, capacity, batch, save_every, seed, saver).run()
    report.malloc = "pinned" if pinned else "dynamic"
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--capacity", type=int, default=65_536)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--save-every", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--saver", choices=["both", "on", "off"], default="both")
    parser.add_argument("--malloc", choices=["pinned", "dynamic"], default="pinned")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    if args.saver == "both":  # each in a fresh process: one run's heap is not the other's base
        for mode in ("on", "off"):
            with tempfile.TemporaryDirectory() as tmp:
                part = Path(tmp) / "report.json"
                cmd = [sys.executable, __file__, "--saver", mode, "--json", str(part)]
                cmd += ["--ops", str(args.ops), "--capacity", str(args.capacity)]
                cmd += ["--batch", str(args.batch), "--save-every", str(args.save_every)]
                cmd += ["--malloc", args.malloc]
                subprocess.run([*cmd, "--seed", str(args.seed)], check=False, stdout=DEVNULL)
                out.update(json.loads(part.read_text()))
    else:
        report = run(args.ops, args.capacity, args.batch, args.save_every, args.seed,
                     args.saver == "on", args.malloc)  # fmt: skip
        out["with_saver" if report.saver else "without_saver"] = asdict(report)
    out["memory"] = [r["memory"] for k, r in out.items() if k.endswith("_saver")]
    text = json.dumps(out, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 1 if any(r["violations"] for k, r in out.items() if k.endswith("_saver")) else 0


if __name__ == "__main__":
    sys.exit(main())
