"""The device buffer's tests run on torch's CPU device, and also on the device named by the
environment variable ``RLREPLAY_TEST_DEVICE`` when it is set (e.g. ``cuda:0``): the ``device``
fixture."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.torch_device.helpers import DEVICES


@pytest.fixture(scope="session", params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """Each device the tests run on."""
    name: str = request.param
    return name
