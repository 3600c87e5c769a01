"""The episode index passes its contract, with its tables in process memory and in shared
memory (as ``storage="shared"`` buffers build it)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from rlreplay.episodes import EpisodeIndex
from rlreplay.storage import SharedBackend
from tests.contracts.episode_index import IndexFactory, index_checks

TABLES = ["memory", "shared"]


@contextlib.contextmanager
def indexes_in(tables: str) -> Iterator[IndexFactory]:
    """A factory of indexes whose tables live in ``tables``; shared segments are released on
    exit."""
    backends: list[SharedBackend] = []

    def factory(E: int, C: int, n_step: int, frame_stack: int, F: int) -> EpisodeIndex:
        alloc: Callable[[str, tuple[int, ...], np.dtype[Any]], Any] | None = None
        if tables == "shared":
            backends.append(SharedBackend())
            alloc = backends[-1].allocate
        return EpisodeIndex(E, C, n_step, frame_stack, F, alloc)

    try:
        yield factory
    finally:
        for backend in backends:
            backend.close()


CASES = [
    pytest.param(tables, check, id=f"{tables}-{check.__name__}")
    for tables in TABLES
    for check in index_checks()
]


@pytest.mark.parametrize(("tables", "check"), CASES)
def test_episode_index_passes_its_contract(
    tables: str, check: Callable[[IndexFactory], None]
) -> None:
    with indexes_in(tables) as make:
        check(make)
