"""The sampler contract (:class:`rlreplay.sampling.Sampler`) as check functions.

Every check takes a *factory* ``make()`` that returns a fresh, unbound sampler, and raises
``AssertionError`` (or the library's error) when the sampler breaks the contract.
``sampler_checks()`` lists them, so a test module runs them over one implementation with
``pytest.mark.parametrize`` (see ``test_sampler.py``), and ``check_sampler(make)`` runs them in
a row (as scikit-learn's ``check_estimator``). A new sampler (another law, or a device backend's)
passes them to be real.

The checks drive a sampler through the buffer that owns it (``rr.ReplayBuffer(...,
sampler=make())``), since the buffer is what calls it; the reference for "which transitions
may be drawn" is the buffer's episode index (``sampleable_ids``), and the reference for the law
is the probability each draw reports (or, for a sampler that reports none, uniform).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import rlreplay as rr
from rlreplay.errors import ConfigError, EmptyBufferError
from rlreplay.sampling import DrawOptions, Sampler, sampler_from_config

__all__ = ["SamplerFactory", "check_sampler", "sampler_checks"]

Array = np.ndarray[Any, Any]
SamplerFactory = Callable[[], Sampler]
FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}


def buffer_with(make: SamplerFactory, capacity: int = 32, **kwargs: Any) -> rr.ReplayBuffer:
    kwargs.setdefault("seed", 5)
    return rr.ReplayBuffer(capacity, FIELDS, sampler=make(), **kwargs)


def add_steps(buf: rr.ReplayBuffer, n: int, start: int = 0, every: int = 5) -> None:
    """``n`` steps per env; an episode ends every ``every`` steps (alternately terminated and
    truncated)."""
    E = buf.num_envs
    shape = (E,) if E > 1 else ()
    for i in range(start, start + n):
        end = i % every == every - 1
        buf.add(
            obs=np.full((*shape, 2), i, np.float32),
            action=np.full(shape, i % 3, np.int64),
            reward=np.full(shape, 0.5 * i, np.float32),
            terminated=np.full(shape, end and i % 2 == 0),
            truncated=np.full(shape, end and i % 2 == 1),
            next_obs=np.full((*shape, 2), -i, np.float32),
        )


def has_priorities(buf: rr.ReplayBuffer) -> bool:
    """Whether the buffer's sampler takes priorities (``update`` does not refuse them)."""
    try:
        buf._sampler.update(buf._index, np.zeros(0, np.int64), np.zeros(0))
    except ConfigError:
        return False
    return True


def law(buf: rr.ReplayBuffer, batch: rr.Batch) -> dict[int, float]:
    """id -> probability each drawn id has under the law the draw reports (uniform over the
    sampleable ids where the sampler reports none)."""
    if "probabilities" in batch:
        return dict(zip(batch.ids.tolist(), batch.probabilities.tolist(), strict=True))
    ids = buf.sampleable_ids()
    return {int(i): 1.0 / ids.shape[0] for i in ids}


# ---------------------------------------------------------------------- checks
def check_is_a_sampler(make: SamplerFactory) -> None:
    """It meets the protocol, names its law and says which kernel (if any) may draw for it."""
    s = make()
    assert isinstance(s, Sampler)
    assert isinstance(s.name, str) and s.name
    assert isinstance(s.tracks_sampleable, bool)
    assert s.kernel in (None, "uniform", "prioritized")
    json.dumps(s.config())  # JSON-able parameters


def check_binds_to_one_buffer(make: SamplerFactory) -> None:
    """A sampler belongs to the buffer that bound it; a second buffer is refused (and that
    buffer's construction fails with a ConfigError naming the sampler)."""
    s = make()
    rr.ReplayBuffer(16, FIELDS, sampler=s)
    with pytest.raises(ConfigError, match="sampler"):
        rr.ReplayBuffer(16, FIELDS, sampler=s)


def check_empty_buffer_raises_and_keeps_the_stream(make: SamplerFactory) -> None:
    """Nothing sampleable: ``EmptyBufferError``, and the random stream has not moved."""
    buf, twin = buffer_with(make), buffer_with(make)
    with pytest.raises(EmptyBufferError):
        buf.sample(4)
    add_steps(buf, 12)
    add_steps(twin, 12)
    np.testing.assert_array_equal(buf.sample(8).ids, twin.sample(8).ids)


def check_draws_only_sampleable_transitions(make: SamplerFactory) -> None:
    """Every drawn id is sampleable now, in the env it names; weights are float32 in (0, 1]
    and reported probabilities float64 in (0, 1]."""
    for num_envs in (1, 3):
        buf = buffer_with(make, capacity=30, num_envs=num_envs, n_step=2)
        for round_ in range(6):
            add_steps(buf, 7, start=7 * round_)  # wraps the rings several times
            sampleable = set(buf.sampleable_ids().tolist())
            batch = buf.sample(64)
            assert set(batch.ids.tolist()) <= sampleable
            np.testing.assert_array_equal(batch.ids % num_envs, batch.env_ids)
            assert batch.weights.dtype == np.float32
            assert ((batch.weights > 0) & (batch.weights <= 1)).all()
            if "probabilities" in batch:
                p = batch.probabilities
                assert p.dtype == np.float64 and ((p > 0) & (p <= 1)).all()


def check_batches_equal_get_transitions(make: SamplerFactory) -> None:
    """A sampled batch holds exactly what ``get_transitions`` assembles for its ids (whichever
    path, one-call kernel or draw then assemble, produced it)."""
    buf = buffer_with(make, capacity=40, num_envs=2, n_step=3, frame_stack=2)
    add_steps(buf, 33)
    batch = buf.sample(32)
    again = buf.get_transitions(batch.ids)
    for key in again:
        np.testing.assert_array_equal(batch[key], again[key], err_msg=key)


def check_kernel_and_general_path_agree(make: SamplerFactory) -> None:
    """A sampler whose ``kernel`` names a one-call kernel gives the same batches, bit for bit,
    as the same law drawn through ``draw`` (a subclass that draws its own way, which the
    buffer must send down the general path)."""
    proto = make()
    if proto.kernel is None:
        return

    class General(type(proto)):  # type: ignore[misc]
        def draw(self, *args: Any, **kwargs: Any) -> Any:
            return super().draw(*args, **kwargs)

    general = General(**proto.config())
    assert general.kernel is None
    a = rr.ReplayBuffer(40, FIELDS, sampler=proto, seed=9, n_step=2)
    b = rr.ReplayBuffer(40, FIELDS, sampler=general, seed=9, n_step=2)
    for round_ in range(4):
        add_steps(a, 11, start=11 * round_)
        add_steps(b, 11, start=11 * round_)
        x, y = a.sample(16), b.sample(16)
        assert set(x) == set(y)
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


def check_follows_its_law(make: SamplerFactory) -> None:
    """Draw frequencies match the law the draws report (χ², p > 1e-4 over 40,000 draws)."""
    buf = buffer_with(make, capacity=24, seed=11)
    add_steps(buf, 20, every=7)
    if has_priorities(buf):
        ids = buf.sampleable_ids()
        buf._sampler.update(buf._index, ids, 1.0 + (ids % 4).astype(np.float64))
    counts: dict[int, int] = {}
    probs: dict[int, float] = {}
    for _ in range(40):
        batch = buf.sample(1000)
        probs.update(law(buf, batch))
        for i, c in zip(*np.unique(batch.ids, return_counts=True), strict=True):
            counts[int(i)] = counts.get(int(i), 0) + int(c)
    ids = sorted(probs)
    observed = np.array([counts.get(i, 0) for i in ids], np.float64)
    expected = np.array([probs[i] for i in ids]) * observed.sum()
    assert abs(expected.sum() - observed.sum()) < 1e-6 * observed.sum()
    assert set(counts) <= set(probs)
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def check_same_seed_same_draws(make: SamplerFactory) -> None:
    """Same seed and same steps: the same draws (all randomness is the buffer's generator)."""
    a, b = buffer_with(make, seed=3), buffer_with(make, seed=3)
    for buf in (a, b):
        add_steps(buf, 25)
    for _ in range(3):
        np.testing.assert_array_equal(a.sample(16).ids, b.sample(16).ids)


def check_state_round_trips(make: SamplerFactory, tmp_path: Path) -> None:
    """Its configuration and state travel with the buffer: a checkpoint, a ``state_dict`` and
    a copy each continue with exactly the draws the original makes."""
    buf = buffer_with(make, capacity=24, seed=4)
    add_steps(buf, 30)
    if has_priorities(buf):
        ids = buf.sampleable_ids()
        buf._sampler.update(buf._index, ids, (ids % 5).astype(np.float64) + 0.5)
    buf.sample(8)
    buf.save(tmp_path / "s.ckpt")
    loaded = rr.load(tmp_path / "s.ckpt")
    assert type(loaded._sampler) is type(buf._sampler)
    assert loaded._sampler.config() == buf._sampler.config()
    twin = buffer_with(make, capacity=24, seed=4)  # the same configuration, nothing stored
    twin.load_state_dict(buf.state_dict())
    copied = copy.copy(buf)
    for _ in range(3):
        want = buf.sample(16)
        for other in (loaded, twin, copied):
            got = other.sample(16)
            for key in want:
                np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def check_rebuilds_from_its_config(make: SamplerFactory) -> None:
    """``sampler_from_config({"name": ..., **config()})`` makes an unbound sampler of the same
    class and parameters (how checkpoints and copies rebuild it)."""
    s = make()
    again = sampler_from_config({"name": s.name, **s.config()})
    assert type(again) is type(s) and again.config() == s.config()


def check_sequence_starts(make: SamplerFactory) -> None:
    """``draw_starts`` chooses stored steps; with ``pad=False`` every start has ``L`` real
    steps within its episode."""
    buf = buffer_with(make, capacity=40, num_envs=2)
    add_steps(buf, 26, every=6)
    r = buf.stored_range()
    stored = {t * 2 + e for e in range(2) for t in range(int(r.first[e]), int(r.end[e]))}
    batch = buf.sample_sequences(32, 4)
    assert set(batch.ids.tolist()) <= stored
    tight = buf.sample_sequences(32, 4, pad=False)
    assert tight.mask.all()
    assert not tight.terminated[:, :-1].any() and not tight.truncated[:, :-1].any()


def check_updates_follow_ids(make: SamplerFactory) -> None:
    """A sampler without priorities refuses updates with a ConfigError; one with them applies
    an update to the ids given (a higher priority never gets a lower probability), and ignores
    and counts stale ids."""
    buf = buffer_with(make, capacity=16)
    add_steps(buf, 12, every=100)
    ids = buf.sampleable_ids()
    if not has_priorities(buf):
        with pytest.raises(ConfigError):
            buf._sampler.update(buf._index, ids, np.ones(ids.shape[0]))
        return
    high = ids[::2]
    p = np.where(np.isin(ids, high), 50.0, 1.0)
    assert buf._sampler.update(buf._index, ids, p) == 0
    batch = buf.sample(500)
    is_high = np.isin(batch.ids, high)
    assert is_high.any()
    if (~is_high).any():
        assert batch.probabilities[is_high].min() > batch.probabilities[~is_high].max()
    add_steps(buf, 16, start=12, every=100)  # overwrites every earlier step
    assert buf._sampler.update(buf._index, ids, np.ones(ids.shape[0])) == ids.shape[0]


def check_options_are_checked(make: SamplerFactory) -> None:
    """Draw options the law cannot honour are refused with a ConfigError, before any draw."""
    s = make()
    s.check_options(DrawOptions(0.0, 1, True))  # the plain options: every law takes them
    buf = buffer_with(make)
    add_steps(buf, 10)
    twin = buffer_with(make)
    add_steps(twin, 10)
    for opts in ({"recent_ratio": 0.5, "recent_steps": 4}, {"replacement": False}):
        try:
            buf.sample(4, **opts)
            twin.sample(4, **opts)
        except ConfigError:
            pass
    np.testing.assert_array_equal(buf.sample(8).ids, twin.sample(8).ids)


def check_random_operations(make: SamplerFactory) -> None:
    """Random writes, episode ends, clears and samples on two envs: every batch holds only
    sampleable ids (the sampler follows every change of the sampleable set)."""

    @settings(max_examples=25, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(["add", "end", "clear", "sample"]),
                              st.integers(1, 9)), max_size=40))  # fmt: skip
    def run(ops: list[tuple[str, int]]) -> None:
        buf = buffer_with(make, capacity=20, num_envs=2, n_step=2)
        t = 0
        for op, k in ops:
            if op == "add":
                add_steps(buf, k, start=t, every=1000)
                t += k
            elif op == "end":
                add_steps(buf, 1, start=4, every=5)  # step 4 of 5: ends an episode
            elif op == "clear":
                buf.clear()
            elif buf.num_sampleable:
                batch = buf.sample(k)
                assert set(batch.ids.tolist()) <= set(buf.sampleable_ids().tolist())

    run()


_CHECKS: list[Callable[..., None]] = [
    check_is_a_sampler,
    check_binds_to_one_buffer,
    check_empty_buffer_raises_and_keeps_the_stream,
    check_draws_only_sampleable_transitions,
    check_batches_equal_get_transitions,
    check_kernel_and_general_path_agree,
    check_follows_its_law,
    check_same_seed_same_draws,
    check_state_round_trips,
    check_rebuilds_from_its_config,
    check_sequence_starts,
    check_updates_follow_ids,
    check_options_are_checked,
    check_random_operations,
]


def sampler_checks() -> list[Callable[..., None]]:
    """Every check of the contract (a check that needs a directory takes ``tmp_path``)."""
    return list(_CHECKS)


def check_sampler(make: SamplerFactory, tmp_path: Path) -> None:
    """Run every check in a row."""
    for check in _CHECKS:
        if "tmp_path" in check.__code__.co_varnames[: check.__code__.co_argcount]:
            check(make, tmp_path)
        else:
            check(make)
