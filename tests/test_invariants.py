"""The library's invariants, one test each, through the public API.

Each test's docstring quotes the invariant it is the specification of. Other tests prove
several of them in more depth (named in the tests below); these are the direct statements.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

import rlreplay as rr
from rlreplay.distributed.shard import Shard
from rlreplay.distributed.split import (
    merge_batches,
    pack_updates,
    split_batch_size,
)
from tests.contracts.episode_index import RefIndex

SRC = Path(rr.__file__).resolve().parents[1]
FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}


def step(e: int, t: int, done: bool = False, truncated: bool = False) -> dict[str, Any]:
    """One step of env ``e`` at its step ``t``, for ``add(env_ids=[e], ...)``: the observation
    is ``(e, t)``, the action ``1000 * e + t``; a final observation is ``(e, -t)``."""
    return {
        "env_ids": [e],
        "obs": np.array([[e, t]], np.float32),
        "action": np.array([1000 * e + t]),
        "reward": np.array([0.5], np.float32),
        "terminated": np.array([done and not truncated]),
        "truncated": np.array([done and truncated]),
        "next_obs": np.array([[e, -t if done else t + 1]], np.float32),
    }


# Front-ends: the other libraries' APIs (compat) and the adapters to other frameworks
# (integrations), which import their framework; the core imports none of them.
FRONT_ENDS = ("rlreplay.compat", "rlreplay.integrations")


def core_modules() -> list[str]:
    """Every module of the core: everything under ``src/rlreplay`` but the front-ends."""
    names = []
    for path in sorted((SRC / "rlreplay").rglob("*.py")):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        if not name.startswith(FRONT_ENDS):
            names.append(name)
    return names


# ---------------------------------------------------------------------- ids
def test_an_id_names_one_transition_for_ever() -> None:
    """An id names one transition for ever; an id whose slot was overwritten is detectably
    stale."""
    E, C = 2, 5
    buf = rr.ReplayBuffer(E * C, FIELDS, num_envs=E, seed=0)
    pbuf = rr.PrioritizedReplayBuffer(E * C, FIELDS, num_envs=E, seed=0)
    rng = np.random.default_rng(0)
    issued: dict[int, tuple[int, int]] = {}  # id -> (env, step)
    counts = [0, 0]
    floor = [0, 0]  # steps before it were cleared

    def check() -> None:
        for i, (e, t) in issued.items():
            if t >= max(counts[e] - C, floor[e]):  # stored: the id still names its step
                assert buf.get_field("obs", [i]).tolist() == [[e, t]]
                assert buf.get_field("action", [i]).tolist() == [1000 * e + t]
            else:  # overwritten or cleared: refused, never another step's data
                with pytest.raises(rr.InvalidIdError):
                    buf.get_field("obs", [i])
                with pytest.raises(rr.InvalidIdError):
                    buf.get_transitions([i])
                assert pbuf.update_priorities([i], [5.0]) == 1  # ignored as stale

    for k in range(40):
        e = int(rng.integers(E))
        s = step(e, counts[e], done=bool(rng.random() < 0.3))
        ids = buf.add(**s)
        assert pbuf.add(**s).tolist() == ids.tolist()
        (i,) = ids.tolist()
        assert i not in issued, f"id {i} issued twice"
        issued[i] = (e, counts[e])
        counts[e] += 1
        if k == 25:  # clearing makes every id stale; ids keep counting
            buf.clear()
            pbuf.clear()
            floor = list(counts)
        check()
    assert sorted(issued) == sorted(t * E + e for e in range(E) for t in range(counts[e]))


# ---------------------------------------------------------------------- sampleable
def feed_against_model(buf: rr.ReplayBuffer, ref: RefIndex, seed: int, ops: int) -> None:
    """Random steps, ends, truncations by ``end_episode``, abandons, dequeues and a clear, on
    ``buf`` and on the model alike."""
    rng = np.random.default_rng(seed)
    for k in range(ops):
        e = int(rng.integers(buf.num_envs))
        u = rng.random()
        if u < 0.75:
            done = bool(rng.random() < 0.2)
            buf.add(**step(e, ref.count(e), done, truncated=bool(rng.random() < 0.5)))
            ref.add(e, done)
        elif u < 0.85:
            final = {"next_obs": np.array([e, -ref.count(e)], np.float32)}
            if ref.end_running(e) >= 0:
                buf.end_episode(e, **final)
            else:
                with pytest.raises(rr.InvalidIdError):
                    buf.end_episode(e, **final)
        elif u < 0.95:
            got = buf.abandon_episode(e)
            want = ref.abandon(e)
            assert got.tolist() == ([want * buf.num_envs + e] if want >= 0 else [])
        elif ref.count(e) - ref.head(e) >= 2:
            buf.dequeue(2, [e])
            ref.dequeue(e, 2)
        if k == ops // 2:
            buf.clear()
            ref.clear()


@pytest.mark.parametrize(
    ("cls", "options"),
    [
        (rr.ReplayBuffer, {}),
        (rr.ReplayBuffer, {"replacement": False, "recent_ratio": 0.5, "recent_steps": 3}),
        (rr.PrioritizedReplayBuffer, {"variant": "proportional"}),
        (rr.PrioritizedReplayBuffer, {"variant": "rank_based"}),
    ],
    ids=["uniform", "without-replacement-recent", "proportional", "rank-based"],
)
def test_sampleable_exactly_when_window_known_and_nothing_read_overwritten(
    cls: type[rr.ReplayBuffer], options: dict[str, Any]
) -> None:
    """A transition is sampleable exactly when its window is known and no slot it reads was
    overwritten; the index, not the sampler, decides this.

    The model (``tests/contracts/episode_index.py``) states the rule by definition; every
    sampler draws from exactly the set it gives (all of it, nothing else), and
    ``get_transitions`` accepts exactly that set.
    """
    E, C, n, k = 2, 9, 3, 2
    buf = cls(E * C, FIELDS, num_envs=E, n_step=n, frame_stack=k, seed=3, **options)
    ref = RefIndex(E, C, n, k)
    for seed in range(3):
        feed_against_model(buf, ref, seed, 60)
        want = [t * E + e for e in range(E) for t in range(ref.count(e)) if ref.sampleable(e, t)]
        assert buf.sampleable_ids().tolist() == want
        assert buf.num_sampleable == len(want)
        drawn: set[int] = set()
        for _ in range(60):
            drawn.update(buf.sample(min(16, len(want))).ids.tolist())
        assert drawn == set(want)  # nothing else, and every one of them
        for e in range(E):
            for t in range(ref.count(e)):
                i = t * E + e
                if i in drawn:
                    assert buf.get_transitions([i]).ids.tolist() == [i]
                else:
                    with pytest.raises(rr.InvalidIdError):
                        buf.get_transitions([i])


# ---------------------------------------------------------------------- storage
def test_every_observation_byte_is_stored_once() -> None:
    """Every observation byte is stored once; a final observation is kept only for episodes
    that ended."""
    E, C = 2, 8
    fields = {"obs": rr.Field((3,), np.float32)}
    buf = rr.ReplayBuffer(E * C, fields, num_envs=E)
    wide = rr.ReplayBuffer(E * C, {"obs": rr.Field((6,), np.float32)}, num_envs=E)
    arrays = buf.state_dict()["arrays"]
    obs_arrays = sorted(k for k, v in arrays.items() if v.dtype == np.float32 and v.ndim == 2)
    assert obs_arrays == ["columns/finals/obs", "columns/steps/obs"]  # no next_obs column
    finals = arrays["columns/finals/obs"].shape[0]
    assert arrays["columns/steps/obs"].shape[0] == E * C  # one row per stored step
    # 12 more bytes per observation cost 12 bytes per step slot and per final record only.
    assert wide.nbytes - buf.nbytes == 12 * (E * C + finals)

    # Env 0: episodes of 3 (terminated) and 2 (truncated) steps, then 2 of a running one;
    # env 1: 4 steps of a running one. next_obs is given at every step.
    ended: list[tuple[int, list[float]]] = []
    for e, lengths, running in ((0, [3, 2, 2], True), (1, [4], True)):
        t = 0
        for j, length in enumerate(lengths):
            for i in range(length):
                done = i == length - 1 and not (running and j == len(lengths) - 1)
                obs = np.array([e + 1, t + 1, 0], np.float32)
                nxt = np.array([e + 1, t + 2, 7 if done else 0], np.float32)
                buf.add(env_ids=[e], obs=obs[None], next_obs=nxt[None], reward=[0.0],
                        terminated=[done and j == 0], truncated=[done and j == 1])  # fmt: skip
                if done:
                    ended.append((e, nxt.tolist()))
                t += 1
    arrays = buf.state_dict()["arrays"]
    steps = arrays["columns/steps/obs"]
    stored = [row.tolist() for row in steps if row.any()]
    assert len(stored) == 7 + 4  # each step's observation, once
    kept = [row.tolist() for row in arrays["columns/finals/obs"] if row.any()]
    assert sorted(kept) == sorted(f for _, f in ended)  # only the two ended episodes' finals
    # A sample's next_obs is the next step's stored observation, or the kept final one.
    batch = buf.sample(64)
    for ob, nxt in zip(batch.obs.tolist(), batch.next_obs.tolist(), strict=True):
        assert nxt == [ob[0], ob[1] + 1, nxt[2]] and nxt[2] in (0, 7)
        assert (nxt in kept) == (nxt[2] == 7)


# ---------------------------------------------------------------------- state
def feed(buf: rr.ReplayBuffer, seed: int, steps: int) -> None:
    rng = np.random.default_rng(seed)
    counts = [0] * buf.num_envs
    for _ in range(steps):
        e = int(rng.integers(buf.num_envs))
        buf.add(**step(e, counts[e], done=bool(rng.random() < 0.2)))
        counts[e] += 1
    if isinstance(buf, rr.PrioritizedReplayBuffer):
        ids = buf.sampleable_ids()
        buf.update_priorities(ids, rng.uniform(0.1, 4.0, ids.shape[0]))


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["class"] == b["class"] and a["config"] == b["config"] and a["meta"] == b["meta"]
    assert list(a["arrays"]) == list(b["arrays"])
    for name, arr in a["arrays"].items():
        assert arr.dtype == b["arrays"][name].dtype, name
        assert arr.tobytes() == b["arrays"][name].tobytes(), name


@pytest.mark.parametrize("cls", [rr.ReplayBuffer, rr.PrioritizedReplayBuffer])
def test_state_is_storage_index_sampler_and_rng(cls: type[rr.ReplayBuffer], tmp_path: Path) -> None:
    """State = storage columns + index + sampler state + RNG state; a checkpoint is exactly
    that.

    The state names nothing else; a buffer with another history that is given it behaves as
    the original from then on; a checkpoint file loads back to the same state.
    """
    prioritized = cls is rr.PrioritizedReplayBuffer
    a = cls(32, FIELDS, num_envs=2, n_step=2, seed=1)
    feed(a, 0, 50)
    a.sample(8)  # the generator moved
    state = a.state_dict()
    parts = {name.split("/")[0] for name in state["arrays"]}
    assert parts == {"columns", "index"} | ({"priorities"} if prioritized else set())
    assert set(state["meta"]) == {"finals_capacity", "rng"} | (
        {"priorities"} if prioritized else set()
    )
    b = cls(32, FIELDS, num_envs=2, n_step=2, seed=1)
    feed(b, 99, 70)  # another history and other draws
    b.sample(3)
    b.load_state_dict(state)
    assert_same_state(b.state_dict(), state)
    a.save(tmp_path / "a.rr")
    c = rr.load(tmp_path / "a.rr")
    assert_same_state(c.state_dict(), state)
    for k in range(5):  # the same calls give the same results on all three
        got = [x.sample(16) for x in (a, b, c)]
        for name in got[0]:
            for other in got[1:]:
                np.testing.assert_array_equal(other[name], got[0][name], err_msg=name)
        s = step(k % 2, 100 + k, done=k == 3)
        ids = [x.add(**s).tolist() for x in (a, b, c)]
        assert ids[0] == ids[1] == ids[2]
        if prioritized:
            for x in (a, b, c):
                assert isinstance(x, rr.PrioritizedReplayBuffer)
                x.update_priorities(got[0].ids, np.arange(16) + 1.0)
    assert_same_state(b.state_dict(), a.state_dict())
    assert_same_state(c.state_dict(), a.state_dict())
    c.close()


# ---------------------------------------------------------------------- imports
OPTIONAL = ["torch", "gymnasium", "pandas", "ray", "jax", "pyarrow", "minari"]


def test_the_core_imports_no_optional_library() -> None:
    """The core imports neither torch, gymnasium, pandas nor ray at import time.

    Every core module (all but the front-ends) imported into one fresh interpreter; see
    ``tests/test_imports.py`` for ``import rlreplay`` alone and a longer list of libraries.
    """
    code = (
        "import importlib, json, sys\n"
        f"for name in {core_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert "rlreplay.buffer.replay" in loaded and "rlreplay.distributed.service" in loaded
    found = sorted(m for m in loaded if m.split(".")[0] in OPTIONAL)
    assert found == []
    assert sorted(m for m in loaded if m.startswith(FRONT_ENDS)) == []


def imports_anywhere(path: Path, module: str) -> Iterator[tuple[str, list[str]]]:
    """``(imported module, names)`` of every import statement of the file, functions included
    (relative imports resolved against ``module``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            yield base, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []


def test_front_ends_use_only_the_public_api_and_the_core_imports_none() -> None:
    """A front-end uses only the core's public API; the core never imports a front-end.

    Statically: no core module imports ``rlreplay.compat`` anywhere (functions included);
    every core name a front-end imports comes from ``rlreplay`` or a core package and is in
    its ``__all__``. ``tests/compat/test_public_api_only.py`` also refuses private attributes
    of core objects; the fresh-interpreter test above checks that importing the whole core
    loads no front-end.
    """
    modules = {
        ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sorted((SRC / "rlreplay").rglob("*.py"))
    }
    front = {m for m in modules if m.startswith(FRONT_ENDS)}
    assert {"rlreplay.compat.reagent", "rlreplay.compat.alf.replay_buffer"} <= front
    for module, path in modules.items():
        for imported, names in imports_anywhere(path, module):
            targets = [imported, *(f"{imported}.{n}" for n in names)]
            if module not in front:
                assert not any(t.startswith(FRONT_ENDS) for t in targets), module
                continue
            if imported.startswith(FRONT_ENDS) or imported.split(".")[0] != "rlreplay":
                continue
            assert (SRC / imported.replace(".", "/") / "__init__.py").exists(), (
                f"{module} imports from {imported}, a leaf module of the core"
            )
            public = set(importlib.import_module(imported).__all__)
            assert set(names) <= public, f"{module}: {sorted(set(names) - public)} of {imported}"


# ---------------------------------------------------------------------- sharding
S, E, CAP = 3, 6, 120  # as ReplayService: env e lives in shard e % S as its local env e // S


def to_service(ref_ids: np.ndarray) -> np.ndarray:
    """The service's ids of the single buffer's (ids are ``t * envs + env`` in both)."""
    env, t = ref_ids % E, ref_ids // E
    k, local = env % S, env // S
    per_shard = np.array([len(range(j, E, S)) for j in range(S)])[k]
    return (t * per_shard + local) * S + k


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_sharded_service_samples_as_one_buffer(prioritized: bool) -> None:
    """A sharded service samples from exactly the distribution one buffer with all the data
    would.

    The service's draw without Ray: the shards (``rlreplay.distributed.shard.Shard``, what the
    service runs in its actors) hold the envs of one buffer; a batch is split by the shards'
    masses and merged (``rlreplay.distributed.split``). Every draw's probability is the single
    buffer's for that transition, and the draws follow it. ``tests/distributed/test_service.py``
    checks the same through a ``ReplayService`` on a local Ray.
    """
    alpha, beta = 0.7, 0.5
    options: dict[str, Any] = {"n_step": 2, "gamma": 0.9}
    ref: rr.ReplayBuffer
    if prioritized:
        options.update(alpha=alpha, beta=beta, stratified=False)
        ref = rr.PrioritizedReplayBuffer(CAP, FIELDS, num_envs=E, seed=0, **options)
    else:
        ref = rr.ReplayBuffer(CAP, FIELDS, num_envs=E, seed=0, **options)
    shards = [Shard(CAP // S, FIELDS, 2, prioritized, 10 + k, options) for k in range(S)]
    rng = np.random.default_rng(5)
    # Shards of unequal mass: envs of 30, 8, 14, 30, 5 and 12 steps (shard 0 holds the two
    # longest, whose 20-step rings overwrite; shard 1 the two shortest).
    for e, T in enumerate([30, 8, 14, 30, 5, 12]):
        done = rng.random(T) < 0.15
        values = {
            "obs": np.stack([np.full(T, e), np.arange(T)], axis=1).astype(np.float32),
            "action": np.arange(T),
            "reward": rng.normal(size=T).astype(np.float32),
            "terminated": done,
            "truncated": np.zeros(T, bool),
            "next_obs": np.stack([np.full(T, e), np.arange(1, T + 1)], axis=1).astype(np.float32),
        }
        ref.extend(env_id=e, **values)
        shards[e % S].extend([(e // S, values)])
    ref_ids = ref.sampleable_ids()
    law = np.full(ref_ids.shape[0], 1.0 / ref_ids.shape[0])
    if prioritized:
        assert isinstance(ref, rr.PrioritizedReplayBuffer)
        p = rng.gamma(0.5, 1.0, ref_ids.shape[0]) + 0.01
        ref.update_priorities(ref_ids, p)
        service_ids = to_service(ref_ids)
        for k, shard in enumerate(shards):
            mine = service_ids % S == k
            shard.update_priorities(pack_updates(service_ids[mine] // S, p[mine]))
        mass = (p + ref.eps) ** alpha
        law = mass / mass.sum()
    position = {int(i): j for j, i in enumerate(to_service(ref_ids))}
    assert sum(s.sizes()[1] for s in shards) == ref_ids.shape[0]
    expected_weights = dict(
        zip(to_service(ref_ids).tolist(), (law.min() / law) ** beta, strict=True)
    )

    counts = np.zeros(ref_ids.shape[0], np.int64)
    draws = np.random.default_rng(6)
    for _ in range(40):
        infos = [s.info() for s in shards]
        masses = [m for _, m, _, _ in infos]
        split = split_batch_size(512, masses, draws)
        parts = [
            (k, shards[k].buffer.sample(int(n)), masses[k], infos[k][2])
            for k, n in enumerate(split)
            if n
        ]
        batch = merge_batches(
            parts, S, draws, prioritized=prioritized, total_mass=float(sum(masses)),
            smallest_mass=min(low for _, _, low, _ in infos), beta=beta,
        )  # fmt: skip
        rows = np.array([position[int(i)] for i in batch.ids])  # only the buffer's transitions
        np.add.at(counts, rows, 1)
        if prioritized:  # each draw's probability and weight are the single buffer's
            np.testing.assert_allclose(batch.probabilities, law[rows], rtol=1e-12)
            want = np.array([expected_weights[int(i)] for i in batch.ids], np.float32)
            np.testing.assert_allclose(batch.weights, want, rtol=1e-6)
        # The contents are the single buffer's transitions of those ids.
        single = ref.get_transitions(ref_ids[rows])
        for name in ("obs", "action", "reward", "next_obs", "discount"):
            np.testing.assert_array_equal(batch[name], single[name], err_msg=name)
    assert stats.chisquare(counts, law * counts.sum()).pvalue > 1e-3
