"""Random operation sequences (Hypothesis) against the slow reference model."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.sampling import UniformSampler
from tests.reference import RefBuffer, assert_batch_matches

Config = dict[str, Any]


class TrackingSampler(UniformSampler):
    """Keeps the sampleable set incrementally from the write hook (checked against the index)."""

    tracks_sampleable = True

    def __init__(self) -> None:
        super().__init__()
        self.tracked: set[int] = set()

    def on_write(
        self, index: Any, rows_env: Any, rows_t: Any, re: Any, rt: Any, ae: Any, at: Any
    ) -> None:
        for i in index.ids(re, rt).tolist():
            self.tracked.remove(i)  # must have been sampleable
        for i in index.ids(ae, at).tolist():
            assert i not in self.tracked
            self.tracked.add(i)


class Tracking(rr.ReplayBuffer):
    """A buffer whose sampler tracks the sampleable set."""

    sampler_class = TrackingSampler
    _sampler: TrackingSampler

    @property
    def tracked(self) -> set[int]:
        return self._sampler.tracked

    @tracked.setter
    def tracked(self, value: set[int]) -> None:
        self._sampler.tracked = value


@st.composite
def configs(draw: st.DrawFn) -> Config:
    n = draw(st.integers(1, 4))
    k = draw(st.integers(1, 4))
    envs = draw(st.integers(1, 3))
    per_env = draw(st.integers(n + k, n + k + 6))
    return {
        "num_envs": envs,
        "n_step": n,
        "frame_stack": k,
        "capacity": per_env * envs + draw(st.integers(0, envs - 1)),
        "stack_pad": draw(st.sampled_from(["zero", "first"])),
        "gamma": draw(st.sampled_from([0.0, 0.5, 0.9, 1.0])),
        "goal": draw(st.booleans()),
    }


def op_lists(envs: int) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    flags = st.sampled_from([(False, False)] * 4 + [(True, False), (False, True), (True, True)])
    add = st.tuples(
        st.just("add"),
        st.lists(st.booleans(), min_size=envs, max_size=envs),
        st.lists(flags, min_size=envs, max_size=envs),
    )
    extend = st.tuples(st.just("extend"), st.integers(0, envs - 1), st.lists(flags, max_size=12))
    other = st.tuples(st.sampled_from(["sample", "save_load", "clear"]))
    end = st.tuples(st.just("end"), st.integers(0, envs - 1))
    return st.lists(st.one_of(add, add, add, extend, other, end), min_size=1, max_size=60)


class Pair:
    """The buffer under test, its reference, and a twin that is never saved.

    The buffer tracks the sampleable set from the write hook, so it always takes the general
    write path; the twin takes the per-step fast path wherever it applies."""

    def __init__(self, cfg: Config, tmp: Path) -> None:
        fields = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}
        if cfg["goal"]:
            fields["goal"] = rr.Field((3,), np.int32, observation=True)
        kw = {k: v for k, v in cfg.items() if k not in ("capacity", "goal")}
        self.buf: rr.ReplayBuffer = Tracking(cfg["capacity"], fields, seed=7, **kw)
        self.twin = rr.ReplayBuffer(cfg["capacity"], fields, seed=7, **kw)
        self.ref = RefBuffer(
            num_envs=cfg["num_envs"],
            env_capacity=cfg["capacity"] // cfg["num_envs"],
            n_step=cfg["n_step"],
            gamma=cfg["gamma"],
            frame_stack=cfg["frame_stack"],
            zero_pad=cfg["stack_pad"] == "zero",
            observation_names=tuple(n for n, f in self.buf.schema.fields.items() if f.observation),
        )
        self.goal = cfg["goal"]
        self.tmp = tmp
        self.counter = itertools.count(1)
        self.saves = 0

    def step_values(self, term: bool, trunc: bool) -> dict[str, Any]:
        c = next(self.counter)
        v: dict[str, Any] = {
            "obs": np.array([c, -c], np.float32),
            "action": c,
            "reward": float(c % 7) - 3.0,
            "terminated": term,
            "truncated": trunc,
            "next_obs": np.array([c + 0.5, -c - 0.5], np.float32),
        }
        if self.goal:
            v["goal"] = np.array([c, c + 1, c + 2], np.int32)
            v["next_goal"] = -v["goal"]
        return v

    def both(self, method: str, **kw: Any) -> Any:
        out = getattr(self.buf, method)(**kw)
        twin = getattr(self.twin, method)(**kw)
        np.testing.assert_array_equal(out, twin)
        return out

    def run(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "add":
            envs = [e for e, on in enumerate(op[1]) if on]
            if not envs:
                return
            steps = [self.step_values(*op[2][e]) for e in envs]
            if self.ref.num_envs == 1:  # unbatched: the per-step fast path
                ids = self.both("add", **steps[0])
            else:
                batched = {k: np.stack([np.asarray(s[k]) for s in steps]) for k in steps[0]}
                if len(envs) == self.ref.num_envs:  # every env: the lockstep fast path (twin)
                    batched["reward"] = batched["reward"].astype(np.float32)
                    ids = self.both("add", **batched)
                else:
                    ids = self.both("add", env_ids=np.array(envs), **batched)
            expected = [self.ref.add(e, s) for e, s in zip(envs, steps, strict=True)]
            assert ids.tolist() == expected
        elif kind == "extend":
            env, flags = op[1], op[2]
            steps = [self.step_values(*f) for f in flags]
            if not steps:
                return
            batched = {k: np.stack([np.asarray(s[k]) for s in steps]) for k in steps[0]}
            ids = self.both("extend", env_id=env, **batched)
            assert ids.tolist() == [self.ref.add(env, s) for s in steps]
        elif kind == "sample":
            if not self.ref.sampleable_ids():
                return
            b = self.buf.sample(16)
            tb = self.twin.sample(16)
            for name in b:
                np.testing.assert_array_equal(b[name], tb[name], err_msg=name)
            assert_batch_matches(b, self.ref)
        elif kind == "save_load":
            path = self.tmp / f"ckpt-{self.saves}"
            self.saves += 1
            self.buf.save(path)
            self.buf = rr.load(path)
            assert isinstance(self.buf, Tracking)
            self.buf.tracked = set(self.buf.sampleable_ids().tolist())
        elif kind == "end":
            env = op[1]
            v = self.step_values(False, False)
            final = {k: v[k] for k in v if k.startswith("next_")}
            if self.ref.end(env, final):
                ids = self.both("end_episode", env_id=env, **final)
                assert ids.tolist() == [(len(self.ref.history[env]) - 1) * self.ref.num_envs + env]
            else:
                for b in (self.buf, self.twin):
                    with pytest.raises(rr.InvalidIdError):
                        b.end_episode(env_id=env, **final)
        elif kind == "clear":
            self.both("clear")
            self.ref.clear()
        self.check()

    def check(self) -> None:
        expected = self.ref.sampleable_ids()
        got = sorted(self.buf.sampleable_ids().tolist())
        assert got == expected
        assert isinstance(self.buf, Tracking)
        assert sorted(self.buf.tracked) == expected
        assert self.buf.num_sampleable == len(expected)
        assert sorted(self.twin.sampleable_ids().tolist()) == expected  # took the fast path
        assert len(self.twin) == len(self.buf)
        stored = sum(len(h) - self.ref.oldest_stored(e) for e, h in enumerate(self.ref.history))
        assert len(self.buf) == stored
        if expected:
            assert_batch_matches(self.buf.get_transitions(np.array(expected)), self.ref)
        stored = np.array(self.ref.stored_ids(), np.int64)
        E = self.ref.num_envs
        begin = [self.ref.episode_start(i % E, i // E) * E + i % E for i in stored.tolist()]
        to_end = [self.ref.steps_to_end(i % E, i // E) for i in stored.tolist()]
        assert self.buf.episode_begin(stored).tolist() == begin
        assert self.buf.steps_to_episode_end(stored).tolist() == to_end
        if stored.size:
            np.testing.assert_array_equal(
                self.buf.get_field("obs", stored),
                [self.ref.history[i % E][i // E].values["obs"] for i in stored.tolist()],
            )


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_operation_sequences(data: st.DataObject, tmp_path: Path) -> None:
    cfg = data.draw(configs())
    pair = Pair(cfg, tmp_path)
    for op in data.draw(op_lists(cfg["num_envs"])):
        pair.run(op)


def test_long_run_past_capacity_many_times(tmp_path: Path) -> None:
    """Fill a small buffer ~30 times over with mixed episode lengths; check throughout."""
    rng = np.random.default_rng(3)
    cfg = {
        "num_envs": 3,
        "n_step": 3,
        "frame_stack": 4,
        "capacity": 3 * 17,
        "stack_pad": "zero",
        "gamma": 0.9,
        "goal": True,
    }
    pair = Pair(cfg, tmp_path)
    for i in range(500):
        flags = [(bool(rng.random() < 0.08), bool(rng.random() < 0.05)) for _ in range(3)]
        pair.run(("add", [bool(x) for x in rng.random(3) < 0.8], flags))
        if i % 25 == 0:
            pair.run(("sample",))
        if i % 97 == 0:
            pair.run(("save_load",))
