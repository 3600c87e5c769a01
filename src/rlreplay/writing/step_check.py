"""The generated prologue of a per-step ``add``: is this step the plain kind the fast path
writes, with or without its ``next_<obs>`` values?

Shared by the in-process writer (:mod:`rlreplay.writing.writer`) and the shared-memory writer's
generated ``add`` (:mod:`rlreplay.sharing.fastpath`), so both accept exactly the same
steps on their fast paths and hand the same ones to the general path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlreplay.spec.schema import PLAIN, Schema

__all__ = ["none_is_missing", "step_check_source"]


def none_is_missing(names: Sequence[str], missing: str) -> list[str]:
    """Generated lines (unindented) that turn a ``next_<obs>`` value ``None`` into ``missing``.

    ``next_obs=None`` on a step means "not given" (next observations are only read at episode
    ends), on every path; an episode end given ``None`` then fails as one not given at all.
    """
    return [f"if {v} is None: {v} = {missing}" for v in names]


def step_check_source(
    schema: Schema, lead: tuple[int, ...], missing: str = "MISSING"
) -> tuple[tuple[str, ...], list[str], dict[str, Any]]:
    """``(arg names, lines, consts)``: the tests of one step's values bound to locals ``v<i>``.

    The arguments are the schema's fields then its ``next_<obs>`` names. The lines (indented
    for a function body) leave the step's kind in ``kind`` when every ``next_<obs>`` is given
    (full checks) or none is (the fields' checks; a plain step only), and ``return 0`` (the
    general path, which names what is wrong) otherwise. ``missing`` is the name the caller's
    globals give its "not given" sentinel; ``consts`` are the other globals.
    """
    fields, next_names = tuple(schema.fields), schema.next_names()
    names = fields + next_names
    full, consts = schema.plain_check_source(names, lead)
    plain, plain_consts = schema.plain_check_source(fields, lead)
    consts.update(plain_consts)  # the same names for the same fields
    nexts = [f"v{i}" for i in range(len(fields), len(names))]
    lines = ["    " + x for x in none_is_missing(nexts, missing)]
    if not nexts:
        return names, lines + plain, consts
    lines += [f"    if {' and '.join(f'{v} is not {missing}' for v in nexts)}:"]
    lines += ["    " + x for x in full]
    lines += [f"    elif {' and '.join(f'{v} is {missing}' for v in nexts)}:"]
    lines += ["    " + x for x in plain]
    # An ending step without its next_<obs>: the general path names what is missing.
    lines += [f"        if kind != {PLAIN}:", "            return 0"]
    lines += ["    else:", "        return 0"]
    return names, lines, consts
