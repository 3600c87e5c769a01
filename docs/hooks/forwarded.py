"""A Griffe extension for mkdocstrings: a buffer method that a part answers is documented as
the part's method.

:class:`rlreplay.ReplayBuffer` hands some public methods to the part that implements them, in
its class body: ``dequeue = forward("_fifo", Fifo.dequeue)`` (the part's method) or
``to_arrow = exports.to_arrow`` (a module function that takes the buffer first). At run time
those are methods with the part's signature and docstring; read statically, Griffe sees class
attributes. This extension replaces each such attribute by a copy of the function it names
(parameters, return annotation, docstring), so the API reference shows it as a method of the
buffer. The source files are not changed.
"""

from __future__ import annotations

from typing import Any

import griffe


def _target_path(value: Any) -> str | None:
    """The function an attribute's value names: ``forward(part, X.m)`` or ``module.f``."""
    if isinstance(value, griffe.ExprCall) and str(value.function) == "forward":
        if len(value.arguments) >= 2 and isinstance(value.arguments[1], griffe.ExprAttribute):
            return str(value.arguments[1].canonical_path)
        return None
    if isinstance(value, griffe.ExprAttribute):
        return str(value.canonical_path)
    return None


def _method_copy(name: str, target: griffe.Function, parent: griffe.Class) -> griffe.Function:
    params = list(target.parameters)
    if params and params[0].name != "self":  # a module function taking the buffer first
        first = params[0]
        params[0] = griffe.Parameter("self", annotation=None, kind=first.kind, default=None)
    docstring = None
    if target.docstring is not None:
        docstring = griffe.Docstring(
            target.docstring.value,
            lineno=target.docstring.lineno,
            endlineno=target.docstring.endlineno,
            parser=target.docstring.parser,
            parser_options=target.docstring.parser_options,
        )
    method = griffe.Function(
        name,
        lineno=target.lineno,
        endlineno=target.endlineno,
        parameters=griffe.Parameters(*params),
        returns=target.returns,
        docstring=docstring,
        parent=parent,
    )
    if docstring is not None:
        docstring.parent = method
    return method


class Forwarded(griffe.Extension):
    """Documents forwarded methods as methods (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._visit(pkg, pkg)

    def _visit(self, obj: griffe.Object, pkg: griffe.Module) -> None:
        for member in list(obj.members.values()):
            if member.is_alias:
                continue
            if isinstance(member, griffe.Class):
                self._replace(member, pkg)
            if isinstance(member, griffe.Module | griffe.Class):
                self._visit(member, pkg)

    def _replace(self, cls: griffe.Class, pkg: griffe.Module) -> None:
        for name, member in list(cls.members.items()):
            if member.is_alias or not isinstance(member, griffe.Attribute):
                continue
            path = _target_path(member.value)
            if path is None or not path.startswith(pkg.path + "."):
                continue
            try:
                target = pkg.modules_collection[path]
            except KeyError:
                continue
            if isinstance(target, griffe.Function):
                cls.set_member(name, _method_copy(name, target, cls))
