"""Hypothesis state machine: ReAgent's replay memory front-end against ReAgent's behaviour.

:class:`ReAgentMachine` drives :class:`rlreplay.compat.reagent.ReplayBuffer` (and
:class:`PrioritizedReAgentMachine` the ``PrioritizedReplayBuffer``) next to the slot model of
``tests/compat/_models_reagent.py`` (reagent 0.1's ring, with the differences of
``docs/migrating/reagent.md``), with ``stack_size`` 1..3, ``update_horizon`` 1..3, small
capacities that wrap, terminals and one extra element, built with ``seed=`` (core draws) or
without (reagent 0.1's draws on the global generators). Rules:

* ``add`` (episodes of random lengths, terminal or not; prioritized: a priority or ``None``),
  and a refused ``add`` (wrong observation shape: ``ValueError``, nothing changed);
* ``sample_transition_batch`` drawn: every ``indices`` slot valid (and, for the prioritized
  buffer, of priority ``> 0``, echoed in ``sampling_probabilities``), whatever it holds (a slot
  set valid by hand may hold a padding row, nothing, or a step whose neighbours were
  overwritten); every row, every element, equals reagent 0.1's read of the slots; no valid
  slot: ``RuntimeError``;
* ``sample_transition_batch(indices=...)`` of any slots, valid or not (negative forms too,
  echoed in ``indices`` as given, as reagent 0.1 does): 0.1's read of the slots again; out of
  range (``IndexError``);
* ``set_index_valid_status``; ``set_priority`` / ``get_priority`` over every leaf, with padding
  leaves (``IndexError``, difference 6), mismatched counts and negative or NaN priorities
  (``ValueError``, differences 4 and 7), each refused call changing nothing;
* ``save`` into a temporary directory and ``load`` into a fresh buffer, which the machine then
  goes on with;

and after every rule: ``add_count``, ``cursor``, ``size``, ``is_empty``/``is_full``,
``invalid_range``, the validity of every slot (negative indices too, ``IndexError`` past them),
and the priorities of every leaf and ``max_recorded_priority``. The default profile takes 8
sequences of 20 rules per buffer; ``-m slow`` 10^4.
"""

from __future__ import annotations

import math
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import rlreplay as rr
from rlreplay.compat.reagent import PrioritizedReplayBuffer, ReplayBuffer
from rlreplay.compat.reagent.circular_replay_buffer import ReplayElement
from tests.compat._models_reagent import OBS_DIM, ReAgentModel
from tests.machines import run_machine, run_machine_long

GAMMA = 0.5  # powers of 0.5 and these rewards: n-step sums are exact
REWARDS = st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0])
PRIORITIES = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5, 8.0])
LOG_PROB = ReplayElement("log_prob", (), np.float32)
COMPARED = ("state", "action", "reward", "terminal", "step", "log_prob")
AFTER = ("next_state", "next_action", "next_reward", "next_log_prob")  # 0.1's read there too


class ReAgentMachine(RuleBasedStateMachine):
    prioritized = False

    @initialize(k=st.integers(1, 3), n=st.integers(1, 3), spare=st.integers(0, 8),
                seeded=st.booleans())  # fmt: skip
    def build(self, k: int, n: int, spare: int, seeded: bool) -> None:
        # With seed= the buffer draws from the core; without it as reagent 0.1 draws (NumPy's
        # and Python's global generators). The laws checked hold for both.
        self.seeded = seeded
        self.cfg: dict[str, Any] = dict(
            observation_shape=(OBS_DIM,),
            stack_size=k,
            replay_capacity=k + n + spare,
            batch_size=4,
            update_horizon=n,
            gamma=GAMMA,
            observation_dtype=np.float32,
            extra_storage_types=[LOG_PROB],
        )
        self.buf = self.make()
        self.m = ReAgentModel(k + n + spare, k, n, GAMMA, self.prioritized)
        self.rows_checked = 0  # rows compared with the model (a measure of the run's reach)
        self.raw_rows_checked = 0  # of them, rows whose slots mix episodes or hold no step

    def make(self) -> Any:
        cls = PrioritizedReplayBuffer if self.prioritized else ReplayBuffer
        return cls(**self.cfg, seed=0) if self.seeded else cls(**self.cfg)

    # ---------------------------------------------------------------- helpers
    def check_row(self, batch: Any, row: int, s: int) -> None:
        """Row ``row`` of ``batch`` (slot ``s``) is what reagent 0.1 reads from the slots."""
        want = self.m.transition(s)
        for name in COMPARED + AFTER:
            got = getattr(batch, name)[row].numpy()
            np.testing.assert_array_equal(
                got.reshape(np.shape(want[name])), want[name], err_msg=f"{name} of slot {s}"
            )
        self.rows_checked += 1
        self.raw_rows_checked += not self.m.intact(s)

    # ---------------------------------------------------------------- rules
    @rule(length=st.integers(1, 6), terminal=st.booleans(), rewards=st.lists(REWARDS, min_size=6),
          priorities=st.lists(st.none() | PRIORITIES, min_size=6))  # fmt: skip
    def add_episode(
        self, length: int, terminal: bool, rewards: list[float], priorities: list[float | None]
    ) -> None:
        for t in range(length):
            term = terminal and t == length - 1
            p = priorities[t] if self.prioritized else None
            values = self.m.add(rewards[t], term, p)
            if self.prioritized:
                self.buf.add(*values, p)
            else:
                self.buf.add(*values)

    @rule()
    def refused_add(self) -> None:
        bad = (np.zeros(OBS_DIM + 1, np.float32), 0, 0.0, False, 0.0)
        with pytest.raises(ValueError):
            self.buf.add(*bad, *([1.0] if self.prioritized else []))

    @rule(b=st.integers(1, 7))
    def sample(self, b: int) -> None:
        m = self.m
        valid = np.flatnonzero(m.valid).tolist()
        drawable = [s for s in valid if not self.prioritized or m.leaves[s] > 0]
        if not drawable:
            # No valid slot: RuntimeError. Prioritized: an all-zero sum tree raises its own
            # error (an Exception in 0.1; rr.EmptyBufferError here) before any redraw.
            with pytest.raises((RuntimeError, rr.EmptyBufferError)):
                self.buf.sample_transition_batch(batch_size=b)
            return
        try:
            batch = self.buf.sample_transition_batch(batch_size=b)
        except RuntimeError as exc:
            # Prioritized only, as ReAgent: redraws used up on heavy invalid slots.
            assert self.rare_valid_mass(drawable), exc
            return
        slots = batch.indices.reshape(-1).tolist()
        assert len(slots) == b
        for row, s in enumerate(slots):
            assert s in drawable, (s, drawable)
            self.check_row(batch, row, s)
        if self.prioritized:
            np.testing.assert_array_equal(
                batch.sampling_probabilities.reshape(-1).numpy(), m.leaves[slots].astype(np.float32)
            )

    def rare_valid_mass(self, drawable: list[int]) -> bool:
        if not self.prioritized:
            return False
        m = self.m
        total = float(m.leaves[: m.cap].sum())
        return float(sum(m.leaves[s] for s in drawable)) < 0.05 * total

    @rule(data=st.data())
    def sample_indices(self, data: st.DataObject) -> None:
        m = self.m
        # Any slot, valid or not, holding a step or not: reagent 0.1 reads the slots.
        slots = data.draw(st.lists(st.integers(0, m.cap - 1), min_size=1, max_size=5))
        negative = data.draw(st.booleans())
        asked = [s - m.cap if negative else s for s in slots]
        batch = self.buf.sample_transition_batch(batch_size=len(asked), indices=asked)
        assert batch.indices.reshape(-1).tolist() == asked  # echoed as given, as in 0.1
        for row, s in enumerate(slots):
            self.check_row(batch, row, s)
        with pytest.raises(IndexError):
            self.buf.sample_transition_batch(
                batch_size=1, indices=[data.draw(st.sampled_from([m.cap, -m.cap - 1]))]
            )

    @rule(data=st.data(), flag=st.booleans())
    def set_valid(self, data: st.DataObject, flag: bool) -> None:
        s = data.draw(st.integers(-self.m.cap, self.m.cap - 1))
        self.buf.set_index_valid_status(s, flag)
        self.m.valid[s % self.m.cap] = flag

    @rule()
    def save_and_load(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            self.buf.save(d, 7)
            fresh = self.make()
            fresh.load(d, 7)
        self.buf = fresh

    # ---------------------------------------------------------------- invariants
    @invariant()
    def counters_and_validity_match(self) -> None:
        if not hasattr(self, "m"):
            return
        m, buf = self.m, self.buf
        assert int(buf.add_count) == m.add_count and buf.cursor() == m.cursor()
        assert buf.size == m.size()
        assert buf.is_empty() == (m.add_count == 0)
        assert buf.is_full() == (m.add_count >= m.cap)
        np.testing.assert_array_equal(buf.invalid_range, m.invalid_range())
        assert [buf.is_valid_transition(i) for i in range(-m.cap, m.cap)] == 2 * m.valid.tolist()
        for i in (m.cap, -m.cap - 1):
            with pytest.raises(IndexError):
                buf.is_valid_transition(i)


class PrioritizedReAgentMachine(ReAgentMachine):
    prioritized = True

    @rule(data=st.data())
    def set_priority(self, data: st.DataObject) -> None:
        m = self.m
        leaves = m.leaves.size
        slots = data.draw(st.lists(st.integers(0, m.cap - 1), min_size=1, max_size=5))
        idx = slots  # a negative index fails ReAgent's tree walk (AssertionError, below)
        values = [data.draw(PRIORITIES) for _ in idx]
        self.buf.set_priority(np.array(idx, np.int32), np.array(values))
        m.set_priority(idx, values)
        refused: list[tuple[type[Exception], Any, Any]] = [
            (ValueError, idx, [*values[:-1], -1.0]),
            (ValueError, idx, [*values[:-1], math.nan]),
            (ValueError, idx + idx[:1], values),
        ]
        if leaves > m.cap:  # the power-of-two level's padding leaves (difference 6)
            pad = data.draw(st.integers(m.cap, leaves - 1))
            refused.append((IndexError, [*idx, pad], [*values, 1.0]))
            refused.append((AssertionError, [*idx, pad - leaves], [*values, 1.0]))
        refused.append((IndexError, [leaves], [1.0]))
        refused.append((AssertionError, [slots[0] - leaves], [1.0]))
        for error, bad_idx, bad_values in refused:
            with pytest.raises(error):
                self.buf.set_priority(np.array(bad_idx, np.int32), np.array(bad_values))

    @precondition(lambda self: hasattr(self, "m"))
    @invariant()
    def priorities_match(self) -> None:
        m = self.m
        every = list(range(-m.leaves.size, m.leaves.size))
        np.testing.assert_array_equal(
            self.buf.get_priority(np.array(every, np.int32)), m.get_priority(every)
        )
        assert self.buf.sum_tree.max_recorded_priority == m.max_recorded


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_padding_row_keeps_validity(cls: Any) -> None:
    """A slot set valid keeps its mark when a padding row is written there (ReAgent's ``_add``)."""
    buf = cls(observation_shape=(OBS_DIM,), stack_size=3, replay_capacity=6, batch_size=1,
              update_horizon=3, observation_dtype=np.float32, seed=0)  # fmt: skip
    prio = [None] if cls is PrioritizedReplayBuffer else []
    for t in range(6):  # two padding rows, six steps: the cursor is back at slot 2
        buf.add(np.full(OBS_DIM, t + 1, np.float32), 0, 0.0, t == 5, *prio)
    buf.set_index_valid_status(2, True)
    buf.add(np.zeros(OBS_DIM, np.float32), 0, 0.0, False, *prio)  # pads slots 2, 3; step at 4
    # ReAgent: slot 4 (the new step) and slots 5, 0 (its stack's reach) lose their marks.
    assert [buf.is_valid_transition(i) for i in range(6)] == [False, True, True] + [False] * 3
    assert buf.size == 2


def test_loaded_padding_row_reads_as_0_1_reads_it(tmp_path: Any) -> None:
    """A padding row of a wrapped ring reads as reagent 0.1 reads it, after save and load too."""
    kw: dict[str, Any] = dict(
        observation_shape=(OBS_DIM,), stack_size=3, replay_capacity=4, batch_size=1,
        update_horizon=1, observation_dtype=np.float32,
    )  # fmt: skip
    buf = ReplayBuffer(**kw, seed=0)
    model = ReAgentModel(4, 3, 1, GAMMA, False)
    for _ in range(3):  # padding in slots 0, 1; steps in 2, 3, then 0: slot 1 is padding
        values = model.add(0.0, False)
        buf.add(*values[:4])
    buf.save(tmp_path, 0)
    loaded = ReplayBuffer(**kw, seed=0)
    loaded.load(tmp_path, 0)
    for b in (buf, loaded):
        batch = b.sample_transition_batch(indices=[1])
        want = model.transition(1)  # a zero stack, then step 1's frame in slot 3 as next state
        for name in ("state", "next_state", "reward", "terminal", "step"):
            got = getattr(batch, name)[0].numpy()
            np.testing.assert_array_equal(got.reshape(np.shape(want[name])), want[name])


MACHINES = {"uniform": ReAgentMachine, "prioritized": PrioritizedReAgentMachine}


@pytest.mark.parametrize("kind", list(MACHINES))
def test_reagent_state_machine(kind: str) -> None:
    run_machine(MACHINES[kind], examples=8, steps=20)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(MACHINES))
def test_reagent_state_machine_long(kind: str) -> None:
    run_machine_long(MACHINES[kind])
