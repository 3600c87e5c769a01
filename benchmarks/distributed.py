"""Scale-out throughput: shared-memory writers and the Ray service, against Reverb's anchors.

Measures, on this machine, with fields ``obs: float32[4]`` and ``action: int64``:

* transitions/s inserted by 1, 2 and 4 writer processes, each calling ``add`` with one step of
  one env per call (Reverb's anchor inserts one item per step): shared memory (``rr.attach``
  writers in spawned processes) and the Ray service with 1, 2 and 4 shards (writers in Ray
  actors, ``flush_every`` 64 (the default) and 256);
* transitions/s sampled by one learner, ``B = 256``: uniform, prioritized with a
  ``update_priorities`` of the batch after every batch, and ``update_priorities`` calls/s
  (256 ids each) alone. The Ray learner uses ``svc.iterate(256, prefetch=4, per_call=4)`` and
  ``update_priorities(..., wait=False)``; the plain
  ``svc.sample`` loop (one round trip at a time) is reported beside it.

Anchors (one Reverb 0.14 server on loopback, one Python client, this machine kind):
8.6k inserts/s, 48k sampled/s uniform, 40k prioritized, 1.65k priority-update calls/s. Targets:
5x each with Ray, 20x with shared memory.

Usage: ``python benchmarks/distributed.py [--secs 2] [--out docs]``; prints a Markdown table and
writes ``OUT/distributed_bench.json``, ``OUT/distributed_bench.md`` and the chart
``OUT/distributed_bench.png`` (matplotlib). About 6-7 minutes. ``--from-json FILE`` redraws the
table and the chart of an earlier run without measuring.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import rlreplay as rr

# Kernels compile in the untimed warm-up, never in the background during a timed window.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")


FIELDS = {"obs": rr.Field((4,), np.float32), "action": rr.Field((), np.int64)}
B = 256
ANCHORS = {"insert": 8.6e3, "uniform": 48e3, "per": 40e3, "update_calls": 1.65e3}
TARGETS = {"shared": 20.0, "ray": 5.0}
FILL = 100_000  # transitions stored before sampling


def chunk(n: int, t0: int = 0) -> dict[str, np.ndarray]:
    """``n`` consecutive steps of one env (episodes of 200 steps)."""
    t = np.arange(t0, t0 + n)
    return dict(
        obs=np.stack([t, t, t, t], axis=1).astype(np.float32), action=t % 4,
        reward=np.ones(n, np.float32), terminated=(t % 200) == 199,
        truncated=np.zeros(n, bool), next_obs=np.zeros((n, 4), np.float32),
    )  # fmt: skip


def one_step_loop(add: Any, secs: float) -> tuple[int, float]:
    """Call ``add`` with one step per call for ``secs`` (episodes of 200 steps); returns
    (steps, seconds)."""
    obs = np.zeros(4, np.float32)
    mid = dict(obs=obs, action=1, reward=1.0, terminated=False, truncated=False)
    end = dict(mid, terminated=True, next_obs=np.ones(4, np.float32))
    n, t0 = 0, time.perf_counter()
    deadline = t0 + secs
    while time.perf_counter() < deadline:
        for _ in range(199):
            add(**mid)
        add(**end)
        n += 200
    return n, time.perf_counter() - t0


# ---------------------------------------------------------------------- shared memory
def extend_loop(w: Any, env: int, secs: float) -> tuple[int, float]:
    """``w.extend`` of 64-step chunks (as Ape-X actors send them) for ``secs``."""
    c = chunk(64)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < secs:
        w.extend(env_id=env, **c)
        n += 64
    return n, time.perf_counter() - t0


def _shm_writer(handle: Any, secs: float, mode: str, ready: Any, go: Any, out: Any) -> None:
    w = rr.attach(handle)
    env = int(handle.env_ids[0])
    run = (lambda s: one_step_loop(w.add, s)) if mode == "add" else (
        lambda s: extend_loop(w, env, s))  # fmt: skip
    run(0.2)  # warm: Numba's cache, first calls
    ready.put(os.getpid())
    go.wait()
    out.put(run(secs))
    w.close()


def shm_inserts(writers: int, secs: float, mode: str = "add") -> float:
    ctx = mp.get_context("spawn")
    buf = rr.ReplayBuffer(writers * 2**20, FIELDS, num_envs=writers, seed=0, storage="shared")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_shm_writer, args=(buf.share(env_ids=[e]), secs, mode, ready, go, out))
        for e in range(writers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    go.set()
    rates = [n / s for n, s in (out.get(timeout=300) for _ in procs)]
    for p in procs:
        p.join(60)
    buf.close()
    return float(sum(rates))


def learner_loops(sample: Any, update: Any, secs: float, batches: Any = None) -> dict[str, float]:
    """Uniform/PER sampled transitions/s and update calls/s for one learner."""
    out: dict[str, float] = {}
    for name, with_update in (("uniform", False), ("per", True)):
        draw = sample[name] if isinstance(sample, dict) else sample
        for _ in range(10):  # warm: JIT caches, first calls
            draw()
        n, t0 = 0, time.perf_counter()
        rng = np.random.default_rng(0)
        while time.perf_counter() - t0 < secs:
            batch = draw()
            if with_update:
                update(batch.ids, rng.random(batch.ids.shape[0]) + 0.1)
            n += batch.ids.shape[0]
        out[name] = n / (time.perf_counter() - t0)
    ids = draw().ids
    p = np.random.default_rng(1).random(ids.shape[0]) + 0.1
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < secs:
        update(ids, p)
        calls += 1
    out["update_calls"] = calls / (time.perf_counter() - t0)
    return out


def shm_sampling(secs: float) -> dict[str, float]:
    E = 16
    uni = rr.ReplayBuffer(FILL, FIELDS, num_envs=E, seed=0, storage="shared")
    per = rr.PrioritizedReplayBuffer(FILL, FIELDS, num_envs=E, seed=0, storage="shared")
    for buf in (uni, per):  # filled by writers in the owner's process: the data is shared
        for e in range(E):
            w = rr.attach(buf.share(env_ids=[e]))
            for t0 in range(0, FILL // E, 1000):
                w.extend(env_id=e, **{k: v for k, v in chunk(1000, t0).items()})
            w.close()
    res = learner_loops(
        {"uniform": lambda: uni.sample(B), "per": lambda: per.sample(B)},
        per.update_priorities, secs,
    )  # fmt: skip
    uni.close()
    per.close()
    return res


# ---------------------------------------------------------------------- Ray
def ray_inserts(ray: Any, svc: Any, writers: int, secs: float, flush_every: int = 64) -> float:
    @ray.remote(num_cpus=0)
    class Actor:
        def __init__(self, w: Any) -> None:
            self.w = w

        def warm(self) -> int:
            one_step_loop(self.w.add, 0.2)
            self.w.flush(timeout=120)
            return 0

        def run(self, secs: float) -> tuple[int, float]:
            n, s = one_step_loop(self.w.add, secs)
            t0 = time.perf_counter()
            self.w.flush(timeout=120)  # what was added counts once it is stored
            return n, s + time.perf_counter() - t0

    actors = [Actor.remote(svc.writer(e, flush_every=flush_every)) for e in range(writers)]
    ray.get([a.warm.remote() for a in actors], timeout=300)
    results = ray.get([a.run.remote(secs) for a in actors], timeout=300 + secs)
    for a in actors:
        ray.kill(a)
    return float(sum(n / s for n, s in results))


def ray_fill(svc: Any, envs: int) -> None:
    w = svc.writer(list(range(envs)), flush_every=envs * 2000)
    per_env = FILL // envs
    for t0 in range(0, per_env, 1000):
        c = chunk(1000, t0)
        for i in range(1000):
            w.add(**{k: np.broadcast_to(v[i], (envs, *v.shape[1:])) for k, v in c.items()})
    w.close(timeout=300)


def ray_sampling(svc_uni: Any, svc_per: Any, secs: float) -> dict[str, float]:
    its = {
        "uniform": svc_uni.iterate(B, prefetch=4, per_call=4),
        "per": svc_per.iterate(B, prefetch=4, per_call=4),
    }

    def update(ids: np.ndarray, p: np.ndarray) -> None:  # the learner does not wait
        svc_per.update_priorities(ids, p, wait=False)

    res = learner_loops({k: (lambda it=it: next(it)) for k, it in its.items()}, update, secs)
    plain = learner_loops(
        {"uniform": lambda: svc_uni.sample(B), "per": lambda: svc_per.sample(B)},
        svc_per.update_priorities, secs / 2,
    )  # fmt: skip
    res.update({f"{k}_no_prefetch": v for k, v in plain.items()})
    # The floor of any waited call: one bare round trip to every shard (no arguments).
    import ray

    trips, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < secs / 2:
        ray.get([shard.sizes.remote() for shard in svc_per._shards])
        trips += 1
    res["round_trips"] = trips / (time.perf_counter() - t0)
    for it in its.values():
        it.close()
    return res


# ---------------------------------------------------------------------- report
def row(backend: str, shards: Any, metric: str, value: float, what: str) -> dict[str, Any]:
    anchor = ANCHORS.get(what)
    target = TARGETS[backend] if anchor else None
    return {
        "backend": backend, "shards": shards, "metric": metric, "value": value,
        "anchor": anchor, "ratio": None if anchor is None else value / anchor,
        "target": target, "met": None if anchor is None else value / anchor >= target,
    }  # fmt: skip


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Measured {meta['date']} on {meta['cpus']} cores, load average before/after "
        f"{meta['load_before']} / {meta['load_after']}, {meta['secs']} s per cell.",
        "",
        "| backend | shards | measure | per second | Reverb anchor | ratio | target | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        anchor = "" if r["anchor"] is None else f"{r['anchor'] / 1e3:.2f}k"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.1f}x"
        target = "" if r["target"] is None else f"{r['target']:.0f}x"
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append(
            f"| {r['backend']} | {r['shards']} | {r['metric']} | {r['value'] / 1e3:.1f}k | "
            f"{anchor} | {ratio} | {target} | {met} |"
        )
    return "\n".join(lines) + "\n"


KINDS = (  # chart panels: (measure, anchor key, title)
    ("inserts", "insert", "inserts/s (one step per add)"),
    ("sampled, uniform", "uniform", "sampled transitions/s, uniform B=256"),
    ("sampled, PER", "per", "sampled transitions/s, PER B=256 + update"),
    ("update_priorities", "update_calls", "update_priorities calls/s (256 ids)"),
)


def short_label(r: dict[str, Any]) -> str:
    """A bar's label: backend and shards, then what varies within a panel."""
    m = r["metric"]
    where = "shm" if r["backend"] == "shared" else f"ray {r['shards']}"
    if m.startswith("inserts"):
        writers = m.split(" writer")[0].split()[-1]
        how = "ext64" if "extend" in m else ("fe256" if "flush_every=256" in m else "")
        if r["backend"] == "ray" and not how:
            how = "fe64"
        return f"{where} {writers}w {how}".strip()
    if "waited" in m:
        return f"{where} waited"
    if "wait=False" in m:
        return f"{where} no wait"
    if "no prefetch" in m:
        return f"{where} sample"
    if "iterate" in m:
        return f"{where} iterate"
    return where


def chart(rows: list[dict[str, Any]], meta: dict[str, Any], path: Path) -> None:
    """Bars per measure (one panel each), grouped by backend/shards, with the Reverb anchor
    (dashed) and the 5x (Ray) and 20x (shared memory) targets (dotted) marked."""
    import matplotlib  # lazily: only the chart needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(15, 10))
    grid = fig.add_gridspec(2, 3)  # inserts (many bars) across the top, the rest below
    axes = [fig.add_subplot(grid[0, :])] + [fig.add_subplot(grid[1, i]) for i in range(3)]
    colors = {"shared": "#4c72b0", 1: "#dd8452", 2: "#55a868", 4: "#c44e52"}
    for ax, (prefix, key, title) in zip(axes, KINDS, strict=True):
        mine = [r for r in rows if r["metric"].startswith(prefix)]
        if not mine:
            ax.set_visible(False)
            continue
        x = np.arange(len(mine))
        shade = [colors.get(r["shards"] if r["backend"] == "ray" else "shared", "grey")
                 for r in mine]  # fmt: skip
        hatch = ["" if r["anchor"] else "//" for r in mine]  # not the anchor's call
        bars = ax.bar(x, [r["value"] for r in mine], color=shade, hatch=hatch, edgecolor="k")
        for b, r in zip(bars, mine, strict=True):
            text = f"{r['value'] / 1e3:.1f}k"
            if r["ratio"] is not None:
                text += f"\n{r['ratio']:.1f}x"
            ax.annotate(text, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                        va="bottom", fontsize=7)  # fmt: skip
        anchor = ANCHORS[key]
        ax.axhline(anchor, color="k", ls="--", lw=1, label=f"Reverb anchor {anchor / 1e3:.2f}k")
        for backend, style in (("ray", ":"), ("shared", "-.")):
            goal = anchor * TARGETS[backend]
            label = f"{TARGETS[backend]:.0f}x target ({backend}) {goal / 1e3:.1f}k"
            ax.axhline(goal, color="k", ls=style, lw=1, label=label)
        ax.set_yscale("log")
        ax.set_xticks(x, [short_label(r) for r in mine], rotation=60, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(
        f"rlreplay scale-out vs Reverb 0.14 anchors: {meta['date']}, {meta['cpus']} cores, "
        f"load {meta['load_before']} / {meta.get('load_after', '?')} (hatched: not the anchor's "
        "call)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_report(rows: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> None:
    """Print the table; write the JSON, the Markdown table and the chart into ``out``."""
    report = markdown(rows, meta)
    print(report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "distributed_bench.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (out / "distributed_bench.md").write_text(report)
    chart(rows, meta, out / "distributed_bench.png")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--secs", type=float, default=2.0, help="seconds per cell")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs"))
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--flush-every", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--from-json", help="redraw the table and chart of this earlier run's JSON")
    args = ap.parse_args()
    if args.from_json:
        run = json.loads(Path(args.from_json).read_text())
        write_report(run["rows"], run["meta"], Path(args.out))
        return
    secs = args.secs
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
        "load_before": round(os.getloadavg()[0], 1), "secs": secs,
        "python": platform.python_version(), "numpy": np.__version__,
    }  # fmt: skip
    rows: list[dict[str, Any]] = []

    def log(r: dict[str, Any]) -> None:
        rows.append(r)
        print(f"  {r['backend']:6} {r['shards']!s:>2} {r['metric']:42} "
              f"{r['value'] / 1e3:9.1f}k", file=sys.stderr, flush=True)  # fmt: skip

    print("shared memory", file=sys.stderr)
    for w in args.writers:
        log(row("shared", "-", f"inserts, {w} writer process(es), add 1 step", shm_inserts(w, secs),
                "insert"))  # fmt: skip
    for w in args.writers:
        log(row("shared", "-", f"inserts, {w} writer process(es), extend 64 steps",
                shm_inserts(w, secs, "extend"), "-"))  # fmt: skip
    s = shm_sampling(secs)
    log(row("shared", "-", "sampled, uniform B=256", s["uniform"], "uniform"))
    log(row("shared", "-", "sampled, PER B=256 + update", s["per"], "per"))
    log(row("shared", "-", "update_priorities calls (256 ids)", s["update_calls"], "update_calls"))

    import ray

    from rlreplay.distributed import ReplayService

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    meta["ray"] = ray.__version__
    for S in args.shards:
        print(f"ray, {S} shard(s)", file=sys.stderr)
        for fe in args.flush_every:
            for w in args.writers:
                E = max(S, w)
                with ReplayService(S, E * 2**18, FIELDS, seed=0, num_envs=E) as svc:
                    v = ray_inserts(ray, svc, w, secs, fe)
                what = f"inserts, {w} writer process(es), add 1 step, flush_every={fe}"
                log(row("ray", S, what, v, "insert"))
        E = 16
        with (
            ReplayService(S, FILL, FIELDS, seed=0, num_envs=E) as uni,
            ReplayService(S, FILL, FIELDS, prioritized=True, seed=0, num_envs=E) as per,
        ):
            ray_fill(uni, E)
            ray_fill(per, E)
            s = ray_sampling(uni, per, secs)
        log(row("ray", S, "sampled, uniform B=256 (iterate, 4 per call)", s["uniform"], "uniform"))
        log(
            row(
                "ray",
                S,
                "sampled, PER B=256 + update (iterate 4 per call, wait=False)",
                s["per"],
                "per",
            )
        )
        log(row("ray", S, "update_priorities calls (256 ids, wait=False)", s["update_calls"],
                "update_calls"))  # fmt: skip
        log(row("ray", S, "update_priorities calls (256 ids, waited)",
                s["update_calls_no_prefetch"], "update_calls"))  # fmt: skip
        log(row("ray", S, "bare round trips to every shard (no arguments)", s["round_trips"],
                "-"))  # fmt: skip
        log(row("ray", S, "sampled, uniform B=256 (sample, no prefetch)",
                s["uniform_no_prefetch"], "-"))  # fmt: skip
        log(row("ray", S, "sampled, PER B=256 + waited update (no prefetch)",
                s["per_no_prefetch"], "-"))  # fmt: skip
    ray.shutdown()
    meta["load_after"] = round(os.getloadavg()[0], 1)
    write_report(rows, meta, Path(args.out))


if __name__ == "__main__":
    main()
