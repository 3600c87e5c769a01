"""Sample-time transforms on a JAX buffer: traced functions ``JaxBatch -> JaxBatch``, as the
core's (:mod:`rlreplay.transforms`) and the torch device buffer's.

A buffer's ``transforms=[...]`` (:func:`~rlreplay.jax.make_buffer`) are applied in order to
every :meth:`~rlreplay.jax.JaxBuffer.sample`, then a call's ``transform=f`` (``sample`` and
``sample_sequences``; the buffer's transforms are for transitions and do not apply to
sequences, and ``get_transitions`` applies none, as in the core). They run inside the jitted
``sample`` (and inside a user's ``jit``, ``lax.scan`` or ``vmap``): a transform gets the batch
of traced arrays and returns a new one (``batch.replace(...)``, or any mapping of arrays),
so it must be a pure, jittable function of them. A function is compiled into ``sample`` once
per function object: pass the same one each call rather than a new ``lambda``.

Randomness: a transform that declares a parameter named ``key`` is called as ``fn(batch,
key=k)``, where ``k = jax.random.fold_in(key, j)`` for the ``j``-th transform applied to the
batch (from 1), ``key`` being the one given to ``sample``. The draw itself uses ``key`` as it
would without transforms, so a batch holds the same ids with and without them, and the
transforms' keys are independent of the draw's and of each other. (The torch buffer's
transforms draw from torch's generators instead; a pure function needs its key given.)

Bindable transforms (a ``bind(buffer)`` method, :class:`rlreplay.transforms.HindsightRelabel`)
read the host buffer they are bound to: its episode index, NumPy columns and generator, which
a JAX buffer does not have. They are refused by name (:class:`~rlreplay.ConfigError`);
relabel on a core buffer (:func:`~rlreplay.jax.to_replay_buffer`) or write the relabelling as
a function of the batch's arrays.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from rlreplay.errors import ConfigError
from rlreplay.jax._lib import jax
from rlreplay.jax.batch import JaxBatch
from rlreplay.transforms.bound import unbound_transforms

__all__ = ["JaxTransform", "apply_all", "checked", "checked_all"]

JaxTransform: TypeAlias = Callable[..., Any]


#: What a bindable transform's refusal says after the reason.
_INSTEAD = (
    "which a JAX buffer does not have; sample it from a host buffer "
    "(rlreplay.jax.to_replay_buffer), or pass a jittable function JaxBatch -> JaxBatch"
)


def checked(fn: Any, name: str) -> JaxTransform:
    """``fn`` if a JAX buffer can apply it, else :class:`ConfigError` naming ``name``."""
    out: JaxTransform = unbound_transforms([fn], [name], "JaxBatch", _INSTEAD)[0]
    return out


def checked_all(fns: Any) -> tuple[JaxTransform, ...]:
    """:func:`~rlreplay.jax.make_buffer`'s ``transforms``, each checked."""
    if isinstance(fns, str | bytes) or not isinstance(fns, Sequence):
        raise ConfigError(
            f"transforms: expected a sequence of callables JaxBatch -> JaxBatch, got {fns!r}"
        )
    names = [f"transforms[{i}]" for i in range(len(fns))]
    return unbound_transforms(fns, names, "JaxBatch", _INSTEAD)


def _takes_key(fn: JaxTransform) -> bool:
    """Whether ``fn`` declares a parameter ``key`` (one that can be passed by keyword)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: no key
        return False
    p = params.get("key")
    return p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)


def apply_all(fns: Sequence[JaxTransform], batch: JaxBatch, key: Any) -> JaxBatch:
    """``batch`` through ``fns`` in order, the ``j``-th given ``fold_in(key, j)`` if it takes
    a ``key``; each result checked to be a mapping (made a :class:`JaxBatch`)."""
    for j, fn in enumerate(fns, start=1):
        out = fn(batch, key=jax.random.fold_in(key, j)) if _takes_key(fn) else fn(batch)
        if not isinstance(out, Mapping):
            raise ConfigError(
                f"transform {getattr(fn, '__name__', fn)!r}: expected it to return a JaxBatch "
                f"(batch.replace(...)) or a mapping of arrays, got {type(out).__name__}"
            )
        batch = out if isinstance(out, JaxBatch) else JaxBatch(dict(out))
    return batch
