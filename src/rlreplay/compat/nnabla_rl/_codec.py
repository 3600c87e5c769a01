"""How an nnabla-rl experience maps to the core's columns and back (the columnar fast path).

nnabla-rl's buffers keep the experience objects themselves and hand them back unchanged. The
columnar path may only store what it can give back *exactly as appended*, so an experience
fits it when it is a ``tuple`` ``(s, a, r, non_terminal, s_next, info, ...)`` whose ``s``,
``s_next``, ``a`` and ``r`` have the structure, kind (``ndarray``, NumPy scalar or Python
number), dtype and shape of the buffer's first experience, and whose ``non_terminal`` is a
number. Anything else raises :class:`Unfit`, and the buffer keeps it in its object store
instead (see :mod:`rlreplay.compat.nnabla_rl.replay_buffer`). Values are never cast then, so
the columnar path can neither change a value nor raise a dtype error. Buffers that have no
object store (the Atari and hindsight buffers, which need the core) build their codec with
``cast=True``: a value of another dtype is cast as NumPy assignment casts.

``non_terminal``, ``info`` and any later elements are kept as the appended objects in a side
ring aligned with the core's ids; only ``non_terminal == 0`` (the core's ``terminated``) and
``info["TimeLimit.truncated"]`` (the core's ``truncated``) reach the core.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlreplay import Field
from rlreplay.compat.nnabla_rl._stored import StoredTuple

__all__ = [
    "TIMELIMIT_KEY",
    "Codec",
    "Part",
    "Row",
    "Slot",
    "Unfit",
    "check_shape",
    "infer_part",
    "is_terminal",
    "is_timelimit",
    "same",
]

Array = np.ndarray[Any, Any]
#: The ``info`` key nnabla-rl's environment wrappers set on a time-limit truncation.
TIMELIMIT_KEY = "TimeLimit.truncated"
_INT64 = np.iinfo(np.int64)
_INT64_MIN, _INT64_MAX = int(_INT64.min), int(_INT64.max)  # iinfo's properties are slow
#: Types of tuples that fit: ``tuple``, and the tuples the store hands out (appended again,
#: they come back as such a tuple, which is what they were).
_TUPLES = (tuple, StoredTuple)


class Unfit(Exception):
    """An experience the columnar layout cannot give back exactly (it goes to the object store)."""


@dataclass(frozen=True)
class Part:
    """One core field holding one element of an experience, and how to give it back."""

    name: str
    field: Field
    kind: str  # "array" (ndarray), "numpy" (NumPy scalar) or "python" (bool/int/float)
    pytype: type | None = None  # the Python type of a "python" part

    def fits(self, value: Any) -> bool:
        """Whether ``value`` comes back unchanged from this part's column."""
        if self.kind == "array":
            return (
                type(value) is np.ndarray
                and value.dtype == self.field.dtype
                and value.shape == self.field.shape
            )
        if self.kind == "numpy":
            return isinstance(value, np.generic) and value.dtype == self.field.dtype
        if self.pytype is int:
            return type(value) is int and _INT64_MIN <= value <= _INT64_MAX
        return type(value) is self.pytype

    def coerce(self, what: str, value: Any) -> Any:
        """``value`` cast to the part's dtype as NumPy assignment casts (``arr[i] = value``).

        For buffers that have no object store (the value comes back as the part's kind and
        dtype); a value of another shape, or not numeric, is :class:`Unfit`.
        """
        if self.fits(value):
            return value
        arr = np.asarray(value)
        if arr.dtype.kind not in "biufc" or arr.shape != self.field.shape:
            raise Unfit(
                f"{what}: expected a number array of shape {self.field.shape} (as in the first "
                f"experience), got {type(value).__name__} of shape {arr.shape}"
            )
        out = np.empty(self.field.shape, self.field.dtype)
        with np.errstate(all="ignore"):
            out[...] = arr  # unsafe casting, exactly as nnabla-rl's array assignment
        return out

    def decode(self, col: Array) -> list[Any]:
        """Per-row values of a gathered column, of the kind that was appended."""
        if col.dtype != self.field.dtype:
            col = col.astype(self.field.dtype)  # the core widens integer rewards
        if self.kind == "python":
            return list(col.tolist())
        if self.kind == "array" and col.ndim == 1:
            # 0-d arrays were appended: ``list(col)`` would give NumPy scalars
            return [col[i, ...] for i in range(col.shape[0])]
        return list(col)  # row views (fresh copies made by the core) or NumPy scalars


def infer_part(name: str, value: Any, *, observation: bool) -> Part:
    """A :class:`Part` of the first appended value of an element (:class:`Unfit` if none)."""
    if type(value) is np.ndarray:
        kind, arr, pytype = "array", value, None
    elif isinstance(value, np.generic):
        kind, arr, pytype = "numpy", np.asarray(value), None
    elif type(value) in (bool, int, float):
        kind, pytype = "python", type(value)
        if pytype is int and not _INT64.min <= value <= _INT64.max:
            raise Unfit(f"{name}: an int beyond int64")
        arr = np.asarray(value)
    else:
        raise Unfit(f"{name}: a {type(value).__name__}, not an array or a number")
    if arr.dtype.kind not in "biufc":
        raise Unfit(f"{name}: dtype {arr.dtype} is not numeric")
    return Part(name, Field(arr.shape, arr.dtype, observation=observation), kind, pytype)


@dataclass(frozen=True)
class Slot:
    """An experience element that is one value or a tuple of values (``s``, ``a``)."""

    parts: tuple[Part, ...]
    is_tuple: bool

    @classmethod
    def infer(cls, base: str, value: Any, *, observation: bool) -> Slot:
        if type(value) in _TUPLES:
            if not value:
                raise Unfit(f"{base}: an empty tuple")
            parts = [
                infer_part(f"{base}_{i}", v, observation=observation) for i, v in enumerate(value)
            ]
            return cls(tuple(parts), True)
        return cls((infer_part(base, value, observation=observation),), False)

    def split(self, what: str, value: Any, cast: bool = False) -> tuple[Any, ...]:
        """The elements of ``value`` (:class:`Unfit` unless each fits its part).

        With ``cast``, an element of another dtype is cast to its part's (:meth:`Part.coerce`).
        """
        if self.is_tuple:
            if type(value) not in _TUPLES or len(value) != len(self.parts):
                raise Unfit(f"{what}: not a tuple of {len(self.parts)} values")
            values: tuple[Any, ...] = value
        else:
            values = (value,)
        if cast:
            return tuple(p.coerce(what, v) for p, v in zip(self.parts, values, strict=True))
        for p, v in zip(self.parts, values, strict=True):
            if not p.fits(v):
                raise Unfit(f"{what}: {type(v).__name__} does not fit {p.name} ({p.field})")
        return values

    def join(self, cols: list[list[Any]]) -> list[Any]:
        if self.is_tuple:
            return [StoredTuple(vals) for vals in zip(*cols, strict=True)]
        return cols[0]


@dataclass
class Row:
    """One experience that fits the columnar layout, as the core will store it (copies)."""

    obs: tuple[Any, ...]  # every element of s (Atari: the whole uint8 stack)
    next_obs: tuple[Any, ...]  # the same for s_next
    action: tuple[Any, ...]
    reward: Any
    terminal: bool  # non_terminal == 0
    timelimit: bool  # info["TimeLimit.truncated"] is true
    side: tuple[Any, ...]  # (non_terminal, info, ...): kept as the appended objects


def _copy(value: Any) -> Any:
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Byte equality (so -0.0 != 0.0 and NaN == NaN bit patterns): the round trip is exact."""
    for x, y in zip(a, b, strict=True):
        ax, ay = np.asarray(x), np.asarray(y)
        if ax.shape != ay.shape or ax.dtype != ay.dtype or ax.tobytes() != ay.tobytes():
            return False
    return True


def is_terminal(value: Any) -> bool:
    """``non_terminal == 0`` for a number (:class:`Unfit` for anything else)."""
    if type(value) in (bool, int, float) or (
        isinstance(value, np.generic) and value.dtype.kind in "biuf"
    ):
        return bool(value == 0)
    raise Unfit(f"non_terminal: a {type(value).__name__}, not a number")


def is_timelimit(info: Any) -> bool:
    if not isinstance(info, Mapping):
        return False
    try:
        return bool(info.get(TIMELIMIT_KEY, False))
    except Exception:  # an info value without a truth value (e.g. an array): not a flag
        return False


def check_shape(experience: Any) -> tuple[Any, ...]:
    """The experience if it is a tuple of at least six elements (:class:`Unfit` otherwise)."""
    if type(experience) not in _TUPLES or len(experience) < 6:
        raise Unfit("not a tuple (s, a, r, non_terminal, s_next, info, ...)")
    out: tuple[Any, ...] = experience
    return out


class Codec:
    """Maps experience tuples to core fields and back (schema inferred from one experience)."""

    def __init__(self, state: Slot, action: Slot, reward: Part, *, cast: bool = False) -> None:
        self.state = state
        self.action = action
        self.reward = reward
        #: Cast values of another dtype (buffers without an object store) instead of Unfit.
        self.cast = cast
        self._obs_names = tuple(p.name for p in state.parts)
        self._next_names = tuple("next_" + n for n in self._obs_names)
        self._action_names = tuple(p.name for p in action.parts)
        # The usual experience (one array or number per s, s_next, a; no casting) takes a
        # short path in encode: the same checks, without the generic per-part loops.
        self._single = (
            type(self).encode is Codec.encode
            and not cast
            and not state.is_tuple
            and not action.is_tuple
            and len(action.parts) == 1
        )

    @classmethod
    def infer(cls, experience: Any, *, cast: bool = False) -> Codec:
        """The schema of the first experience: one field per array (:class:`Unfit` if none)."""
        exp = check_shape(experience)
        codec = cls(
            Slot.infer("obs", exp[0], observation=True),
            Slot.infer("action", exp[1], observation=False),
            infer_part("reward", exp[2], observation=False),
            cast=cast,
        )
        codec.encode(exp)  # s_next and non_terminal must fit too
        return codec

    @property
    def obs_names(self) -> tuple[str, ...]:
        return self._obs_names

    def fields(self) -> dict[str, Field]:
        out = {p.name: p.field for p in self.state.parts + self.action.parts}
        out["reward"] = self.reward.field
        return out

    # -- writing
    def encode(self, experience: Any) -> Row:
        """The row of an experience that fits (:class:`Unfit` otherwise; nothing stored)."""
        exp = check_shape(experience)
        s, a, r, non_terminal, s_next = exp[:5]
        if self._single:
            ps = self.state.parts[0]
            if (
                ps.fits(s)
                and ps.fits(s_next)
                and self.action.parts[0].fits(a)
                and self.reward.fits(r)
                and type(self).convert_state is Codec.convert_state
            ):
                terminal, timelimit = is_terminal(non_terminal), is_timelimit(exp[5])
                side = (non_terminal, *exp[5:])
                return Row(
                    (_copy(s),), (_copy(s_next),), (_copy(a),), _copy(r), terminal, timelimit, side
                )
        obs = self.convert_state("s", s)
        next_obs = self.convert_state("s_next", s_next)
        action = tuple(_copy(v) for v in self.action.split("a", a, self.cast))
        if self.cast:
            r = self.reward.coerce("r", r)
        elif not self.reward.fits(r):
            raise Unfit(f"r: {type(r).__name__} does not fit {self.reward.field}")
        side = (non_terminal, *exp[5:])
        terminal, timelimit = is_terminal(non_terminal), is_timelimit(exp[5])
        return Row(obs, next_obs, action, _copy(r), terminal, timelimit, side)

    def convert_state(self, what: str, value: Any) -> tuple[Any, ...]:
        """The stored elements of a state (copies; subclasses may transform them)."""
        return tuple(_copy(v) for v in self.state.split(what, value, self.cast))

    def step_values(self, row: Row) -> dict[str, Any]:
        """The values :meth:`rlreplay.ReplayBuffer.add` stores for the row's step."""
        if self._single:
            return {
                self._obs_names[0]: row.obs[0],
                self._action_names[0]: row.action[0],
                "reward": row.reward,
            }
        out = dict(zip(self._obs_names, row.obs, strict=True))
        out.update(zip(self._action_names, row.action, strict=True))
        out["reward"] = row.reward
        return out

    def final_values(self, row: Row) -> dict[str, Any]:
        """``next_<obs>`` for a step that ends its episode."""
        return dict(zip(self._next_names, row.next_obs, strict=True))

    # -- reading
    def row_batch(self, row: Row) -> dict[str, Array]:
        """A row laid out like one transition of :meth:`rlreplay.ReplayBuffer.get_transitions`."""
        out: dict[str, Array] = {}
        for p, v, nv in zip(self.state.parts, row.obs, row.next_obs, strict=True):
            out[p.name] = np.asarray(v, p.field.dtype)[None]
            out["next_" + p.name] = np.asarray(nv, p.field.dtype)[None]
        for p, v in zip(self.action.parts, row.action, strict=True):
            out[p.name] = np.asarray(v, p.field.dtype)[None]
        out["reward"] = np.asarray(row.reward, self.reward.field.dtype)[None]
        return out

    def decode_state(self, batch: Mapping[str, Array], prefix: str) -> list[Any]:
        return self.state.join([p.decode(batch[prefix + p.name]) for p in self.state.parts])

    def decode(
        self, batch: Mapping[str, Array], sides: Sequence[tuple[Any, ...]]
    ) -> list[tuple[Any, ...]]:
        """Experience tuples of gathered transitions (``sides``: ``(non_terminal, info, ...)``)."""
        s = self.decode_state(batch, "")
        s_next = self.decode_state(batch, "next_")
        a = self.action.join([p.decode(batch[p.name]) for p in self.action.parts])
        r = self.reward.decode(batch["reward"])
        if sides and set(map(len, sides)) == {2}:
            # only usual experiences, (non_terminal, info) sides: the tuples in one C loop
            non_terminals, infos = zip(*sides, strict=True)
            return list(map(StoredTuple, zip(s, a, r, non_terminals, s_next, infos, strict=True)))
        out: list[tuple[Any, ...]] = []
        for si, ai, ri, sni, side in zip(s, a, r, s_next, sides, strict=True):
            if len(side) == 2:  # (non_terminal, info): the usual experience
                out.append(StoredTuple((si, ai, ri, side[0], sni, side[1])))
            else:
                out.append(StoredTuple((si, ai, ri, side[0], sni, *side[1:])))
        return out
