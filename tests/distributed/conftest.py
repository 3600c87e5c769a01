"""One local Ray instance (2 CPUs) for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """Ray started once per session, shut down at its end (reused if already running)."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
