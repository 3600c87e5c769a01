"""Shared parts of the Hypothesis state machines (``tests/test_state_machines*.py``).

The settings every machine runs with (default and ``slow`` profiles), and helpers the FIFO,
memmap and ALF machines share: running a call on a thread while the machine makes the call's
condition come true, and waiting (bounded) until that thread is really blocked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from tests.conftest import SLOW_EXAMPLES

SETTINGS: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}
JOIN = 30.0  # seconds: a rule's thread still alive after this is deadlocked


def run_machine(machine: type[RuleBasedStateMachine], examples: int, steps: int) -> None:
    """Run ``machine`` for ``examples`` sequences of at most ``steps`` rules."""
    run_state_machine_as_test(
        machine, settings=settings(max_examples=examples, stateful_step_count=steps, **SETTINGS)
    )


def run_machine_long(machine: type[RuleBasedStateMachine], steps: int = 50) -> None:
    """The ``slow`` version: 10^4 sequences."""
    run_machine(machine, SLOW_EXAMPLES, steps)


class Blocked:
    """``call()`` on its own thread; :meth:`result` joins it and returns (or raises) its end."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._out: list[Any] = []
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self._out.append((True, call()))
        except BaseException as exc:  # handed to result()
            self._out.append((False, exc))

    def result(self) -> Any:
        self._thread.join(JOIN)
        assert not self._thread.is_alive(), f"a blocked call did not return within {JOIN} s"
        ok, value = self._out[0]
        if not ok:
            raise value
        return value


def wait_for(condition: Callable[[], bool], within: float = 10.0) -> bool:
    """Poll ``condition`` until true (True) or ``within`` seconds pass (False)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True
