"""rlreplay.jax._random gives jax.random's own numbers: the unrolled Threefry hash matches
jax.random.bits / uniform / split for typed and raw keys, eagerly and under jit, and any key
it cannot serve (another PRNG implementation) goes through jax.random itself."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from rlreplay.jax import _random  # noqa: E402

SIZES = [0, 1, 2, 7, 256, 1001]


def keys() -> list[Any]:
    out = [jax.random.key(s) for s in (0, 1, 12345, 2**31 - 1)]
    out.append(jax.random.fold_in(jax.random.key(3), 99))
    out.append(jax.random.PRNGKey(7))  # a raw uint32[2] key
    return out


def same(a: Any, b: Any) -> bool:
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        a, b = jax.random.key_data(a), jax.random.key_data(b)
    return bool(np.array_equal(np.asarray(a), np.asarray(b))) and a.dtype == b.dtype


@pytest.mark.parametrize("n", SIZES)
def test_bits_and_uniform_are_jax_randoms(n: int) -> None:
    for key in keys():
        assert same(_random.bits(key, n), jax.random.bits(key, (n,), jnp.uint32))
        assert same(_random.uniform(key, n), jax.random.uniform(key, (n,), jnp.float32))


def test_split_is_jax_randoms() -> None:
    for key in keys():
        a, b = _random.split(key)
        want = jax.random.split(key)
        assert same(a, want[0]) and same(b, want[1])


def test_the_same_under_jit() -> None:
    bits = jax.jit(_random.bits, static_argnums=1)
    uniform = jax.jit(_random.uniform, static_argnums=1)
    split = jax.jit(_random.split)
    for key in keys():
        assert same(bits(key, 300), jax.random.bits(key, (300,), jnp.uint32))
        assert same(uniform(key, 300), jax.random.uniform(key, (300,), jnp.float32))
        assert all(same(x, y) for x, y in zip(split(key), jax.random.split(key), strict=True))


def test_other_implementations_go_through_jax_random() -> None:
    key = jax.random.key(5, impl="rbg")
    assert _random._key_words(key) is None
    assert same(_random.bits(key, 10), jax.random.bits(key, (10,), jnp.uint32))
    assert same(_random.uniform(key, 10), jax.random.uniform(key, (10,), jnp.float32))
    a, b = _random.split(key)
    want = jax.random.split(key)
    assert same(a, want[0]) and same(b, want[1])


def test_without_the_internal_hash_jax_random_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_random, "_THREEFRY", None)
    key = jax.random.key(8)
    assert _random._key_words(key) is None
    assert same(_random.bits(key, 10), jax.random.bits(key, (10,), jnp.uint32))
    assert same(_random.uniform(key, 10), jax.random.uniform(key, (10,), jnp.float32))
