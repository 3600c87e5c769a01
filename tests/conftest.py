"""Test-wide configuration: the ``slow`` marker's Hypothesis profile and the suites' sizes.

A suite with a long version marks it ``@pytest.mark.slow``; pyproject's ``addopts`` deselects
those (``-m 'not slow'``), so ``python -m pytest`` (CI) runs the short versions only, and
``python -m pytest -m slow`` runs the long ones. When the mark expression selects slow tests,
the Hypothesis profile ``slow`` is loaded: at least 10^4 examples for every ``@given`` that does
not fix its own ``max_examples``, no deadline. ``--hypothesis-profile slow`` loads it by hand.

Under CI (the environment variable ``CI`` set, as ``.ci/run`` is run), the ``ci`` profile makes
the default run derandomized: the examples depend only on each test's source, so a CI result is
reproducible and a random example can't make a submission flaky. Exploration with fresh random
examples is what local runs and the ``slow`` profile are for.

``RLREPLAY_BACKGROUND_COMPILE=0`` makes the sampling kernels compile in the first call that
needs them (see below).

The suite runs in parallel (pytest-xdist, ``-n auto --dist loadfile`` in pyproject's ``addopts``):
each test file runs whole on one worker, so its module fixtures are built once.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

SLOW_EXAMPLES = 10_000

# The one-call sampling kernels compile in the first call that needs them, as they did before
# the background compile existed: tests that check what the kernel path does (``out=``
# errors, equality with the general path) take it from the first sample even with a cold
# Numba cache. tests/test_cold_start.py sets it back to test the background compile.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")

settings.register_profile(
    "slow",
    max_examples=SLOW_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)


settings.register_profile("ci", derandomize=True, database=None, print_blob=True)


def selects_slow(markexpr: str) -> bool:
    """Whether a ``-m`` expression asks for the slow tests (``slow``, ``slow and fault``, ...)."""
    words = markexpr.replace("(", " ").replace(")", " ").split()
    return any(w == "slow" and (i == 0 or words[i - 1] != "not") for i, w in enumerate(words))


def pytest_configure(config: pytest.Config) -> None:
    if selects_slow(str(config.getoption("markexpr", "") or "")):
        settings.load_profile("slow")
    elif os.environ.get("CI"):
        settings.load_profile("ci")
