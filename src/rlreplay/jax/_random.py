"""Random numbers for the JAX buffer's draws: :mod:`jax.random`'s own values, computed faster on
a CPU.

JAX lowers its Threefry hash on the CPU as a rolled loop (five rounds of a ``while``, which
compiles faster), and each round runs as its own kernels: drawing 256 words that way costs a
uniform ``sample`` of 256 about a third of its time. The same hash unrolled (JAX's own lowering
function, called with ``use_rolled_loops=False`` as JAX does on other platforms) fuses into the
consumer. :func:`bits`, :func:`uniform` and :func:`split` return exactly what
``jax.random.bits``, ``jax.random.uniform`` and ``jax.random.split`` return (the tests compare
them for many keys and sizes). That lowering function is a JAX internal, so it is imported
here only: a key of another PRNG implementation, JAX's non-partitionable Threefry mode
(``jax_threefry_partitionable=False``), or a JAX without that function all go through
:mod:`jax.random` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlreplay.jax._lib import jax, jnp, lax

__all__ = ["bits", "split", "uniform"]


_UNSET: Any = object()
#: JAX's Threefry-2x32 lowering function once looked up (``None``: this JAX lacks it).
_THREEFRY: Any = _UNSET


def _lowering() -> Callable[..., Any] | None:
    """JAX's Threefry-2x32 lowering function (an internal of JAX), looked up on first use (so
    that importing this module does not import JAX), or ``None`` if this JAX lacks it."""
    global _THREEFRY
    if _THREEFRY is _UNSET:
        try:
            from jax._src.random.threefry2x32 import _threefry2x32_lowering
        except ImportError:  # a JAX that moved it: jax.random serves
            _THREEFRY = None
        else:
            _THREEFRY = _threefry2x32_lowering
    out: Callable[..., Any] | None = _THREEFRY
    return out


def _key_words(key: Any) -> tuple[Any, Any] | None:
    """The two uint32 words of a Threefry key (typed or raw) when the unrolled hash gives
    :mod:`jax.random`'s values for it, else ``None``."""
    if _lowering() is None or not jax.config.jax_threefry_partitionable:
        return None
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != () or str(jax.random.key_impl(key)) != "threefry2x32":
            return None
        data = jax.random.key_data(key)
    else:  # a raw key (jax.random.PRNGKey): the default implementation's
        if key.shape != (2,) or jax.config.jax_default_prng_impl != "threefry2x32":
            return None
        data = key
    return data[0], data[1]


def _hash(words: tuple[Any, Any], n: int) -> tuple[Any, Any]:
    """Threefry-2x32 of the counters ``(0, i)``, ``i < n``: JAX's partitionable counters."""
    threefry = _lowering()
    assert threefry is not None
    hi = jnp.zeros((n,), jnp.uint32)
    lo = lax.iota(np.uint32, n)
    b1, b2 = threefry(words[0], words[1], hi, lo, use_rolled_loops=False)
    return b1, b2


def bits(key: Any, n: int) -> Any:
    """``jax.random.bits(key, (n,), jnp.uint32)``."""
    words = _key_words(key)
    if words is None:
        return jax.random.bits(key, (n,), jnp.uint32)
    b1, b2 = _hash(words, n)
    return b1 ^ b2


def uniform(key: Any, n: int) -> Any:
    """``jax.random.uniform(key, (n,), jnp.float32)``: floats in ``[0, 1)`` from the top 23
    bits of each word."""
    words = _key_words(key)
    if words is None:
        return jax.random.uniform(key, (n,), jnp.float32)
    b = bits(key, n)
    one = np.array(1.0, np.float32).view(np.uint32)
    floats = lax.bitcast_convert_type((b >> np.uint32(9)) | one, jnp.float32)
    return lax.max(jnp.float32(0.0), floats - jnp.float32(1.0))


def split(key: Any) -> tuple[Any, Any]:
    """``jax.random.split(key)``, as two keys."""
    words = _key_words(key)
    if words is None:
        a, b = jax.random.split(key)
        return a, b
    b1, b2 = _hash(words, 2)
    data = jnp.stack([b1, b2], axis=1)  # (2, 2): a key's words per row
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        keys = jax.random.wrap_key_data(data, impl="threefry2x32")
    else:
        keys = data
    return keys[0], keys[1]
