"""Random operation sequences (Hypothesis) against a slow model of prioritized replay.

The model keeps a plain dict ``id -> priority`` of every id ever issued, decides staleness
from per-env counters, and recomputes ``P(i)`` from scratch over ``buf.sampleable_ids()``
(which the core's own reference tests pin down). A twin that is never saved or loaded must
give the same samples as the buffer under test, which goes through save/load round trips.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from tests.test_prioritized import FIELDS, assert_same_state, check_trees, full_state

Config = dict[str, Any]


class Model:
    """Priorities by id, the max-priority rule and staleness, recomputed the slow way."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.E = cfg["num_envs"]
        self.C = cfg["capacity"] // self.E
        self.prio: dict[int, float] = {}
        self.count = [0] * self.E
        self.head = [0] * self.E
        self.max_p = 0.0

    def added(self, ids: np.ndarray) -> None:
        for i in ids.tolist():
            e, t = i % self.E, i // self.E
            assert t == self.count[e]
            self.count[e] = t + 1
            self.head[e] = max(self.head[e], t + 1 - self.C)
            self.prio[i] = max(self.cfg["initial_priority"], self.max_p)

    def stale(self, i: int) -> bool:
        return i // self.E < self.head[i % self.E]

    def update(self, ids: list[int], values: list[float]) -> int:
        ignored = 0
        applied: dict[int, float] = {}
        for i, v in zip(ids, values, strict=True):
            if self.stale(i):
                ignored += 1
                continue
            clip = self.cfg["priority_clip"]
            if clip is not None:
                v = min(max(v, clip[0]), clip[1])
            applied[i] = v + self.cfg["eps"]  # a later duplicate replaces an earlier one
        self.prio.update(applied)
        # Only priorities that took effect count for the maximum.
        self.max_p = max([self.max_p, *applied.values()])
        return ignored

    def clear(self) -> None:
        self.head = list(self.count)

    def law(self, ids: list[int], ranks: dict[int, int] | None) -> dict[int, float]:
        """``P(i)`` over ``ids``; ``ranks`` overrides exact ranks (rank-based, stale ranks)."""
        alpha = self.cfg["alpha"]
        p = {i: self.prio[i] for i in ids}
        mass: dict[int, float] = {}
        for i, v in p.items():
            if v <= 0:
                mass[i] = 0.0
            elif self.cfg["variant"] == "proportional":
                mass[i] = v**alpha
            else:
                rank = ranks[i] if ranks is not None else 1 + sum(w > v for w in p.values())
                mass[i] = float(rank) ** -alpha
        total = math.fsum(mass.values())
        return {i: m / total for i, m in mass.items()} if total > 0 else {}


@st.composite
def configs(draw: st.DrawFn) -> Config:
    n = draw(st.integers(1, 3))
    k = draw(st.integers(1, 3))
    envs = draw(st.integers(1, 3))
    per_env = draw(st.integers(n + k, n + k + 6))
    variant = draw(st.sampled_from(["proportional", "rank_based"]))
    return {
        "num_envs": envs,
        "n_step": n,
        "frame_stack": k,
        "capacity": per_env * envs + draw(st.integers(0, envs - 1)),
        "variant": variant,
        "alpha": draw(st.sampled_from([0.0, 0.5, 1.0])),
        "beta": draw(st.sampled_from([0.0, 0.4, 1.0])),
        "beta_steps": draw(st.sampled_from([0, 3])),
        "eps": draw(st.sampled_from([0.0, 1e-3])),
        "initial_priority": draw(st.sampled_from([1.0, 2.0])),
        "priority_clip": draw(st.sampled_from([None, (0.1, 2.5)])),
        "stratified": draw(st.booleans()),
        "sort_interval": (draw(st.sampled_from([1, 3, None])) if variant == "rank_based" else None),
    }


PRIORITIES = st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 3.0, 7.5])


def op_lists(envs: int) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    flags = st.sampled_from([(False, False)] * 4 + [(True, False), (False, True)])
    add = st.tuples(
        st.just("add"),
        st.lists(st.booleans(), min_size=envs, max_size=envs),
        st.lists(flags, min_size=envs, max_size=envs),
    )
    extend = st.tuples(st.just("extend"), st.integers(0, envs - 1), st.lists(flags, max_size=10))
    update = st.tuples(
        st.just("update"),
        st.lists(st.tuples(st.integers(0, 10_000), PRIORITIES), min_size=1, max_size=12),
    )
    other = st.tuples(
        st.sampled_from(
            ["sample"] * 4 + ["sequences", "save_load", "state_load", "clear", "bad_update"]
        )
    )
    ops = st.one_of(add, add, add, extend, update, update, other, other)
    return st.lists(ops, min_size=12, max_size=50)


class Run:
    def __init__(self, cfg: Config, tmp: Path) -> None:
        self.cfg = cfg
        kw = {k: v for k, v in cfg.items() if k != "capacity"}
        self.kw = kw
        self.buf = rr.PrioritizedReplayBuffer(cfg["capacity"], FIELDS, seed=5, **kw)
        self.twin = rr.PrioritizedReplayBuffer(cfg["capacity"], FIELDS, seed=5, **kw)
        self.model = Model(cfg)
        self.tmp = tmp
        self.c = 0
        self.saves = 0
        self.last_sample: list[int] = []

    def values(self, flags: list[tuple[bool, bool]]) -> dict[str, Any]:
        c = np.arange(self.c, self.c + len(flags))
        self.c += len(flags)
        return {
            "obs": np.stack([c, -c], 1).astype(np.float32),
            "action": c,
            "reward": np.ones(len(flags), np.float32),
            "terminated": np.array([f[0] for f in flags]),
            "truncated": np.array([f[1] for f in flags]),
            "next_obs": np.zeros((len(flags), 2), np.float32),
        }

    def both(self, method: str, *args: Any, **kw: Any) -> Any:
        out = getattr(self.buf, method)(*args, **kw)
        np.testing.assert_array_equal(out, getattr(self.twin, method)(*args, **kw))
        return out

    def run(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "add":
            envs = [e for e, on in enumerate(op[1]) if on]
            if envs:
                v = self.values([op[2][e] for e in envs])
                self.model.added(self.both("add", env_ids=np.array(envs), **v))
        elif kind == "extend":
            if op[2]:
                self.model.added(self.both("extend", env_id=op[1], **self.values(op[2])))
        elif kind == "update":
            issued = sum(self.model.count)
            if issued == 0:
                return
            # Mostly ids just sampled (the usual use), also any id ever issued (stale ones).
            everything = sorted(self.model.prio)
            pool = self.last_sample or everything
            ids = [pool[j % len(pool)] if j % 3 else everything[j % issued] for j, _ in op[1]]
            values = [v for _, v in op[1]]
            got = self.both("update_priorities", np.array(ids), np.array(values))
            assert got == self.model.update(ids, values)
        elif kind == "bad_update":
            if not self.model.prio:
                return
            before = full_state(self.buf)
            ids = np.array(sorted(self.model.prio)[:2])
            bad = [math.nan, -1.0, math.inf][len(self.model.prio) % 3]
            with pytest.raises(rr.PriorityError):
                self.buf.update_priorities(ids, np.array([bad, 1.0])[: ids.size])
            assert_same_state(full_state(self.buf), before)
        elif kind == "sample":
            self.sample()
        elif kind == "sequences":
            self.sequences()
        elif kind == "save_load":
            path = self.tmp / f"ckpt-{self.saves}"
            self.saves += 1
            self.buf.save(path)
            loaded = rr.load(path)
            assert isinstance(loaded, rr.PrioritizedReplayBuffer)
            self.buf = loaded
        elif kind == "state_load":
            fresh = rr.PrioritizedReplayBuffer(self.cfg["capacity"], FIELDS, seed=5, **self.kw)
            fresh.load_state_dict(self.buf.state_dict())
            self.buf = fresh
        elif kind == "clear":
            self.both("clear")
            self.model.clear()
        self.check()

    def sample(self) -> None:
        ids = self.buf.sampleable_ids().tolist()
        positive = [i for i in ids if self.model.prio[i] > 0]
        if not positive:
            with pytest.raises(rr.EmptyBufferError):
                self.buf.sample(4)
            with pytest.raises(rr.EmptyBufferError):
                self.twin.sample(4)
            return
        beta = self.buf.beta
        b = self.buf.sample(12)
        tb = self.twin.sample(12)
        for name in b:
            np.testing.assert_array_equal(b[name], tb[name], err_msg=name)
        self.last_sample = b.ids.tolist()
        exact = self.cfg["variant"] == "proportional" or self.cfg["sort_interval"] == 1
        law = self.model.law(ids, None if exact else self.used_ranks(ids))
        assert set(b.ids.tolist()) <= set(positive)
        expected = np.array([law[i] for i in b.ids.tolist()])
        np.testing.assert_allclose(b.probabilities, expected, rtol=1e-9)
        p_min = min(p for p in law.values() if p > 0)
        np.testing.assert_allclose(b.weights, (p_min / expected) ** beta, rtol=1e-5)

    def sequences(self) -> None:
        """Prioritized sequence starts: the law of ``sample`` (pad) or restricted to full runs."""
        ids = self.buf.sampleable_ids().tolist()
        length = 1 + self.c % 3
        pad = self.c % 2 == 0
        try:
            b = self.buf.sample_sequences(5, length, pad=pad)
        except rr.EmptyBufferError:
            with pytest.raises(rr.EmptyBufferError):
                self.twin.sample_sequences(5, length, pad=pad)
            return
        tb = self.twin.sample_sequences(5, length, pad=pad)
        for name in b:
            np.testing.assert_array_equal(b[name], tb[name], err_msg=name)
        exact = self.cfg["variant"] == "proportional" or self.cfg["sort_interval"] == 1
        law = self.model.law(ids, None if exact else self.used_ranks(ids))
        assert all(law[i] > 0 for i in b.ids.tolist())
        if pad:
            expected = [law[i] for i in b.ids.tolist()]
            np.testing.assert_allclose(b.probabilities, expected, rtol=1e-9)
        else:
            assert b.mask.all()
            ratio = b.probabilities / np.array([law[i] for i in b.ids.tolist()])
            np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)  # P renormalised

    def used_ranks(self, ids: list[int]) -> dict[int, int]:
        env, t, _ = self.buf._index.split_ids(np.array(ids, np.int64))
        ranks = self.buf._prios.rank[self.buf._index.slots(env, t)]
        return dict(zip(ids, ranks.tolist(), strict=True))

    def check(self) -> None:
        ids = self.buf.sampleable_ids()
        np.testing.assert_array_equal(ids, self.twin.sampleable_ids())
        if ids.size:
            got = self.buf.get_priorities(ids)
            np.testing.assert_array_equal(got, [self.model.prio[i] for i in ids.tolist()])
        check_trees(self.buf)
        if self.cfg["variant"] == "rank_based" and ids.size:
            used = self.used_ranks(ids.tolist())
            p = [self.model.prio[i] for i in ids.tolist()]
            for i, v in zip(ids.tolist(), p, strict=True):
                if v > 0:
                    exact = 1 + sum(w > v for w in p)
                    assert abs(used[i] - exact) <= self.buf._prios.changes


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_operation_sequences(data: st.DataObject, tmp_path: Path) -> None:
    cfg = data.draw(configs())
    run = Run(cfg, tmp_path)
    for op in data.draw(op_lists(cfg["num_envs"])):
        run.run(op)
