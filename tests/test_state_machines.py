"""Hypothesis state machines: buffers of every storage against the reference model.

:class:`BufferMachine` drives one buffer and :class:`tests.reference.RefBuffer` with rules for
``add`` (every env or some, ``next_<obs>=None`` on steps that do not end), ``extend``,
``end_episode``, ``abandon_episode``, ``dequeue`` and ``add`` in FIFO mode (blocking with
``timeout=0``: a call that cannot proceed at once raises ``ReplayTimeout`` and changes nothing),
``sample``, ``clear`` and a save/load round trip; after every rule the stored and sampleable ids,
``len``, every sampleable transition, ``gather_all`` and the episode queries match the reference.
It runs on memory storage and on memmap storage (reloaded into a new directory each time).
``test_against_reference.py`` covers the general and fast write paths in depth; these machines add
memmap storage, FIFO calls and their timeouts, and ``None`` inputs to the same sequences.

The default run takes a few dozen sequences per storage; ``-m slow`` takes 10^4.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import rlreplay as rr
from tests.machines import run_machine, run_machine_long
from tests.reference import RefBuffer, assert_batch_matches

FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}
FLAGS = st.sampled_from([(False, False)] * 4 + [(True, False), (False, True)])


class BufferMachine(RuleBasedStateMachine):
    storage = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="rlreplay-sm-"))
        self.counter = itertools.count(1)
        self.loads = 0
        self.buf: rr.ReplayBuffer | None = None

    @initialize(
        envs=st.integers(1, 3),
        n_step=st.integers(1, 3),
        stack=st.integers(1, 2),
        extra=st.integers(0, 4),
        gamma=st.sampled_from([0.0, 0.5, 1.0]),
    )
    def build(self, envs: int, n_step: int, stack: int, extra: int, gamma: float) -> None:
        per_env = n_step + stack + extra
        kw: dict[str, Any] = {"num_envs": envs, "n_step": n_step, "frame_stack": stack}
        if self.storage == "memmap":
            kw.update(storage="memmap", path=self.tmp / "store-0")
        self.buf = rr.ReplayBuffer(per_env * envs, FIELDS, gamma=gamma, seed=5, **kw)
        self.ref = RefBuffer(envs, per_env, n_step, gamma, stack, True, ("obs",))

    def teardown(self) -> None:
        if self.buf is not None:
            self.buf.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ---------------------------------------------------------------- helpers
    @property
    def b(self) -> rr.ReplayBuffer:
        assert self.buf is not None
        return self.buf

    def values(self, flags: tuple[bool, bool]) -> dict[str, Any]:
        c = next(self.counter)
        return {
            "obs": np.array([c, -c], np.float32),
            "action": c,
            "reward": float(c % 5) - 2.0,
            "terminated": flags[0],
            "truncated": flags[1],
            "next_obs": np.array([c + 0.5, -c], np.float32),
        }

    def stored(self, env: int) -> int:
        return len(self.ref.history[env]) - self.ref.oldest_stored(env)

    def batched(self, steps: list[dict[str, Any]], none_next: bool) -> dict[str, Any]:
        out = {k: np.stack([np.asarray(s[k]) for s in steps]) for k in steps[0]}
        out["reward"] = out["reward"].astype(np.float32)
        if none_next and not any(s["terminated"] or s["truncated"] for s in steps):
            out["next_obs"] = None  # not given: no step of the call ends
        return out

    # ---------------------------------------------------------------- rules
    @rule(data=st.data(), none_next=st.booleans())
    def add(self, data: st.DataObject, none_next: bool) -> None:
        E = self.ref.num_envs
        envs = data.draw(st.lists(st.integers(0, E - 1), min_size=1, max_size=E, unique=True))
        steps = [self.values(data.draw(FLAGS)) for _ in envs]
        if E == 1:
            v = dict(steps[0])
            if none_next and not (v["terminated"] or v["truncated"]):
                v["next_obs"] = None
            ids = self.b.add(**v)
        elif len(envs) == E and envs == sorted(envs):
            ids = self.b.add(**self.batched(steps, none_next))
        else:
            ids = self.b.add(env_ids=np.array(envs), **self.batched(steps, none_next))
        assert ids.tolist() == [self.ref.add(e, s) for e, s in zip(envs, steps, strict=True)]

    @rule(env=st.integers(0, 2), flags=st.lists(FLAGS, min_size=1, max_size=8), data=st.data())
    def extend(self, env: int, flags: list[tuple[bool, bool]], data: st.DataObject) -> None:
        env %= self.ref.num_envs
        steps = [self.values(f) for f in flags]
        ids = self.b.extend(env_id=env, **self.batched(steps, data.draw(st.booleans())))
        assert ids.tolist() == [self.ref.add(env, s) for s in steps]

    @rule(env=st.integers(0, 2))
    def end_episode(self, env: int) -> None:
        env %= self.ref.num_envs
        final = {"next_obs": self.values((False, False))["next_obs"]}
        if self.ref.end(env, final):
            self.b.end_episode(env_id=env, **final)
        else:
            with pytest.raises(rr.InvalidIdError):
                self.b.end_episode(env_id=env, **final)

    @rule(env=st.integers(0, 2))
    def abandon_episode(self, env: int) -> None:
        env %= self.ref.num_envs
        t = self.ref.abandon(env)
        ids = self.b.abandon_episode(env_id=env)
        assert ids.tolist() == ([] if t < 0 else [t * self.ref.num_envs + env])

    @rule(n=st.integers(1, 4), block=st.booleans(), data=st.data())
    def dequeue(self, n: int, block: bool, data: st.DataObject) -> None:
        E = self.ref.num_envs
        envs = data.draw(st.lists(st.integers(0, E - 1), min_size=1, max_size=E, unique=True))
        n = min(n, self.ref.env_capacity)
        if min(self.stored(e) for e in envs) < n:
            error = rr.ReplayTimeout if block else rr.EmptyBufferError
            with pytest.raises(error):
                self.b.dequeue(n, env_ids=envs, block=block, timeout=0 if block else None)
            return
        out = self.b.dequeue(n, env_ids=envs, block=block, timeout=0 if block else None)
        for row, e in enumerate(envs):
            lo = self.ref.oldest_stored(e)
            assert out.ids[row].tolist() == [s * E + e for s in range(lo, lo + n)]
            assert out.obs[row].tolist() == [
                self.ref.history[e][s].values["obs"].tolist() for s in range(lo, lo + n)
            ]
            self.ref.cleared_at[e] = lo + n

    @rule(env=st.integers(0, 2), flags=FLAGS)
    def add_blocking_without_waiting(self, env: int, flags: tuple[bool, bool]) -> None:
        env %= self.ref.num_envs
        step = self.values(flags)
        values = self.batched([step], none_next=False)
        if self.stored(env) + 1 > self.ref.env_capacity:  # full: it would have to wait
            with pytest.raises(rr.ReplayTimeout):
                self.b.add(env_ids=[env], block=True, timeout=0, **values)
            return
        ids = self.b.add(env_ids=[env], block=True, timeout=0, **values)
        assert ids.tolist() == [self.ref.add(env, step)]

    @precondition(lambda self: bool(self.ref.sampleable_ids()))
    @rule()
    def sample(self) -> None:
        assert_batch_matches(self.b.sample(8), self.ref)

    @rule()
    def clear(self) -> None:
        self.b.clear()
        self.ref.clear()

    @rule()
    def save_and_load(self) -> None:
        self.loads += 1
        path = self.tmp / f"ckpt-{self.loads}"
        self.b.save(path)
        self.b.close()
        if self.storage == "memmap":
            self.buf = rr.load(path, storage="memmap", path=self.tmp / f"store-{self.loads}")
        else:
            self.buf = rr.load(path)

    # ---------------------------------------------------------------- invariants
    @invariant()
    def matches_the_reference(self) -> None:
        if self.buf is None:
            return
        expected = self.ref.sampleable_ids()
        assert sorted(self.b.sampleable_ids().tolist()) == expected
        assert len(self.b) == sum(self.stored(e) for e in range(self.ref.num_envs))
        if expected:
            assert_batch_matches(self.b.get_transitions(np.array(expected)), self.ref)
        stored = self.ref.stored_ids()
        g = self.b.gather_all()
        assert sorted(g.ids[g.mask].tolist()) == stored
        E = self.ref.num_envs
        ids = np.array(stored, np.int64)
        begin = [self.ref.episode_start(i % E, i // E) * E + i % E for i in stored]
        assert self.b.episode_begin(ids).tolist() == begin
        to_end = [self.ref.steps_to_end(i % E, i // E) for i in stored]
        assert self.b.steps_to_episode_end(ids).tolist() == to_end


class MemmapMachine(BufferMachine):
    storage = "memmap"


MACHINES = {"memory": BufferMachine, "memmap": MemmapMachine}


@pytest.mark.parametrize("storage", list(MACHINES))
def test_buffer_state_machine(storage: str) -> None:
    run_machine(MACHINES[storage], examples=40, steps=30)


@pytest.mark.slow
@pytest.mark.parametrize("storage", list(MACHINES))
def test_buffer_state_machine_long(storage: str) -> None:
    run_machine_long(MACHINES[storage], steps=50)
