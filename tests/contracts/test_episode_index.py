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


def test_nbytes_is_the_tables_and_reading_it_keeps_the_index_as_it_was() -> None:
    """``nbytes`` sums the three tables, and reading it (``buf.nbytes``) changes nothing of the
    index (no cache is dropped, no counter reset)."""
    import numpy as np

    import rlreplay as rr

    buf = rr.ReplayBuffer(16, {"obs": rr.Field((), np.float32)}, num_envs=2, seed=0)
    for t in range(9):
        buf.add(obs=np.full(2, t, np.float32), reward=np.ones(2), terminated=[False, t == 4],
                truncated=[False, False], next_obs=np.zeros(2, np.float32))  # fmt: skip
    index = buf._index
    tables = (index.env, index.slot_meta, index.final_owner)
    assert index.nbytes == sum(a.nbytes for a in tables)
    before = dict(vars(index))
    _ = buf.nbytes
    assert {k: v for k, v in vars(index).items() if not isinstance(v, np.ndarray)} == {
        k: v for k, v in before.items() if not isinstance(v, np.ndarray)
    }
