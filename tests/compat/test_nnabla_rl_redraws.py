"""Long redraw loops of the proportional buffer: blocks of draws, nnabla-rl's values and state.

nnabla-rl 0.16.0 draws a slice again, one ``drng.uniform`` at a time, while the drawn
experience is too new for ``num_steps``; when the experiences that fit hold a sliver of the
slice's mass that takes millions of draws. Past 1,000 failures the front-end draws in blocks
(``_draw_in_blocks``). These tests compare it with nnabla-rl's module (transcribed in
``tests/compat/_nnabla_rl_reference.py``) on slivers of 1e-2 to 2e-5 of the mass: the same
indices, the same weights and the same generator state afterwards.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer as per
from tests.compat.test_nnabla_rl_prioritized import experience, names, pair


def filled(
    capacity: int, seed: int, masses: list[float]
) -> tuple[per.ProportionalPrioritizedReplayBuffer, object]:
    """Both buffers holding ``capacity`` experiences of the given masses (alpha 1, epsilon 0)."""
    mine, theirs = pair(False, capacity, seed, alpha=1.0, epsilon=0.0, error_clip=(-10.0, 10.0))
    for t in range(capacity):
        mine.append(experience(t))
        theirs.append(t)  # type: ignore[attr-defined]
    for buf in (mine, theirs):
        buf.sample_indices(list(range(capacity)))  # type: ignore[attr-defined]
        buf.update_priorities(np.asarray(masses))  # type: ignore[attr-defined]
    return mine, theirs


@settings(max_examples=10, deadline=None)
@given(
    capacity=st.integers(2, 5),
    seed=st.integers(0, 2**32 - 1),
    sliver=st.sampled_from([1e-2, 2e-3, 3e-4, 5e-5]),
)
def test_a_sliver_takes_nnabla_rl_draws_and_ends_in_its_state(
    capacity: int, seed: int, sliver: float
) -> None:
    # Only the oldest experience fits num_steps = capacity; it holds `sliver` of the mass.
    mine, theirs = filled(capacity, seed, [sliver] + [1.0] * (capacity - 1))
    experiences, info = mine.sample(1, capacity)
    want_exps, want_info = theirs.sample(1, capacity)  # type: ignore[attr-defined]
    assert names(experiences, True) == names(want_exps, False)
    np.testing.assert_array_equal(info["weights"], np.asarray(want_info["weights"], np.float64))
    assert mine._rng.bit_generator.state == theirs._rng.bit_generator.state  # type: ignore[attr-defined]


def test_blocks_start_after_the_reachability_check_and_match_the_one_by_one_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mine, theirs = filled(3, 7, [1e-5, 1.0, 1.0])
    calls: list[int] = []
    real = per.ProportionalPrioritizedReplayBuffer._draw_in_blocks

    def spy(self: per.ProportionalPrioritizedReplayBuffer, lo: float, hi: float, limit: int) -> int:
        calls.append(limit)
        return real(self, lo, hi, limit)

    monkeypatch.setattr(per.ProportionalPrioritizedReplayBuffer, "_draw_in_blocks", spy)
    experiences, _ = mine.sample(1, 3)
    want, _ = theirs.sample(1, 3)  # type: ignore[attr-defined]
    assert calls == [1]  # the redraws went in blocks
    assert names(experiences, True) == names(want, False) == ([0], [1], [2])
    assert mine._rng.bit_generator.state == theirs._rng.bit_generator.state  # type: ignore[attr-defined]


def test_an_unreachable_slice_still_raises_at_the_first_check() -> None:
    mine, _ = filled(3, 1, [0.0, 1.0, 1.0])
    with pytest.raises(per.EndlessDrawError):
        mine.sample(1, 3)
