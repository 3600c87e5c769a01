"""A Griffe extension for mkdocstrings: Sphinx roles become cross-references, "Example:"
sections are read as Google style's examples, Args entries naming several parameters are split,
and "text::" loses its second colon.

rlreplay's docstrings follow Google style, and name other objects with Sphinx roles
(``:class:`ReplayBuffer```, ``:meth:`add```, ``:mod:`rlreplay.io```). Markdown has no such
syntax, so each role is rewritten before the docstring is parsed: the name is resolved in the
scope of the documented object, and becomes an optional cross-reference (a link where the
target is rendered on some page of the site, inline code otherwise). The source files are not
changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

# Google style's examples section is "Examples:"; the docstrings also write "Example:", which
# Griffe would read as an admonition titled Example (doctest lines shown as quotes).
_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
# reStructuredText's "text::" introduces the indented literal block that follows; Markdown shows
# that block as code by its indentation alone, so one colon is kept.
_LITERAL = re.compile(r"(\S)::[ \t]*$", re.MULTILINE)
_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|obj|exc|const):`([^`]+)`")


_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Other Parameters):\s*$")
_NAMES = re.compile(r"^\w+(?:,\s*\w+)+$")
_NAMES_WRAPPED = re.compile(r"^\w+(?:,\s*\w+)*,$")


def _split_shared_entries(text: str) -> str:
    """Args entries naming several parameters (``a, b, c: what they are``, the names possibly
    wrapped onto a second line) become one entry per parameter with the same description, so
    each parameter gets its row, type and default."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    section: int | None = None  # indent of the current Args header
    entry: int | None = None  # indent of its entries
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        if (match := _SECTION.match(line)) is not None:
            section, entry = len(match[1]), None
            out.append(line)
            i += 1
            continue
        if section is not None and line.strip() and indent <= section:
            section = None
        if section is None or not line.strip():
            out.append(line)
            i += 1
            continue
        entry = indent if entry is None else entry
        head = line.strip()
        # Names wrapped onto the next line: "a, b," then "    c: ...".
        while indent == entry and _NAMES_WRAPPED.match(head) and i + 1 < len(lines):
            i += 1
            head = f"{head} {lines[i].strip()}"
        names, colon, rest = head.partition(":")
        if indent != entry or not colon or not _NAMES.match(names.strip()):
            out.append(line if head == line.strip() else " " * indent + head)
            i += 1
            continue
        more = []
        while i + 1 < len(lines) and (
            not lines[i + 1].strip() or len(lines[i + 1]) - len(lines[i + 1].lstrip()) > entry
        ):
            if not lines[i + 1].strip() and not (
                i + 2 < len(lines) and len(lines[i + 2]) - len(lines[i + 2].lstrip()) > entry
            ):
                break
            i += 1
            more.append(lines[i])
        for name in (n.strip() for n in names.split(",")):
            out += [f"{' ' * entry}{name}:{rest}", *more]
        i += 1
    return "\n".join(out)


def _target(obj: griffe.Object, name: str) -> str | None:
    """The full path ``name`` refers to in the scope of ``obj`` (None when unknown)."""
    if name.startswith("rlreplay."):
        return name
    head, _, rest = name.partition(".")
    try:
        path = obj.resolve(head)
    except (griffe.NameResolutionError, AttributeError, KeyError):
        return None
    return f"{path}.{rest}" if rest else path


class SphinxRoles(griffe.Extension):
    """Rewrites ``:role:`name``` into optional autorefs links."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        docstring = obj.docstring
        if docstring is None:
            return
        docstring.value = _split_shared_entries(docstring.value)
        docstring.value = _LITERAL.sub(r"\1:", _EXAMPLE.sub(r"\1Examples:", docstring.value))
        if ":`" not in docstring.value:
            return
        scope = obj if obj.is_class or obj.is_module else (obj.parent or obj)

        def replace(match: re.Match[str]) -> str:
            text = match.group(1).strip().lstrip("!")
            short = text.startswith("~")
            name = text.lstrip("~.").removesuffix("()")
            shown = name.rsplit(".", 1)[-1] if short else name
            target = _target(scope, name)
            if target is None:
                return f"`{shown}`"
            return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'

        docstring.value = _ROLE.sub(replace, docstring.value)
