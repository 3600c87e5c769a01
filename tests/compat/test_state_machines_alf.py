"""Hypothesis state machine: ALF's replay buffer front-end against ALF's documented behaviour.

:class:`AlfMachine` drives :class:`rlreplay.compat.alf.ReplayBuffer` and the slow reference of
``tests/compat/test_alf.py`` (:class:`Driver`: the history of every step, ALF's episode rules)
with the calls ALF documents (seed ``/work/shared/seeds/001_*``, ``docs/migrating/alf.md``):

* ``add_batch`` of all envs or some, with ``LAST`` steps, time limits, and a ``FIRST`` after a
  ``MID`` (each env keeps its newest ``max_length`` steps; positions only increase);
* ``dequeue(env_ids, n)``: the earliest ``n`` steps of each env, removed; without enough data
  ALF's ``AssertionError``; ``blocking=True`` with a short timeout: ``TimeoutError`` and
  nothing removed; a blocked ``dequeue`` on another thread returns ``None`` on ``stop()``
  (``revive()`` after);
* ``get_batch(B, L)``: rows ordered by env, each env ``B // E`` rows (``B % E`` envs one more)
  for uniform draws, every row the steps ``pos .. pos + L - 1`` of its env as added, every start
  stored with ``L`` steps after it; ``AssertionError`` when an env holds fewer than ``L``;
  prioritized: starts drawn among those of non-zero priority and ``importance_weights`` the
  priority over the mean of the possible starts' non-zero priorities;
* ``update_priority``, and ``initial_priority`` = max(initial, largest stored priority);
* ``gather_all`` (``[E, T]`` from each env's first position; ``AssertionError`` for unequal
  envs) and ``clear`` (all envs or some);

and after every rule: ``total_size``, and ``steps_to_episode_end`` and
``get_episode_begin_position`` of every stored step (ALF's FIRST-based episodes). The default
profile takes 8 sequences of 20 rules per variant; ``-m slow`` 10^4.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.compat.test_alf import Driver, leaf
from tests.machines import Blocked, run_machine, run_machine_long, wait_for

PRIORITIES = st.sampled_from([0.5, 1.0, 2.0, 3.5, 8.0])


class AlfMachine(RuleBasedStateMachine):
    prioritized = False

    @initialize(envs=st.integers(1, 3), max_length=st.sampled_from([1, 2, 3, 5, 8]))
    def build(self, envs: int, max_length: int) -> None:
        self.d = Driver(num_envs=envs, max_length=max_length,
                        prioritized_sampling=self.prioritized)  # fmt: skip
        self.prio: dict[tuple[int, int], float] = {}  # (env, pos) -> priority (prioritized)

    # ---------------------------------------------------------------- helpers
    def stored(self, e: int) -> range:
        return self.d.stored(e)

    def largest(self) -> float:
        live = [p for (e, t), p in self.prio.items() if t in self.stored(e)]
        return max([1.0, *live])

    def envs_of(self, data: st.DataObject) -> list[int]:
        E = self.d.E
        return data.draw(st.lists(st.integers(0, E - 1), min_size=1, max_size=E, unique=True))

    # ---------------------------------------------------------------- rules
    @rule(data=st.data())
    def add_batch(self, data: st.DataObject) -> None:
        every = data.draw(st.booleans())
        envs = list(range(self.d.E)) if every else self.envs_of(data)
        last = data.draw(st.lists(st.sampled_from(envs), unique=True, max_size=len(envs)))
        limit = data.draw(st.lists(st.sampled_from(envs), unique=True, max_size=len(envs)))
        first = data.draw(st.lists(st.sampled_from(envs), unique=True, max_size=len(envs)))
        # An env that dequeue or clear emptied goes on with a FIRST (ALF: "a FIRST into an env
        # that dequeue emptied begins a new episode"); a MID or LAST there is not documented.
        emptied = [e for e in envs if not self.stored(e)]
        first = [e for e in first if e not in emptied] + emptied
        last = [e for e in last if e not in emptied]
        new_priority = self.largest()
        self.d.add(None if every else envs, last=last, timelimit=limit, first=first)
        if self.prioritized:
            for e in envs:
                self.prio[(e, len(self.d.hist[e]) - 1)] = new_priority

    @rule(data=st.data(), n=st.integers(1, 3))
    def dequeue(self, data: st.DataObject, n: int) -> None:
        n = min(n, self.d.C)  # more than max_length: a ShapeError here, not ALF's assertion
        envs = self.envs_of(data)
        ids = torch.tensor(envs)
        if min(len(self.stored(e)) for e in envs) < n:
            with pytest.raises(AssertionError):
                self.d.rb.dequeue(env_ids=ids, n=n)
            with pytest.raises(TimeoutError):
                self.d.rb.dequeue(env_ids=ids, n=n, blocking=True, timeout=0.01)
            return
        out = self.d.rb.dequeue(env_ids=ids, n=n)
        heads = torch.tensor([self.d.head[e] for e in envs])
        self.d.check_rows(out, ids, heads, n)
        for e in envs:
            self.d.head[e] += n

    @rule(env=st.integers(0, 2))
    def stop_ends_a_blocked_dequeue(self, env: int) -> None:
        env %= self.d.E
        n = min(len(self.stored(env)) + 1, self.d.C)
        if len(self.stored(env)) >= n:
            return
        waiter = Blocked(lambda: self.d.rb.dequeue(env_ids=torch.tensor([env]), n=n,
                                                   blocking=True))  # fmt: skip
        wait_for(lambda: False, within=0.005)  # (it may or may not be waiting yet: both end)
        self.d.rb.stop()
        assert waiter.result() is None
        self.d.rb.revive()

    @rule(b=st.integers(1, 7), length=st.integers(1, 3))
    def get_batch(self, b: int, length: int) -> None:
        E = self.d.E
        starts = {e: [t for t in self.stored(e) if t + length - 1 in self.stored(e)]
                  for e in range(E)}  # fmt: skip
        if self.prioritized:
            possible = {(e, t): self.prio[(e, t)] for e in range(E) for t in starts[e]}
            if not any(p > 0 for p in possible.values()):
                with pytest.raises(AssertionError):
                    self.d.rb.get_batch(b, length)
                return
        elif any(not starts[e] for e in range(E)):
            with pytest.raises(AssertionError, match="enough data"):
                self.d.rb.get_batch(b, length)
            return
        batch, info = self.d.rb.get_batch(b, length)
        env_ids, pos = info.env_ids, info.positions
        assert leaf(batch, "observation.obs").shape == (b, length, 2)
        self.d.check_rows(batch, env_ids, pos, length)
        rows = list(zip(env_ids.tolist(), pos.tolist(), strict=True))
        assert all(t in starts[e] for e, t in rows), rows
        assert env_ids.tolist() == sorted(env_ids.tolist())  # rows ordered by env
        if self.prioritized:
            live = [p for p in possible.values() if p > 0]
            mean = sum(live) / len(live)
            want = [possible[r] / mean for r in rows]
            assert all(possible[r] > 0 for r in rows)
            np.testing.assert_allclose(info.importance_weights.numpy(), want, rtol=1e-5)
        else:
            counts = np.bincount(env_ids.numpy(), minlength=E)
            assert set(counts.tolist()) <= {b // E, b // E + 1}, counts
            assert int((counts == b // E + 1).sum()) == b % E

    @rule()
    def gather_all(self) -> None:
        sizes = {len(self.stored(e)) for e in range(self.d.E)}
        if len(sizes) > 1:
            with pytest.raises(AssertionError):
                self.d.rb.gather_all()
            return
        batch, info = self.d.rb.gather_all()
        (size,) = sizes
        assert leaf(batch, "observation.obs").shape == (self.d.E, size, 2)
        heads = torch.tensor(self.d.head)
        assert info.env_ids.tolist() == list(range(self.d.E))
        assert info.positions.tolist() == self.d.head
        self.d.check_rows(batch, info.env_ids, heads, size)

    @rule(data=st.data(), everything=st.booleans())
    def clear(self, data: st.DataObject, everything: bool) -> None:
        envs = list(range(self.d.E)) if everything else self.envs_of(data)
        self.d.rb.clear(None if everything else torch.tensor(envs))
        for e in envs:
            self.d.head[e] = len(self.d.hist[e])

    # ---------------------------------------------------------------- invariants
    @invariant()
    def sizes_and_episodes_match(self) -> None:
        if not hasattr(self, "d"):
            return
        d = self.d
        assert d.rb.total_size.item() == sum(len(self.stored(e)) for e in range(d.E))
        pairs = [(e, t) for e in range(d.E) for t in self.stored(e)]
        if not pairs:
            return
        env = torch.tensor([e for e, _ in pairs])
        pos = torch.tensor([t for _, t in pairs])
        assert d.rb.steps_to_episode_end(pos, env).tolist() == [
            d.steps_to_end(e, t) for e, t in pairs
        ]
        assert d.rb.get_episode_begin_position(pos, env).tolist() == [
            d.episode_begin(e, t) for e, t in pairs
        ]
        if self.prioritized:
            assert d.rb.initial_priority.item() == self.largest()


class PrioritizedAlfMachine(AlfMachine):
    prioritized = True

    @rule(data=st.data())
    def update_priority(self, data: st.DataObject) -> None:
        added = [(e, t) for e in range(self.d.E) for t in range(len(self.d.hist[e]))]
        if not added:
            return
        rows = data.draw(st.lists(st.sampled_from(added), min_size=1, max_size=6, unique=True))
        values = [data.draw(PRIORITIES) for _ in rows]
        self.d.rb.update_priority(torch.tensor([e for e, _ in rows]),
                                  torch.tensor([t for _, t in rows]),
                                  torch.tensor(values))  # fmt: skip
        for r, v in zip(rows, values, strict=True):
            if r[1] in self.stored(r[0]):  # overwritten or removed steps: ignored
                self.prio[r] = v


MACHINES = {"uniform": AlfMachine, "prioritized": PrioritizedAlfMachine}


@pytest.mark.parametrize("kind", list(MACHINES))
def test_alf_state_machine(kind: str) -> None:
    run_machine(MACHINES[kind], examples=8, steps=20)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(MACHINES))
def test_alf_state_machine_long(kind: str) -> None:
    run_machine_long(MACHINES[kind])
