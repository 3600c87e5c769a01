"""Hypothesis state machines for the buffer kinds ``test_state_machines.py`` leaves out.

:class:`PrioritizedMachine` runs every rule of :class:`BufferMachine` (add with ``None`` inputs,
extend, end_episode, dequeue, blocking add with ``timeout=0``, clear, save/load) on a
:class:`rlreplay.PrioritizedReplayBuffer`, proportional and rank-based, against the reference model
plus a reference of the priorities: a new transition gets ``max(initial_priority, largest priority
applied)``, ``update_priorities`` applies ``value + eps`` to ids still stored (the last duplicate
wins) and ignores, and counts, stale ones (overwritten, cleared or dequeued) and the never-
sampleable steps of abandoned episodes. After every rule: ``get_priorities`` of every stored id and
the sum tree (its root equals the sum of its leaves; proportional: each leaf is the reference mass
of its slot). A ``sample`` rule checks every row against the reference, the ids drawable, each
probability and weight exactly (rank-based runs with ``sort_interval=1``: exact ranks at every
draw), and the sampling law loosely: the frequencies of 4096 draws within 5 standard deviations of
``P(i)`` (plus ``2 / n``) for every id.

:class:`SequenceMachine` adds ``sample_sequences`` (``length``, ``within_episode``, ``pad``) on a
uniform buffer: every row equals the reference run of its first step (``tests/test_sequences.py``'s
helpers over ``tests/reference.py``), ``pad=False`` starts are among the reference's full-length
starts, and ``EmptyBufferError`` exactly when the reference has no start.

The default profile takes 15 sequences of 25 rules per machine (seconds); ``-m slow`` 10^4.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    invariant,
    precondition,
    rule,
)

import rlreplay as rr
from tests.machines import run_machine, run_machine_long
from tests.reference import RefBuffer, assert_batch_matches
from tests.test_sequences import assert_rows_match, ref_run_length, ref_valid_starts
from tests.test_state_machines import FIELDS, BufferMachine

EPS = 1e-3
ALPHA = 0.7
BETA = 0.5
DRAWS = 4096


class PrioRef(RefBuffer):
    """The reference model plus each stored step's priority."""

    prio: dict[int, float]
    max_priority: float

    def add(self, env: int, values: dict[str, Any]) -> int:
        tid = super().add(env, values)
        self.prio[tid] = max(1.0, self.max_priority)  # initial_priority 1
        return tid

    def stored_prio(self) -> dict[int, float]:
        return {i: self.prio[i] for i in self.stored_ids()}


class PrioritizedMachine(BufferMachine):
    variant = "proportional"

    @initialize(
        envs=st.integers(1, 3),
        n_step=st.integers(1, 3),
        stack=st.integers(1, 2),
        extra=st.integers(0, 4),
        gamma=st.sampled_from([0.0, 0.5, 1.0]),
    )
    def build(self, envs: int, n_step: int, stack: int, extra: int, gamma: float) -> None:
        per_env = n_step + stack + extra
        rank = {"sort_interval": 1} if self.variant == "rank_based" else {}
        self.buf = rr.PrioritizedReplayBuffer(
            per_env * envs, FIELDS, num_envs=envs, n_step=n_step, frame_stack=stack, gamma=gamma,
            seed=5, alpha=ALPHA, beta=BETA, eps=EPS, variant=self.variant, **rank,
        )  # fmt: skip
        self.ref = PrioRef(envs, per_env, n_step, gamma, stack, True, ("obs",))
        self.ref.prio, self.ref.max_priority = {}, 0.0

    @property
    def p(self) -> rr.PrioritizedReplayBuffer:
        assert isinstance(self.buf, rr.PrioritizedReplayBuffer)
        return self.buf

    @property
    def pref(self) -> PrioRef:
        assert isinstance(self.ref, PrioRef)
        return self.ref

    def masses(self) -> dict[int, float]:
        """The reference sampling mass of every sampleable id (0 for priority 0)."""
        p = {i: self.pref.prio[i] for i in self.ref.sampleable_ids()}
        if self.variant == "rank_based":  # exact ranks: 1 + #{larger priorities}
            ranked = [v for v in p.values() if v > 0]
            return {i: (1 + sum(w > v for w in ranked)) ** -ALPHA if v > 0 else 0.0
                    for i, v in p.items()}  # fmt: skip
        return {i: v**ALPHA if v > 0 else 0.0 for i, v in p.items()}

    # ---------------------------------------------------------------- rules
    @rule(data=st.data())
    def update_priorities(self, data: st.DataObject) -> None:
        issued = [t * self.ref.num_envs + e
                  for e, h in enumerate(self.ref.history) for t in range(len(h))]  # fmt: skip
        if not issued:
            return
        ids = data.draw(st.lists(st.sampled_from(issued), min_size=1, max_size=10))
        values = data.draw(
            st.lists(st.sampled_from([0.0, 0.25, 1.0, 2.0, 7.5]), min_size=len(ids),
                     max_size=len(ids))
        )  # fmt: skip
        stored = set(self.ref.stored_ids())
        E = self.ref.num_envs
        # Overwritten, and steps abandoned episodes left never sampleable: ignored, counted.
        stored -= {i for i in stored if self.ref.in_hole(i % E, i // E)}
        stale = sum(i not in stored for i in ids)
        assert self.p.update_priorities(np.array(ids), np.array(values)) == stale
        applied: dict[int, float] = {}
        for i, v in zip(ids, values, strict=True):
            if i in stored:
                applied[i] = v + EPS
        self.pref.prio.update(applied)
        if applied:
            self.pref.max_priority = max(self.pref.max_priority, *applied.values())
        assert self.p.max_priority == pytest.approx(self.pref.max_priority)

    @precondition(lambda self: bool(self.ref.sampleable_ids()))
    @rule()
    def sample(self) -> None:
        masses = self.masses()
        total = sum(masses.values())
        if total <= 0.0:
            with pytest.raises(rr.EmptyBufferError):
                self.p.sample(8)
            return
        batch = self.p.sample(DRAWS)
        ids = batch.ids.tolist()
        assert all(masses.get(i, 0.0) > 0.0 for i in ids), "drew an id of mass 0"
        assert_batch_matches(rr.Batch({k: v[:16] for k, v in batch.items()}), self.ref)
        expected = np.array([masses[i] for i in ids]) / total
        np.testing.assert_allclose(batch.probabilities, expected, rtol=1e-9)
        smallest = min(m for m in masses.values() if m > 0) / total
        np.testing.assert_allclose(batch.weights, (smallest / expected) ** BETA, rtol=1e-5)
        # The law, loosely: every id's frequency near P(i) (stratified draws are closer still).
        freq = {i: 0 for i in masses}
        for i in ids:
            freq[i] += 1
        for i, m in masses.items():
            p = m / total
            bound = 5 * np.sqrt(p * (1 - p) / DRAWS) + 2 / DRAWS
            assert abs(freq[i] / DRAWS - p) <= bound, (i, freq[i] / DRAWS, p)

    # ---------------------------------------------------------------- invariants
    @invariant()
    def priorities_and_tree_match(self) -> None:
        if self.buf is None:
            return
        expected = self.pref.stored_prio()
        if expected:
            got = self.p.get_priorities(np.array(list(expected)))
            np.testing.assert_allclose(got, list(expected.values()), rtol=1e-12)
        with self.p.atomic():
            prios = self.p._prios
            tree = prios.sum_tree
            leaves = tree.get(np.arange(tree.capacity))
            root = tree.total
        assert root == pytest.approx(float(leaves.sum()), rel=1e-9, abs=1e-300)
        E, C = self.ref.num_envs, self.ref.env_capacity
        want = np.zeros(tree.capacity)
        masses = self.masses()
        live = np.zeros(tree.capacity, bool)
        for i, m in masses.items():
            want[(i % E) * C + (i // E) % C] = m
            live[(i % E) * C + (i // E) % C] = True
        assert (leaves[~live] == 0).all(), "a slot that is not sampleable has mass"
        if self.variant == "proportional":  # rank-based leaves hold the ranks in use
            np.testing.assert_allclose(leaves, want, rtol=1e-12)


class RankBasedMachine(PrioritizedMachine):
    variant = "rank_based"


class SequenceMachine(BufferMachine):
    @precondition(lambda self: self.buf is not None)
    @rule(length=st.integers(1, 6), within=st.booleans(), pad=st.booleans())
    def sample_sequences(self, length: int, within: bool, pad: bool) -> None:
        stored = self.ref.stored_ids()
        starts = ref_valid_starts(self.ref, length, within) if not pad else stored
        if not starts:
            with pytest.raises(rr.EmptyBufferError):
                self.b.sample_sequences(8, length, within_episode=within, pad=pad)
            return
        batch = self.b.sample_sequences(16, length, within_episode=within, pad=pad)
        assert_rows_match(batch, self.ref, length, within)
        E = self.ref.num_envs
        for tid in batch.ids.tolist():
            env, t0 = tid % E, tid // E
            if not pad:
                assert (env, t0) in starts
                assert ref_run_length(self.ref, env, t0, length, within) == length


MACHINES = {
    "prioritized-proportional": PrioritizedMachine,
    "prioritized-rank_based": RankBasedMachine,
    "sequences": SequenceMachine,
}


@pytest.mark.parametrize("kind", list(MACHINES))
def test_state_machine(kind: str) -> None:
    run_machine(MACHINES[kind], examples=15, steps=25)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(MACHINES))
def test_state_machine_long(kind: str) -> None:
    run_machine_long(MACHINES[kind], steps=50)
