"""How :class:`rlreplay.ReplayBuffer` hands a public method to the part that implements it.

``dequeue = forward("_fifo", Fifo.dequeue)`` in the buffer's class body makes
``buf.dequeue(...)`` call ``buf._fifo.dequeue(...)``: the method keeps the part's signature and
docstring (``help``, ``inspect.signature`` and the API reference show them), and the class body
reads as a table of which part answers which call. The cost is one Python call (about 0.1 µs);
the hottest calls (``add``, ``sample``) are written in the buffer itself. A buffer may also
take the parts' bound methods into its instance (:func:`bind_forwarded`), which saves even
that call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = ["bind_forwarded", "forward", "forwarded_names"]

P = ParamSpec("P")
R = TypeVar("R")


def forward(
    part: str, method: Callable[Concatenate[Any, P], R], *, bind: bool = True
) -> Callable[Concatenate[Any, P], R]:
    """A method that calls ``method`` on the object in the instance attribute ``part``.

    Args:
        part: The attribute of the buffer that holds the part (``"_fifo"``).
        method: The part's method (``Fifo.dequeue``): its name, signature and docstring are
            the new method's.
        bind: Whether :func:`bind_forwarded` may put the part's bound method in the buffer's
            instance. Not for a part that reads the buffer through a weak reference (its
            configuration): ``make_buffer().save(path)`` must keep the buffer alive through
            the call, which only the forwarding method does.
    """
    name = method.__name__

    def forwarded(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, R] = getattr(getattr(self, part), name)
        return bound(*args, **kwargs)

    functools.update_wrapper(forwarded, method)
    forwarded.__qualname__ = name  # set again by the class (see __set_name__ below)
    forwarded.__forward_part__ = part if bind else None  # type: ignore[attr-defined]
    return _Named(forwarded)  # type: ignore[return-value]


class _Named:
    """Wraps the forwarding function to give it the owner class's qualified name."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __set_name__(self, owner: type, name: str) -> None:
        self.fn.__qualname__ = f"{owner.__qualname__}.{name}"
        setattr(owner, name, self.fn)


def bind_forwarded(obj: Any, names: tuple[str, ...]) -> None:
    """Put the parts' bound methods for ``names`` in ``obj``'s instance dict, so that
    ``obj.dequeue`` is ``obj._fifo.dequeue`` itself (no forwarding call). A name that
    ``obj``'s class overrides with a method of its own is left to it."""
    cls = type(obj)
    for name in names:
        fn = getattr(cls, name)
        part = getattr(fn, "__forward_part__", None)
        if part is not None:
            obj.__dict__[name] = getattr(getattr(obj, part), fn.__name__)


def forwarded_names(cls: type) -> tuple[str, ...]:
    """The names of ``cls``'s own body that :func:`forward` made."""
    return tuple(n for n, v in vars(cls).items() if getattr(v, "__forward_part__", None))
