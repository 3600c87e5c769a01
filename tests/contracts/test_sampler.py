"""Every sampler of the library passes the sampler contract (``tests/contracts/sampler.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlreplay.sampling import PrioritizedSampler, Sampler, UniformSampler
from tests.contracts.sampler import SamplerFactory, sampler_checks

SAMPLERS: dict[str, SamplerFactory] = {
    "uniform": UniformSampler,
    "proportional": lambda: PrioritizedSampler(alpha=0.7, beta=0.5),
    "proportional-unstratified": lambda: PrioritizedSampler(alpha=1.0, stratified=False),
    "rank_based": lambda: PrioritizedSampler(variant="rank_based", sort_interval=1),
    "rank_based-lazy": lambda: PrioritizedSampler(variant="rank_based", alpha=0.5),
}


@pytest.mark.parametrize("name", list(SAMPLERS))
@pytest.mark.parametrize("check", sampler_checks(), ids=lambda c: c.__name__)
def test_sampler_contract(name: str, check: Callable[..., None], tmp_path: Path) -> None:
    make: Callable[[], Sampler] = SAMPLERS[name]
    args: list[Any] = [make]
    if "tmp_path" in check.__code__.co_varnames[: check.__code__.co_argcount]:
        args.append(tmp_path)
    check(*args)
