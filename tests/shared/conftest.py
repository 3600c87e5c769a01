"""Writer processes a failed test left running are killed, so pytest never waits on them."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _kill_leftover_children() -> Iterator[None]:
    yield
    for p in mp.active_children():
        p.kill()
        p.join(10)
