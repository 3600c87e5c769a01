"""Hypothesis state machines: memmap storage, with state dicts, rejected loads and moves.

:class:`tests.test_state_machines.MemmapMachine` already runs every rule of
:class:`tests.test_state_machines.BufferMachine` (add, extend, end_episode, dequeue, blocking
add, sample, clear, save/load into a new directory) on ``storage="memmap"``. The rules of
:class:`MemmapRules` add, each checked by the same invariants against the reference model:

* ``state_dict`` then ``load_state_dict`` of it: nothing changes;
* a rejected ``load_state_dict`` (a counter out of its range, an array of the wrong shape, or a
  missing array): ``rr.CheckpointError``, and ``state_dict()`` and the contents stay as before;
* a move between storages: saved, loaded into memory, saved again and loaded back into a new
  memmap directory (the files of the old one released on close);
* ``clear`` followed by a reload (the cleared state is what is saved).

They run on a uniform buffer and on a proportional prioritized one (which becomes memmap at
its first reload; its priorities and sum tree are checked after every rule). The default
profile takes 5 sequences of 20 rules per machine; ``-m slow`` 10^4.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

import rlreplay as rr
from tests.machines import run_machine, run_machine_long
from tests.test_state_machines import MemmapMachine
from tests.test_state_machines_prioritized import PrioritizedMachine


def same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["config"] == b["config"] and a["meta"] == b["meta"]
    assert set(a["arrays"]) == set(b["arrays"])
    for name, arr in a["arrays"].items():
        np.testing.assert_array_equal(arr, b["arrays"][name], err_msg=name)


class MemmapRules(MemmapMachine):
    storage = "memmap"

    def reload(self, **overrides: Any) -> None:
        """Save and load back (into a new memmap directory unless ``overrides`` say else)."""
        self.loads += 1
        path = self.tmp / f"ckpt-{self.loads}"
        self.b.save(path)
        self.b.close()
        if not overrides:
            overrides = {"storage": "memmap", "path": self.tmp / f"store-{self.loads}"}
        self.buf = rr.load(path, **overrides)

    @rule()
    def state_dict_round_trip(self) -> None:
        state = self.b.state_dict()
        self.b.load_state_dict(state)
        same_state(self.b.state_dict(), state)

    @rule(how=st.sampled_from(["head past count", "shape", "missing"]), env=st.integers(0, 2))
    def rejected_load_state_dict(self, how: str, env: int) -> None:
        before = self.b.state_dict()
        bad = {**before, "arrays": dict(before["arrays"])}
        if how == "head past count":  # a meaning no writes produce: refused once installed
            counters = bad["arrays"]["index/env"].copy()
            e = env % self.ref.num_envs
            counters[e, 1] = counters[e, 0] + 1
            bad["arrays"]["index/env"] = counters
        elif how == "shape":  # would broadcast: refused before anything changes
            bad["arrays"]["columns/steps/obs"] = bad["arrays"]["columns/steps/obs"][:1]
        else:
            del bad["arrays"]["columns/steps/action"]
        with pytest.raises(rr.CheckpointError):
            self.b.load_state_dict(bad)
        same_state(self.b.state_dict(), before)

    @rule()
    def move_through_memory(self) -> None:
        self.reload(storage="memory")
        self.reload()

    @rule()
    def clear_then_reload(self) -> None:
        self.b.clear()
        self.ref.clear()
        self.reload()


class UniformMemmapMachine(MemmapRules):
    pass


class PrioritizedMemmapMachine(MemmapRules, PrioritizedMachine):
    """Built in memory by PrioritizedMachine; memmap from its first reload on."""


MACHINES = {"uniform": UniformMemmapMachine, "prioritized": PrioritizedMemmapMachine}


@pytest.mark.parametrize("kind", list(MACHINES))
def test_memmap_state_machine(kind: str) -> None:
    run_machine(MACHINES[kind], examples=5, steps=20)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(MACHINES))
def test_memmap_state_machine_long(kind: str) -> None:
    run_machine_long(MACHINES[kind])
