"""Columns on every host backend (memory, memmap, shared memory) pass the storage contract."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlreplay.spec.schema import Schema
from rlreplay.storage import (
    Backend,
    Columns,
    MemmapBackend,
    MemoryBackend,
    SharedBackend,
    Storage,
)
from tests.contracts.storage import StorageFactory, storage_checks

BACKENDS: dict[str, Callable[[Path], Backend]] = {
    "memory": lambda _: MemoryBackend(),
    "memmap": MemmapBackend,  # one working directory per storage
    "shared": lambda _: SharedBackend(),
}


@contextlib.contextmanager
def columns_on(backend: str, tmp_path: Path) -> Iterator[StorageFactory]:
    """A factory of Columns on ``backend``; every backend it made is closed on exit."""
    backends: list[Backend] = []

    def factory(schema: Schema, num_envs: int, env_capacity: int, finals: int) -> Storage:
        made = BACKENDS[backend](tmp_path / f"storage-{len(backends)}")
        backends.append(made)
        return Columns(schema, num_envs, env_capacity, finals, made)

    try:
        yield factory
    finally:
        for made in backends:
            made.close()


CASES = [
    pytest.param(backend, check, id=f"{backend}-{check.__name__}")
    for backend in BACKENDS
    for check in storage_checks()
]


@pytest.mark.parametrize(("backend", "check"), CASES)
def test_columns_pass_the_storage_contract(
    backend: str, check: Callable[[StorageFactory], None], tmp_path: Path
) -> None:
    with columns_on(backend, tmp_path) as make:
        check(make)
