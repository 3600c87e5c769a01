"""Hypothesis state machine: the FIFO use of a buffer with blocking calls, several threads.

:class:`FifoMachine` runs every rule of :class:`tests.test_state_machines.BufferMachine`
(add, extend, end_episode, dequeue and blocking add with ``timeout=0``, sample, clear,
save/load) against :class:`tests.reference.RefBuffer`, and adds the waiting calls:

* ``dequeue(n, block=True, timeout=0.01)`` and ``add(block=True, timeout=0.01)`` that cannot
  proceed wait, raise ``rr.ReplayTimeout``, and change nothing (the invariants compare
  everything with the reference after each rule; no waiter is left counted);
* a ``dequeue(block=True)`` on another thread that waits for steps of its env, released when
  the machine adds them (it takes the oldest ``n``, as the reference after those adds);
* an ``add(block=True)`` on another thread that waits for room in a full env (filled first),
  released when the machine dequeues from that env (the step lands after the dequeue, as in
  the reference).

The machine waits until the thread is counted as waiting before releasing it, so the wake-up
path is what runs. The default profile takes 12 sequences of 20 rules (a few seconds);
``-m slow`` 10^4.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

import rlreplay as rr
from tests.machines import Blocked, run_machine, run_machine_long, wait_for
from tests.test_state_machines import FLAGS, BufferMachine

SHORT = 0.01  # seconds: a wait that must time out


class FifoMachine(BufferMachine):
    def expect_dequeued(self, out: Any, envs: list[int], n: int) -> None:
        """``out`` holds the oldest ``n`` steps of each of ``envs``; the reference drops them."""
        E = self.ref.num_envs
        for row, e in enumerate(envs):
            lo = self.ref.oldest_stored(e)
            assert out.ids[row].tolist() == [s * E + e for s in range(lo, lo + n)]
            want = [self.ref.history[e][s].values["obs"].tolist() for s in range(lo, lo + n)]
            assert out.obs[row].tolist() == want
            self.ref.cleared_at[e] = lo + n

    # ---------------------------------------------------------------- waits that time out
    @rule(env=st.integers(0, 2), extra=st.integers(1, 3))
    def dequeue_times_out(self, env: int, extra: int) -> None:
        env %= self.ref.num_envs
        n = self.stored(env) + extra
        if n > self.ref.env_capacity:
            return
        with pytest.raises(rr.ReplayTimeout):
            self.b.dequeue(n, env_ids=[env], block=True, timeout=SHORT)

    @precondition(lambda self: self.buf is not None)
    @rule(env=st.integers(0, 2), flags=FLAGS)
    def add_times_out_when_full(self, env: int, flags: tuple[bool, bool]) -> None:
        env %= self.ref.num_envs
        if self.stored(env) < self.ref.env_capacity:
            return
        values = self.batched([self.values(flags)], none_next=False)
        with pytest.raises(rr.ReplayTimeout):
            self.b.add(env_ids=[env], block=True, timeout=SHORT, **values)

    # ---------------------------------------------------------------- waits released by us
    @rule(env=st.integers(0, 2), n=st.integers(1, 4), flags=st.lists(FLAGS, max_size=4))
    def dequeue_waits_for_steps(self, env: int, n: int, flags: list[tuple[bool, bool]]) -> None:
        env %= self.ref.num_envs
        n = min(n, self.ref.env_capacity)
        need = n - self.stored(env)
        if need <= 0:
            return
        flags = (flags + [(False, False)] * need)[:need]
        waiter = Blocked(lambda: self.b.dequeue(n, env_ids=[env], block=True, timeout=30))
        assert wait_for(lambda: self.b._sync.waiting >= 1), "the dequeue never waited"
        steps = [self.values(f) for f in flags]
        ids = self.b.extend(env_id=env, **self.batched(steps, none_next=False))
        assert ids.tolist() == [self.ref.add(env, s) for s in steps]
        self.expect_dequeued(waiter.result(), [env], n)

    @rule(env=st.integers(0, 2), m=st.integers(1, 3), flags=FLAGS)
    def add_waits_for_room(self, env: int, m: int, flags: tuple[bool, bool]) -> None:
        env %= self.ref.num_envs
        room = self.ref.env_capacity - self.stored(env)
        if room:  # fill the env first
            steps = [self.values((False, False)) for _ in range(room)]
            ids = self.b.extend(env_id=env, **self.batched(steps, none_next=True))
            assert ids.tolist() == [self.ref.add(env, s) for s in steps]
        step = self.values(flags)
        values = self.batched([step], none_next=False)
        waiter = Blocked(lambda: self.b.add(env_ids=[env], block=True, timeout=30, **values))
        assert wait_for(lambda: self.b._sync.waiting >= 1), "the add never waited"
        m = min(m, self.stored(env))
        self.expect_dequeued(self.b.dequeue(m, env_ids=[env]), [env], m)
        assert waiter.result().tolist() == [self.ref.add(env, step)]

    @invariant()
    def nobody_waits(self) -> None:
        if self.buf is not None:
            assert self.b._sync.waiting == 0


def test_fifo_state_machine() -> None:
    run_machine(FifoMachine, examples=12, steps=20)


@pytest.mark.slow
def test_fifo_state_machine_long() -> None:
    run_machine_long(FifoMachine)
