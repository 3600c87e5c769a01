"""TorchStorage passes the storage contract on torch's CPU device, and on the device named by
the environment variable ``RLREPLAY_TEST_DEVICE`` when it is set (e.g. ``cuda:0``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import cast

import pytest

pytest.importorskip("torch")

from rlreplay.spec.schema import Schema
from rlreplay.storage import Storage
from rlreplay.storage.torch import TorchStorage
from tests.contracts.storage import StorageFactory, storage_checks

DEVICES = ["cpu"] + [d for d in [os.environ.get("RLREPLAY_TEST_DEVICE")] if d and d != "cpu"]


def on(device: str) -> StorageFactory:
    """A factory of empty TorchStorages on ``device``."""

    def factory(schema: Schema, num_envs: int, env_capacity: int, finals: int) -> Storage:
        return cast(Storage, TorchStorage(schema, num_envs, env_capacity, finals, device))

    return factory


CASES = [
    pytest.param(device, check, id=f"{device}-{check.__name__}")
    for device in DEVICES
    for check in storage_checks()
]


@pytest.mark.parametrize(("device", "check"), CASES)
def test_torch_storage_passes_the_storage_contract(
    device: str, check: Callable[[StorageFactory], None]
) -> None:
    check(on(device))
