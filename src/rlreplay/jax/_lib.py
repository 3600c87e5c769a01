"""JAX, imported on first use.

``import rlreplay.jax`` must stay free of side effects (importing JAX sets environment
variables), and the package must import where JAX is not installed, so every module of
:mod:`rlreplay.jax` reaches JAX through the proxies below: the first attribute read imports the
module, later reads come from a per-proxy cache. The proxies are typed ``Any``: JAX's own
annotations are not precise enough for mypy's strict mode to add much here.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["jax", "jnp", "lax", "require_jax"]

_HINT = "rlreplay.jax needs JAX: pip install 'rlreplay[jax]' (or any jax >= 0.4.30)"


def require_jax() -> ModuleType:
    """The ``jax`` module, or an :class:`ImportError` saying how to install it."""
    try:
        return importlib.import_module("jax")
    except ImportError as exc:
        raise ImportError(_HINT) from exc


class _Lazy:
    """A module proxy that imports ``name`` on the first attribute read."""

    def __init__(self, name: str) -> None:
        self.__dict__["_name"] = name

    def __getattr__(self, attr: str) -> Any:
        require_jax()
        value = getattr(importlib.import_module(self.__dict__["_name"]), attr)
        self.__dict__[attr] = value  # module attributes never change: read once
        return value


jax: Any = _Lazy("jax")
jnp: Any = _Lazy("jax.numpy")
lax: Any = _Lazy("jax.lax")
