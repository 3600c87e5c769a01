"""The nnabla-rl front-end's uniform draw is NumPy's ``Generator.choice``, number for number.

nnabla-rl 0.16.0's ``ReplayBuffer._random_indices`` draws ``rl.random.drng.choice(max_index,
size=num_samples, replace=False)``; the front-end makes the same draw with a Numba kernel
(``_choice``) that calls the bit generator's own ``next_uint32``. Same seed, same indices, and
the generator is left in the same state, so every later draw (the prioritized buffers', the
user's own) is unchanged too.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlreplay.compat.nnabla_rl import _choice
from rlreplay.compat.nnabla_rl._choice import choice_without_replacement
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer

# (n, size): Floyd's branch at its edges (size == n, n == 1, n == 10000, size == n // 50 past
# 10000), the training loop's (32 of a few thousand), and NumPy's other branch (tail shuffle)
CASES = [(1, 1), (2, 1), (2, 2), (5, 3), (32, 32), (33, 32), (4000, 32), (10000, 500),
         (10001, 200), (100000, 32), (50000, 2000), (20000, 1000), (2**31 - 1, 3)]  # fmt: skip


@pytest.fixture(autouse=True)
def compiled() -> None:
    if not _choice.kernel_ready():
        _choice._start()  # tests compile at once (RLREPLAY_BACKGROUND_COMPILE=0, conftest)
    assert _choice.kernel_ready()


@pytest.mark.parametrize(("n", "size"), CASES)
def test_same_numbers_and_generator_state_as_numpy(n: int, size: int) -> None:
    for seed in range(60):
        mine, numpy = np.random.default_rng(seed), np.random.default_rng(seed)
        for _ in range(3):  # the generator's buffered 32 bits carry over between draws
            got = choice_without_replacement(mine, n, size)
            want = numpy.choice(n, size=size, replace=False)
            assert got.dtype == want.dtype and np.array_equal(got, want), (seed, n, size)
        assert mine.bit_generator.state == numpy.bit_generator.state
        assert mine.random() == numpy.random()


def test_after_an_odd_number_of_32_bit_draws() -> None:
    # a pending half of a 64-bit output (has_uint32) is the kernel's first 32 bits, as NumPy's
    for seed in range(40):
        mine, numpy = np.random.default_rng(seed), np.random.default_rng(seed)
        mine.integers(0, 7, dtype=np.uint32)
        numpy.integers(0, 7, dtype=np.uint32)
        got = choice_without_replacement(mine, 999, 17)
        assert np.array_equal(got, numpy.choice(999, size=17, replace=False))
        assert mine.bit_generator.state == numpy.bit_generator.state


def test_other_bit_generators_and_arguments_take_numpys_call() -> None:
    for bits in (np.random.MT19937, np.random.Philox, np.random.SFC64):
        mine, numpy = np.random.Generator(bits(3)), np.random.Generator(bits(3))
        want = numpy.choice(500, size=20, replace=False)
        assert np.array_equal(choice_without_replacement(mine, 500, 20), want)
    for n, size, error in ((3, 4, ValueError), (3, -1, ValueError), (3.0, 2, ValueError)):
        with pytest.raises(error):
            choice_without_replacement(np.random.default_rng(0), n, size)  # type: ignore[arg-type]
    empty = choice_without_replacement(np.random.default_rng(0), 4, 0)
    assert empty.shape == (0,) and empty.dtype == np.int64


def test_buffer_samples_draw_numpys_indices() -> None:
    """The buffer's sample and nnabla-rl's call on a twin generator pick the same positions."""
    buffer = ReplayBuffer(capacity=300, seed=5)
    for t in range(400):
        s = np.full(2, t, np.float32)
        buffer.append((s, np.array([t]), float(t), 1.0, s + 1, {"t": t}))
    rng = np.random.default_rng(5)
    # the buffer's generator is derived from its seed: copy its state to the twin
    assert buffer._own_rng is not None
    rng.bit_generator.state = buffer._own_rng.bit_generator.state
    for num_samples, num_steps in ((32, 1), (300, 1), (7, 3), (1, 300)):
        experiences, _ = buffer.sample(num_samples, num_steps)
        first = experiences if num_steps == 1 else experiences[0]
        drawn = rng.choice(300 - num_steps + 1, size=num_samples, replace=False)
        assert [e[5]["t"] for e in first] == (drawn + 100).tolist()
