"""The core's public pieces for front-ends: ``atomic``, ``stored_range``, ``rng``,
``PrioritizedReplayBuffer.sample_starts``; and the import graph (no cycles), of the core and of
the front-ends."""

from __future__ import annotations

import ast
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import rlreplay as rr

SRC = Path(__file__).resolve().parents[1] / "src"
FIELDS = {"obs": rr.Field((), np.float32)}


def steps(n: int, start: int = 0, every: int = 0) -> dict[str, Any]:
    """``n`` steps for ``extend``; an episode ends every ``every`` steps (0: never)."""
    c = np.arange(start, start + n)
    ends = (c % every == every - 1) if every else np.zeros(n, bool)
    return {
        "obs": c.astype(np.float32),
        "reward": np.zeros(n, np.float32),
        "terminated": ends,
        "truncated": np.zeros(n, bool),
        "next_obs": (c + 1).astype(np.float32),
    }


# ---------------------------------------------------------------------- imports
def import_time_nodes(tree: ast.Module) -> list[ast.AST]:
    """The statements that run when a module is imported: its body, and the bodies of its
    top-level ``if`` (``TYPE_CHECKING`` included), ``try``, ``with`` and classes, not of its
    functions. An import inside a function is deferred to the call: that is how the buffer's
    io methods load their optional libraries, and it is no cycle at import or type-check time."""
    nodes: list[ast.AST] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        nodes.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return nodes


def core_import_graph(*, front_ends: bool = False) -> dict[str, set[str]]:
    """Module -> the rlreplay modules it imports when imported or type-checked (TYPE_CHECKING
    imports included; imports deferred inside functions left out). The front-ends under
    ``rlreplay.compat`` are left out unless ``front_ends``."""
    mods: dict[str, Path] = {}
    for p in (SRC / "rlreplay").rglob("*.py"):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        if front_ends or ".compat" not in name:
            mods[name] = p
    graph: dict[str, set[str]] = {}
    for name, p in mods.items():
        deps: set[str] = set()
        for node in import_time_nodes(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in mods else node.module)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (``[a, b, ..., a]``), or None if it has none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for dep in sorted(graph[node]):
            cycle = visit(dep, [*path, node])
            if cycle is not None:
                return cycle
        done.add(node)
        return None

    for module in sorted(graph):
        cycle = visit(module, [])
        if cycle is not None:
            return cycle
    return None


def test_the_core_has_no_import_cycle() -> None:
    graph = core_import_graph()
    assert "rlreplay.buffer.replay" in graph and "rlreplay.transforms" in graph
    cycle = first_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_the_front_ends_have_no_import_cycle() -> None:
    """compat/ and distributed/ too: a helper module never imports its front module back."""
    graph = core_import_graph(front_ends=True)
    for module in (
        "rlreplay.compat.reagent.circular_replay_buffer",
        "rlreplay.compat.nnabla_rl.replay_buffer",
        "rlreplay.distributed.service",
    ):
        assert module in graph
    cycle = first_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_the_cycle_search_finds_a_cycle() -> None:
    assert first_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert first_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


@pytest.mark.parametrize("module", ["rlreplay.transforms", "rlreplay.buffer.replay", "rlreplay"])
def test_a_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, timeout=120)


def test_the_public_pieces_are_exported() -> None:
    for name in ("Atomic", "StoredRange", "PriorityStarts"):
        assert name in rr.__all__ and hasattr(rr, name)
    assert rr.__all__ == sorted(rr.__all__)


# ---------------------------------------------------------------------- atomic
def test_atomic_gives_the_buffer_and_is_reentrant() -> None:
    buf = rr.ReplayBuffer(16, FIELDS)
    with buf.atomic() as b:
        assert b is buf
        with buf.atomic():  # nested, and public calls inside take the lock again
            buf.extend(**steps(3))
            assert len(buf) == 3
        assert buf.stored_range().end.tolist() == [3]
    # Released: another thread gets in at once.
    t = threading.Thread(target=lambda: buf.extend(**steps(1, start=3)))
    t.start()
    t.join(5)
    assert not t.is_alive() and len(buf) == 4


def test_atomic_keeps_other_threads_out_until_it_ends() -> None:
    buf = rr.ReplayBuffer(16, FIELDS)
    entered, added = threading.Event(), threading.Event()

    def writer() -> None:
        entered.wait(5)
        buf.extend(**steps(2))
        added.set()

    t = threading.Thread(target=writer)
    t.start()
    with buf.atomic():
        before = buf.stored_range()
        entered.set()
        assert not added.wait(0.3)  # the writer waits for the lock
        assert buf.stored_range() == before  # nothing changed between the two reads
    assert added.wait(5)
    t.join()
    assert len(buf) == 2


def test_atomic_releases_the_lock_on_an_exception() -> None:
    buf = rr.ReplayBuffer(16, FIELDS)
    with pytest.raises(rr.InvalidIdError), buf.atomic():
        buf.get_field("obs", [5])  # never issued
    t = threading.Thread(target=lambda: buf.extend(**steps(1)))
    t.start()
    t.join(5)
    assert not t.is_alive() and len(buf) == 1


def test_a_blocking_wait_inside_atomic_lets_other_threads_in() -> None:
    """A blocking dequeue inside atomic() releases the lock while it waits (no deadlock)."""
    buf = rr.ReplayBuffer(16, FIELDS)
    t = threading.Timer(0.2, lambda: buf.extend(**steps(2)))
    t.start()
    with buf.atomic():
        got = buf.dequeue(2, block=True, timeout=10)
        assert got.obs.tolist() == [[0.0, 1.0]]
        assert buf.stored_range().first.tolist() == [2]  # still held after the wait
    t.join()


def test_atomic_neither_checks_nor_changes_closed() -> None:
    buf = rr.ReplayBuffer(16, FIELDS)
    buf.close()
    with buf.atomic(), pytest.raises(rr.ReplayClosed):
        buf.stored_range()


# ---------------------------------------------------------------------- stored_range
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 2), st.integers(1, 9)),
        st.tuples(st.just("dequeue"), st.integers(0, 2), st.integers(1, 4)),
        st.tuples(st.just("clear"), st.just(0), st.just(0)),
        st.tuples(st.just("lockstep"), st.just(0), st.integers(1, 7)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_stored_range_follows_a_slow_reference(program: list[tuple[str, int, int]]) -> None:
    """Reference: per env, steps ever added and the oldest step not overwritten/removed."""
    E, C = 3, 6
    buf = rr.ReplayBuffer(E * C, FIELDS, num_envs=E)
    added, removed = [0] * E, [0] * E  # removed: steps before it were dequeued or cleared
    for op, env, n in program:
        if op == "add":
            buf.extend(env_id=env, **steps(n, start=added[env]))
            added[env] += n
        elif op == "lockstep":  # the per-step fast path, all envs at once
            for _ in range(n):
                buf.add(obs=np.zeros(E, np.float32), reward=np.zeros(E, np.float32),
                        terminated=np.zeros(E, bool), truncated=np.zeros(E, bool))  # fmt: skip
                added = [a + 1 for a in added]
        elif op == "dequeue":
            if added[env] - max(removed[env], added[env] - C) >= n:
                buf.dequeue(n, [env])
                removed[env] = max(removed[env], added[env] - C) + n
        else:
            buf.clear()
            removed = list(added)
        first = [max(removed[e], added[e] - C) for e in range(E)]
        r = buf.stored_range()
        assert r.first.tolist() == first and r.end.tolist() == added
        assert r.first.dtype == np.int64 and r.end.dtype == np.int64
        assert int((r.end - r.first).sum()) == len(buf)


def test_stored_range_gives_copies_and_ids_of_the_stored_steps() -> None:
    buf = rr.ReplayBuffer(8, FIELDS, num_envs=2)
    for t in range(6):
        buf.add(obs=np.full(2, t, np.float32), reward=np.zeros(2, np.float32),
                terminated=np.zeros(2, bool), truncated=np.zeros(2, bool))  # fmt: skip
    first, end = buf.stored_range()
    assert first.tolist() == [2, 2] and end.tolist() == [6, 6]
    first[:] = 99
    assert buf.stored_range().first.tolist() == [2, 2]
    ids = np.arange(2, 6) * 2 + 1  # env 1: id = t * num_envs + env
    assert buf.get_field("obs", ids).tolist() == [2.0, 3.0, 4.0, 5.0]


# ---------------------------------------------------------------------- rng
def test_rng_is_the_generator_the_checkpoint_restores() -> None:
    buf = rr.ReplayBuffer(32, FIELDS, seed=3)
    buf.extend(**steps(10, every=4))
    assert buf.rng is buf.rng
    state = buf.state_dict()
    first = buf.rng.random(4)
    other = rr.ReplayBuffer(32, FIELDS, seed=3)
    other.load_state_dict(state)
    np.testing.assert_array_equal(other.rng.random(4), first)


# ---------------------------------------------------------------------- sample_starts
def reference_probabilities(
    buf: rr.PrioritizedReplayBuffer, first: np.ndarray, end: np.ndarray
) -> dict[int, float]:
    """Id -> P of every allowed start, by a loop over the sampleable ids (exact ranks)."""
    ids = buf.sampleable_ids()
    p = buf.get_priorities(ids)
    if buf.variant == "proportional":
        m = np.where(p > 0, p**buf.alpha, 0.0)
    else:
        rank = 1 + (p[None, :] > p[:, None]).sum(1)
        m = np.where(p > 0, rank.astype(float) ** -buf.alpha, 0.0)
    allowed = {}
    for i, mass in zip(ids.tolist(), m.tolist(), strict=True):
        env, t = i % buf.num_envs, i // buf.num_envs
        if first[env] <= t < end[env]:
            allowed[i] = mass
    total = sum(allowed.values())
    return {i: mass / total for i, mass in allowed.items() if mass > 0}


def prioritized(variant: str = "proportional", **kw: Any) -> rr.PrioritizedReplayBuffer:
    if variant == "rank_based":
        kw["sort_interval"] = 1  # exact ranks, as the reference computes them
    buf = rr.PrioritizedReplayBuffer(
        40, FIELDS, num_envs=2, alpha=0.7, variant=variant, seed=1, **kw
    )
    rng = np.random.default_rng(0)
    for env in (0, 1):
        ids = buf.extend(env_id=env, **steps(17 + 5 * env, every=6))
        buf.update_priorities(ids, rng.uniform(0.1, 3.0, ids.shape[0]))
    buf.update_priorities(buf.sampleable_ids()[:3], [0.0, 0.0, 0.0])  # never drawn
    return buf


@pytest.mark.parametrize("variant", ["proportional", "rank_based"])
@pytest.mark.parametrize("stratified", [True, False])
def test_sample_starts_follows_the_reference_law(variant: str, stratified: bool) -> None:
    buf = prioritized(variant, stratified=stratified)
    first, end = np.array([4, 9]), np.array([15, 19])
    expected = reference_probabilities(buf, first, end)
    s = buf.sample_starts(20000, first, end)
    assert s.candidates == len(expected)
    np.testing.assert_array_equal(s.ids, s.steps * 2 + s.env_ids)
    for i, p in zip(s.ids.tolist()[:200], s.probabilities.tolist()[:200], strict=True):
        assert p == pytest.approx(expected[i], rel=1e-9)
    keys = sorted(expected)
    counts = np.array([np.count_nonzero(s.ids == k) for k in keys])
    assert counts.sum() == 20000  # every draw is an allowed start with mass > 0
    chi2 = stats.chisquare(counts, 20000 * np.array([expected[k] for k in keys]))
    assert chi2.pvalue > 1e-4


def test_sample_starts_uses_the_exact_fallback_when_bounds_hold_little_mass() -> None:
    """One allowed start of tiny mass: rejection rounds fail, the exact draw finds it."""
    buf = rr.PrioritizedReplayBuffer(64, FIELDS, alpha=1.0, eps=0.0, seed=0)
    ids = buf.extend(**steps(40))
    p = np.full(ids.shape[0], 1e6)
    p[20] = 1e-6
    buf.update_priorities(ids, p)
    s = buf.sample_starts(5, [20], [21])
    assert s.steps.tolist() == [20] * 5 and s.candidates == 1
    np.testing.assert_allclose(s.probabilities, 1.0)


def test_sample_starts_does_not_advance_beta_and_reproduces_after_a_checkpoint(
    tmp_path: Path,
) -> None:
    buf = prioritized(beta=0.4, beta_final=1.0, beta_steps=10)
    first, end = np.array([0, 0]), np.array([100, 100])
    buf.save(tmp_path / "b.rr")
    a = buf.sample_starts(64, first, end)
    assert buf.beta == pytest.approx(0.4)
    loaded = rr.load(tmp_path / "b.rr")
    assert isinstance(loaded, rr.PrioritizedReplayBuffer)
    b = loaded.sample_starts(64, first, end)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.probabilities, b.probabilities)


def test_sample_starts_errors() -> None:
    buf = prioritized(eps=0.0)
    with pytest.raises(rr.ShapeError):
        buf.sample_starts(4, [0], [10])  # one bound per env
    with pytest.raises(rr.ShapeError):
        buf.sample_starts(4, [0.0, 0.0], [10, 10])  # not integers
    with pytest.raises(rr.ConfigError):
        buf.sample_starts(0, [0, 0], [10, 10])
    with pytest.raises(rr.EmptyBufferError):
        buf.sample_starts(4, [30, 30], [40, 40])  # nothing stored there
    with pytest.raises(rr.EmptyBufferError):
        buf.sample_starts(4, [0, 0], [3, 0])  # only the priority-0 starts
    buf.close()
    with pytest.raises(rr.ReplayClosed):
        buf.sample_starts(4, [0, 0], [10, 10])


# ---------------------------------------------------------------------- config
def test_config_is_the_checkpointed_configuration() -> None:
    import json

    for cls, kw in ((rr.ReplayBuffer, {"n_step": 3}), (rr.PrioritizedReplayBuffer, {"alpha": 0.5})):
        buf = cls(16, FIELDS, seed=1, **kw)
        config = buf.config()
        assert json.loads(json.dumps(config)) == config == buf.state_dict()["config"]
        assert config is not buf.config()  # a fresh dict each call
        twin = cls(16, FIELDS, seed=1, **kw)
        assert twin.config() == config
        assert cls(16, FIELDS, seed=2, **kw).config() != config


def test_version_is_the_installed_metadata() -> None:
    from importlib.metadata import version

    assert rr.__version__ == version("rlreplay")
    assert "__version__" in rr.__all__
