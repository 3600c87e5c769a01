"""Differences from keras-gym found by the differential driver (issue 13), now fixed.

Each expectation is transcribed from keras-gym's code: 0.2.17's ``add``/``clear``/``__len__``/
``_init_cache`` and the seed's ``sample`` (``shared/seeds/002``), quoted in the tests. The
driver ran keras-gym's file beside the front-end over random sequences of every public call.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest

import rlreplay as rr
from rlreplay.compat.keras_gym import ExperienceReplayBuffer


class Env:
    def __init__(self, num_frames: Any = 1, n: int = 3) -> None:
        self.action_space = gymnasium.spaces.Discrete(n)
        self.num_frames = num_frames


def test_negative_bootstrap_n_sample_after_clear_raises_runtime_error() -> None:
    """keras-gym: ``len`` is ``max(0, _num_transitions - bootstrap_n)``, so with
    ``bootstrap_n=-2`` a cleared ring (``clear``: ``self._num_transitions = 0``) has
    ``len() == 2`` and passes the size check; the seed's loop then raises
    ``RuntimeError("please insert more transitions before sampling")`` (``if not
    self._num_transitions``) before drawing. The front-end raised NumPy's ``ValueError('high
    <= 0')`` of ``randint(0)``."""
    buf = ExperienceReplayBuffer(Env(), 10, batch_size=2, bootstrap_n=-2, random_seed=1)
    for t in range(6):
        buf.add(np.full(2, t, np.float32), t % 3, 1.0, False, 1)
    buf.clear()
    assert len(buf) == 2
    state = buf.random.get_state()
    with pytest.raises(RuntimeError, match="please insert more transitions"):
        buf.sample()
    assert np.array_equal(buf.random.get_state()[1], state[1])  # nothing drawn
    with pytest.raises(rr.ReplayError):
        buf.sample()


def test_num_frames_none_sample_draws_once_before_the_type_error() -> None:
    """keras-gym's loop draws ``j = self.random.randint(self._num_transitions)`` and only
    then fails at ``np.arange(self.num_frames - 1, -1, -1)`` (``None - 1``: ``TypeError``),
    so each failed ``sample()`` consumes one draw; the front-end drew nothing."""
    buf = ExperienceReplayBuffer(Env(None), 10, batch_size=1, random_seed=7)
    for t in range(4):
        buf.add(np.full(2, t, np.float32), 1, 1.0, False, 1)
    ref = np.random.RandomState(7)
    for _ in range(2):
        with pytest.raises(TypeError):
            buf.sample()
        ref.randint(4)  # keras-gym's draw: _num_transitions = 4 (ring of 11 slots)
        assert buf.random.randint(1000) == ref.randint(1000)


def test_negative_ring_fails_at_init_before_the_action_is_encoded() -> None:
    """keras-gym's first ``add`` builds the cache (``np.empty((capacity + bootstrap_n,) +
    shape)``: ``ValueError: negative dimensions are not allowed``) before
    ``_one_hot_encode_discrete(a)``, and ``self._initialized = True`` is never reached: an
    invalid action still raises ``ValueError``, and the next add reads ``s.dtype`` again (a
    list state: ``AttributeError``). The front-end encoded the action first
    (``AssertionError``) and marked itself initialised."""
    buf = ExperienceReplayBuffer(Env(), -3, batch_size=1, bootstrap_n=1)
    with pytest.raises(ValueError, match="negative dimensions"):
        buf.add(np.zeros(2), 1.5, 1.0, False, 1)  # a float action: keras-gym never gets there
    with pytest.raises(AttributeError):
        buf.add([0.0, 0.0], 1, 1.0, False, 1)  # still uninitialised: reads s.dtype
    with pytest.raises(rr.ConfigError):
        buf.add(np.zeros(2), 1, 1.0, False, 1)
    assert len(buf) == 0


def test_empty_ring_raises_index_error_before_the_state_shape() -> None:
    """``capacity + bootstrap_n == 0``: keras-gym's ``_init_cache`` makes arrays of 0 slots,
    encodes the action, then ``self._s[self._i] = s`` raises ``IndexError`` (index 0 of an
    axis of size 0) whatever the state's shape; the front-end checked the state's shape
    first (``ValueError: could not broadcast``)."""
    buf = ExperienceReplayBuffer(Env(), 1, batch_size=1, bootstrap_n=-1)
    with pytest.raises(IndexError):
        buf.add(np.zeros(2), 1, 1.0, False, 1)
    with pytest.raises(IndexError):
        buf.add(np.zeros(5), 1, 1.0, False, 1)  # another shape: still IndexError
    with pytest.raises(AssertionError):
        buf.add(np.zeros(2), 1.5, 1.0, False, 1)  # the action is encoded before the write
    assert buf._e.shape == (0,)


def test_first_add_failing_after_init_leaves_keras_gyms_empty_cache() -> None:
    """A first ``add`` whose action fails (``assert np.ndim(a) == 0 and isinstance(a, (int,
    np.integer))``) has run ``_init_cache`` already: keras-gym's caches exist (``_e`` is
    ``np.zeros(capacity + bootstrap_n, 'int32')``, ``_i == 0``), ``len()`` is
    ``max(0, 0 - bootstrap_n)``, and with ``bootstrap_n=-1`` ``sample()`` passes the size
    check and raises ``RuntimeError`` (empty ring). The front-end raised ``AttributeError``
    reading the caches and ``InsufficientCacheError`` sampling."""
    buf = ExperienceReplayBuffer(Env(), 4, batch_size=1, bootstrap_n=-1)
    with pytest.raises(AssertionError):
        buf.add(np.zeros(2, np.uint8), 1.0, 1.0, False, 1)
    np.testing.assert_array_equal(buf._e, np.zeros(3, np.int32))
    assert buf._s.shape == (3, 2) and buf._s.dtype == np.uint8
    assert buf._a.shape == (3, 3) and buf._a.dtype == np.float64
    assert buf._i == 0 and len(buf) == 1
    with pytest.raises(RuntimeError, match="please insert more transitions"):
        buf.sample()
    buf.add(np.ones(2, np.uint8), 2, 1.0, False, 1)  # the shapes fixed above
    assert buf._s[0].tolist() == [1, 1] and len(buf) == 2


def test_len_before_the_first_add_is_zero_with_negative_bootstrap_n() -> None:
    """keras-gym raises ``AttributeError`` there (no ``_num_transitions`` yet); the front-end
    answers 0 (accepted beyond keras-gym), not ``-bootstrap_n`` slots that do not exist."""
    buf = ExperienceReplayBuffer(Env(), 4, batch_size=1, bootstrap_n=-2)
    assert len(buf) == 0 and not buf
    with pytest.raises(rr.EmptyBufferError):
        buf.sample()
