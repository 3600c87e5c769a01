"""Cold start: the quick start in a fresh interpreter with an empty Numba cache.

A fresh install has no compiled kernels yet: every kernel a script reaches is compiled on its
first call. This runs the quick start of docs/getting-started.md (build a buffer, 1,000 ``add``
calls, one ``sample(256)``, a checkpoint saved and loaded) ``--repeats`` times, each in a new
interpreter whose Numba cache directory is empty, then once more with that cache filled, and
prints the seconds of each stage (medians).

    python benchmarks/cold_start.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import rlreplay as rr
t1 = time.perf_counter()
buf = rr.ReplayBuffer(
    capacity=100_000,
    fields={"obs": rr.Field((4,), np.float32), "action": rr.Field((), np.int64)},
    n_step=3, gamma=0.99, seed=0,
)
obs = np.zeros(4, np.float32)
for t in range(1000):
    nxt = obs + 1
    buf.add(obs=obs, action=t % 2, reward=1.0, next_obs=nxt,
            terminated=t % 200 == 199, truncated=False)
    obs = nxt
t2 = time.perf_counter()
batch = buf.sample(256)
t3 = time.perf_counter()
buf.save(sys.argv[1]); same = rr.load(sys.argv[1])
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "add x1000": t2 - t1, "sample(256)": t3 - t2,
                  "save + load": t4 - t3, "total": t4 - t0}))
"""


def run_once(cache: Path, work: Path) -> dict[str, float]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(work / "replay.ckpt")],
        capture_output=True, text=True, env=env, timeout=600, check=True,
    )  # fmt: skip
    out: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    cold: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            cache = Path(tmp) / f"cache-{i}"
            cold.append(run_once(cache, Path(tmp)))
            print(f"cold run {i + 1}: {cold[-1]['total']:.2f} s", file=sys.stderr)
        warm = run_once(Path(tmp) / f"cache-{args.repeats - 1}", Path(tmp))
    print("| stage | cold (empty Numba cache), s | warm, s |")
    print("|---|---|---|")
    for key in cold[0]:
        med = statistics.median(r[key] for r in cold)
        print(f"| {key} | {med:.2f} | {warm[key]:.2f} |")
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n{args.repeats} cold runs (medians), one warm; load average {load}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
