"""Field declarations, the buffer's schema, and the rules that turn user input into storable arrays.

A :class:`Field` declares the shape and dtype of one value stored per environment step. A
:class:`Schema` is the buffer's full set of fields (declared ones plus the built-in ``reward``,
``terminated`` and ``truncated``) and owns input validation:

* NumPy arrays (and NumPy scalars) are accepted when NumPy's ``same_kind`` rule allows the cast to
  the field's dtype (``float64 -> float32`` is fine, ``float -> int`` is not); narrowing integer
  casts are additionally checked value by value, so nothing wraps around silently.
* Python scalars follow NumPy's weak-scalar rules: accepted when the value fits the dtype
  (``3`` into ``uint8`` yes, ``300`` no, ``1.5`` into ``int64`` no, ``1`` into ``bool`` no).
* Lists and other array-likes go through :func:`numpy.asarray` first and then the array rule.

Validation never writes anything: it returns values that can be assigned into storage without
any further failure, so a rejected call leaves the buffer unchanged.
"""

from __future__ import annotations

import functools
import keyword
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np

from rlreplay.codegen import define
from rlreplay.errors import ConfigError, DTypeError, FieldError, ShapeError
from rlreplay.spec.arguments import shown

__all__ = [
    "BUILTIN_FIELDS",
    "RESERVED_NAMES",
    "Field",
    "FieldLike",
    "Schema",
    "as_field",
    "clip_pair",
    "int_at_least",
    "narrowed_cast",
    "positive_int",
]

ShapeLike: TypeAlias = int | tuple[int, ...] | list[int]
FieldLike: TypeAlias = "Field | tuple[Any, Any]"

#: Names that samples compute; a declared field may not use them.
RESERVED_NAMES = frozenset(
    {
        "discount",
        "steps",
        "ids",
        "env_ids",
        "weights",
        "probabilities",
        "mask",
        "discounted_return",
        "next_known",
        "lengths",
        "block",
        "timeout",
        "env_id",
        "transform",
    }
)


@dataclass(frozen=True)
class Field:
    """Shape and dtype of one value stored per environment step.

    Args:
        shape: Shape of one step's value (``()`` for a scalar). An int ``n`` means ``(n,)``.
        dtype: Anything :class:`numpy.dtype` accepts.
        observation: Whether this is an observation field: stored once per step, with the
            next observation taken from the following step of the same episode (or from the
            final observation passed as ``next_<name>`` when the episode ends). ``obs`` is
            always an observation field.

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> rr.Field((84, 84), np.uint8, observation=True).nbytes
        7056
    """

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    observation: bool = False

    def __init__(self, shape: ShapeLike, dtype: Any, observation: bool = False) -> None:
        if isinstance(shape, int | np.integer):
            shape = (int(shape),)
        if not isinstance(shape, tuple | list) or not all(
            isinstance(s, int | np.integer) and not isinstance(s, bool) for s in shape
        ):
            raise ConfigError(f"Field shape: expected a tuple of non-negative ints, got {shape!r}")
        norm = tuple(int(s) for s in shape)
        if any(s < 0 for s in norm):
            raise ConfigError(f"Field shape: expected non-negative sizes, got {norm}")
        try:
            dt = np.dtype(dtype)
        except (TypeError, ValueError, SyntaxError) as exc:  # e.g. a malformed dtype string
            raise ConfigError(f"Field dtype: {dtype!r} is not a NumPy dtype") from exc
        if dt.kind not in "biufc":
            raise ConfigError(
                f"Field dtype: expected a boolean or numeric dtype, got {dt} (kind {dt.kind!r})"
            )
        object.__setattr__(self, "shape", norm)
        object.__setattr__(self, "dtype", dt)
        object.__setattr__(self, "observation", bool(observation))

    @property
    def nbytes(self) -> int:
        """Bytes one step's value takes."""
        return math.prod(self.shape) * self.dtype.itemsize  # Python ints: never wraps

    def to_json(self) -> dict[str, Any]:
        """A JSON-able description (for checkpoints)."""
        return {"shape": list(self.shape), "dtype": self.dtype.str, "observation": self.observation}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Field:
        """Inverse of :meth:`to_json`."""
        return cls(tuple(d["shape"]), np.dtype(d["dtype"]), bool(d["observation"]))


def as_field(name: str, value: Field | tuple[Any, Any]) -> Field:
    """Accept a :class:`Field` or a ``(shape, dtype)`` tuple for field ``name``."""
    if isinstance(value, Field):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return Field(value[0], value[1])
    raise ConfigError(
        f"fields[{name!r}]: expected rr.Field(shape, dtype) or a (shape, dtype) tuple, "
        f"got {value!r}"
    )


BUILTIN_FIELDS: dict[str, Field] = {
    "reward": Field((), np.float32),
    "terminated": Field((), np.bool_),
    "truncated": Field((), np.bool_),
}

_PY_SCALARS = (bool, int, float, complex)
# What Schema.plain_check's tests return for values stored as they are: no row ends its
# episode, or some row does (0: some value needs converting).
PLAIN, ENDING = 1, 2
_MAX_CACHED = 512


@dataclass
class Schema:
    """The fields of a buffer and the input rules for them.

    Invariants: ``obs`` (if declared) is an observation field; there is at least one
    observation field; ``reward``/``terminated``/``truncated`` are always present (``reward`` may
    be redeclared with another shape/dtype, the two flags are always bool scalars); names are
    identifiers, not reserved and do not start with ``next_``.
    """

    fields: dict[str, Field]
    observation_names: tuple[str, ...] = field(init=False)
    _ok: set[tuple[str, np.dtype[Any], tuple[int, ...], tuple[int, ...]]] = field(
        init=False, default_factory=set, repr=False
    )

    _by_name: dict[str, Field] = field(init=False, repr=False)
    _scalar_ok: set[tuple[str, type]] = field(init=False, repr=False)
    _scalar_bounds: dict[tuple[str, type], tuple[float, float]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.observation_names = tuple(n for n, f in self.fields.items() if f.observation)
        self._by_name = dict(self.fields)
        self._by_name.update({"next_" + n: self.fields[n] for n in self.observation_names})
        # Python scalar types that always fit a scalar field (ints into integer fields are
        # range-checked, so they are not listed): the per-step fast path is one set lookup.
        # Floats (and ints) into float fields narrower than float64 must be range-checked.
        kinds = {"b": (bool,), "f": (bool,), "c": (bool, int, float, complex)}
        self._scalar_ok = {
            (name, tp)
            for name, f in self._by_name.items()
            if f.shape == ()
            for tp in kinds.get(f.dtype.kind, (bool,))
        }
        # (name, int) and (name, float) for scalar fields that take them, with the value range
        # that fits; the fast path is one dict lookup and a comparison.
        self._scalar_bounds = {}
        for name, f in self._by_name.items():
            if f.shape != ():
                continue
            if f.dtype.kind in "iu":
                self._scalar_bounds[(name, int)] = _int_range(f.dtype)
            elif f.dtype.kind == "f":
                big = float(np.finfo(f.dtype).max)
                self._scalar_bounds[(name, int)] = (-big, big)
                self._scalar_bounds[(name, float)] = (-big, big)

    @classmethod
    def build(cls, declared: Mapping[str, Field | tuple[Any, Any]]) -> Schema:
        """Validate the user's ``fields=`` argument and add the built-in fields."""
        if not isinstance(declared, Mapping):
            raise ConfigError(
                f"fields: expected a mapping of name -> rr.Field, got {type(declared).__name__}"
            )
        out: dict[str, Field] = {}
        for name, value in declared.items():
            _check_name(name)
            f = as_field(name, value)
            if name == "obs" and not f.observation:
                f = Field(f.shape, f.dtype, observation=True)
            if name in ("terminated", "truncated") and (f.shape != () or f.dtype != np.bool_):
                raise ConfigError(
                    f"fields[{name!r}]: {name} is built in as a bool scalar; "
                    f"got shape {f.shape} dtype {f.dtype}"
                )
            if name in BUILTIN_FIELDS and f.observation:
                raise ConfigError(f"fields[{name!r}]: {name} cannot be an observation field")
            out[name] = f
        if not any(f.observation for f in out.values()):
            raise ConfigError(
                "fields: expected at least one observation field ('obs', or a field declared "
                f"rr.Field(..., observation=True)); got {sorted(out)}"
            )
        for name, f in BUILTIN_FIELDS.items():
            out.setdefault(name, f)
        return cls(out)

    # ------------------------------------------------------------------ queries
    def __contains__(self, name: object) -> bool:
        return name in self.fields

    @property
    def names(self) -> tuple[str, ...]:
        """All stored field names, declaration order, built-ins last."""
        return tuple(self.fields)

    def lookup(self, name: str) -> Field:
        """The field ``name`` (a ``next_<obs>`` name gives its observation field)."""
        return self._by_name[name]

    def plain_check(
        self, names: Sequence[str], lead: tuple[int, ...]
    ) -> Callable[[Mapping[str, Any]], int]:
        """Compile the test of the per-step fast path for values named ``names``.

        The returned function tells, without raising, whether a mapping that has exactly the
        keys ``names`` (the caller checks the count) holds, for each name, a value that needs
        no conversion: a NumPy array of the field's dtype and shape ``lead + shape``; with no
        ``lead``, also a Python scalar that fits, or the field's NumPy scalar type. Such values
        are valid by the same rules as :meth:`convert` and can be stored as they are. It
        returns :data:`PLAIN` if they are and no ``terminated``/``truncated`` flag is set,
        :data:`ENDING` if some flag is set, and ``0`` if some value needs :meth:`convert`.
        """
        lines, consts = self.plain_check_source(names, lead)
        bind = ["    get = values.get"] + [f"    v{i} = get({n!r})" for i, n in enumerate(names)]
        source = ["def check(values):", *bind, *lines, "    return kind"]
        check: Callable[[Mapping[str, Any]], int] = define(
            source, "check", consts, "<rlreplay plain_check>"
        )
        return check

    def plain_check_source(
        self, names: Sequence[str], lead: tuple[int, ...]
    ) -> tuple[list[str], dict[str, Any]]:
        """The body of :meth:`plain_check`: the tests of values bound to locals ``v<i>``.

        Straight-line Python generated once per schema (as :mod:`dataclasses` generates
        ``__init__``): a loop over field descriptions costs about twice as much per value.
        The lines (indented for a function body) test local ``v<i>``, the value of
        ``names[i]``, and leave the verdict in ``kind``, or ``return 0``; ``consts`` are their
        globals.
        """
        consts: dict[str, Any] = {"nd": np.ndarray, "zeros": bytes(math.prod(lead))}
        lines = [f"    kind = {PLAIN}"]
        for i, name in enumerate(names):
            f = self._by_name[name]
            v = f"v{i}"
            consts[f"d{i}"], consts[f"s{i}"] = f.dtype, lead + f.shape
            array_ok = f"{v}.dtype is d{i} and {v}.shape == s{i}"
            if lead or f.shape:
                lines.append(f"    if type({v}) is not nd or not ({array_ok}):")
                lines.append("        return 0")
            else:
                # Python scalars first (what an env step usually hands over), then arrays
                # and the field's own NumPy scalar type.
                cases: list[tuple[str, list[str]]] = []
                for tp in _PY_SCALARS:
                    if (name, tp) in self._scalar_ok:
                        cases.append((f"tp is {tp.__name__}", ["pass"]))
                    elif (name, tp) in self._scalar_bounds:
                        lo, hi = f"lo{i}_{tp.__name__}", f"hi{i}_{tp.__name__}"
                        consts[lo], consts[hi] = self._scalar_bounds[(name, tp)]
                        cases.append((f"tp is {tp.__name__}", [f"if not {lo} <= {v} <= {hi}:"]))
                        cases[-1][1].append("    return 0")
                cases.append(("tp is nd", [f"if not ({array_ok}):", "    return 0"]))
                consts[f"n{i}"] = f.dtype.type
                cases.append((f"tp is n{i}", ["pass"]))
                # Other NumPy scalar types (np.float64 rewards, np.int32 actions, np.bool_
                # flags into numeric fields): as convert() takes them, range-checked where
                # the cast may narrow.
                fits, narrows = _numpy_scalar_rules(f.dtype)
                if fits:
                    consts[f"ok{i}"] = fits
                    cases.append((f"tp in ok{i}", ["pass"]))
                if narrows:
                    consts[f"nb{i}"] = narrows
                    consts[f"lo{i}_np"], consts[f"hi{i}_np"] = _scalar_range(f.dtype)
                    cases.append((f"tp in nb{i}", [f"if not lo{i}_np <= {v} <= hi{i}_np:"]))
                    cases[-1][1].append("    return 0")
                cases.append(("True", ["return 0"]))
                lines.append(f"    tp = type({v})")
                for k, (cond, body) in enumerate(cases):
                    lines.append(f"    {'elif' if k else 'if'} {cond}:")
                    lines += [f"        {b}" for b in body]
            if name in ("terminated", "truncated"):
                lines.append(f"    if {v}.tobytes() != zeros:" if lead else f"    if {v}:")
                lines.append(f"        kind = {ENDING}")
        return lines, consts

    def next_names(self) -> tuple[str, ...]:
        """``next_<name>`` for every observation field."""
        return tuple("next_" + n for n in self.observation_names)

    def to_json(self) -> dict[str, Any]:
        """JSON-able description, round-tripped by :meth:`from_json`."""
        return {name: f.to_json() for name, f in self.fields.items()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Schema:
        """Inverse of :meth:`to_json`."""
        return cls({name: Field.from_json(v) for name, v in d.items()})

    # ------------------------------------------------------------------ input rules
    def check_keys(self, given: Iterable[str], ending: bool) -> None:
        """Check that ``given`` names every field, plus ``next_<obs>`` when ``ending``.

        Args:
            given: The keyword names of an ``add``/``extend`` call.
            ending: Whether any step of the call ends its episode.

        Raises:
            FieldError: An unknown name, or a missing field / ``next_<name>``.
        """
        given_set = set(given)
        allowed = set(self.fields) | set(self.next_names())
        unknown = given_set - allowed
        if unknown:
            raise FieldError(
                f"unknown field(s) {sorted(unknown)}: this buffer stores {sorted(self.fields)} "
                f"(plus {sorted(self.next_names())} at episode ends)"
            )
        missing = set(self.fields) - given_set
        if missing:
            raise FieldError(
                f"missing field(s) {sorted(missing)}: every add/extend call needs "
                f"{sorted(self.fields)}"
            )
        if ending:
            missing_next = set(self.next_names()) - given_set
            if missing_next:
                raise FieldError(
                    f"missing {sorted(missing_next)}: a step that ends its episode "
                    "(terminated or truncated) needs its final observation"
                )

    def convert_all(self, values: Mapping[str, Any], lead: tuple[int, ...]) -> dict[str, Any]:
        """:meth:`convert` every value (names already checked); the per-step hot path."""
        ok, scalar_ok, bounds = self._ok, self._scalar_ok, self._scalar_bounds
        out: dict[str, Any] = {}
        for name, value in values.items():
            tp = type(value)
            if tp is np.ndarray:
                if (name, value.dtype, value.shape, lead) in ok:
                    out[name] = value
                    continue
            elif not lead:
                if (name, tp) in scalar_ok:
                    out[name] = value
                    continue
                b = bounds.get((name, tp))
                if b is not None and b[0] <= value <= b[1]:
                    out[name] = value
                    continue
            out[name] = self.convert(name, value, lead)
        return out

    def convert(self, name: str, value: Any, lead: tuple[int, ...]) -> Any:
        """Validate ``value`` for field ``name`` with leading axes ``lead``.

        Args:
            name: A field name, or ``next_<obs field>`` (validated like that field).
            value: What the caller passed.
            lead: Leading axes expected before the field's shape (``()`` for one step,
                ``(E,)`` for a vector-env step, ``(T,)`` for ``extend``).

        Returns:
            A value (NumPy array or a Python scalar that fits) that can be assigned into the
            field's storage without further checks.

        Raises:
            ShapeError: The shape is not ``lead + field.shape``.
            DTypeError: The cast to the field's dtype would be unsafe, or a value does not fit.
        """
        tp = type(value)
        if tp is np.ndarray:
            if (name, value.dtype, value.shape, lead) in self._ok:
                return value
        elif not lead:
            if (name, tp) in self._scalar_ok:
                return value
            bounds = self._scalar_bounds.get((name, tp))
            if bounds is not None and bounds[0] <= value <= bounds[1]:
                return value
        f = self._by_name[name]
        if isinstance(value, np.ndarray):
            return self._convert_array(name, f, value, lead)
        if isinstance(value, _PY_SCALARS) and not isinstance(value, np.generic):
            if lead or f.shape:
                raise ShapeError(
                    f"{name}: expected shape {lead + f.shape}, got a Python scalar {value!r}"
                )
            return _convert_py_scalar(name, f.dtype, value)
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as exc:
            raise ShapeError(
                f"{name}: could not convert {type(value).__name__} to an array: {exc}"
            ) from exc
        if arr.dtype == object:
            raise DTypeError(
                f"{name}: expected {f.dtype} values, got an object array from "
                f"{type(value).__name__} (ragged or non-numeric input)"
            )
        return self._convert_array(name, f, arr, lead)

    def _convert_array(
        self, name: str, f: Field, arr: np.ndarray[Any, Any], lead: tuple[int, ...]
    ) -> np.ndarray[Any, Any]:
        # Validation results are cached per (name, dtype, shape, lead): the per-step path then
        # costs one set lookup. Narrowing integer casts are never cached: their values are
        # checked every time.
        key = (name, arr.dtype, arr.shape, lead)
        expected = lead + f.shape
        if arr.shape != expected:
            raise ShapeError(f"{name}: expected shape {expected}, got {arr.shape}")
        if arr.dtype != f.dtype:
            if not np.can_cast(arr.dtype, f.dtype, casting="same_kind"):
                raise DTypeError(
                    f"{name}: cannot store {arr.dtype} values in a {f.dtype} field "
                    f"(only same_kind casts are allowed; convert explicitly, e.g. "
                    f".astype(np.{f.dtype.name}), if the loss is intended)"
                )
            narrowed = narrowed_cast(name, arr, f.dtype)
            if narrowed is not None:
                return narrowed
        if len(self._ok) < _MAX_CACHED:  # extend() sees many lengths; keep the cache small
            self._ok.add(key)
        return arr


_NUMPY_SCALARS = (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64,
)  # fmt: skip


def _numpy_scalar_rules(dtype: np.dtype[Any]) -> tuple[frozenset[type], frozenset[type]]:
    """NumPy scalar types other than ``dtype``'s own that :meth:`Schema.convert` stores in a
    scalar field of ``dtype``: those that always fit (a safe cast) and those whose value must
    lie in :func:`_scalar_range` (a ``same_kind`` cast that may narrow). Complex fields: none."""
    if dtype.kind not in "biuf":
        return frozenset(), frozenset()
    others = [tp for tp in _NUMPY_SCALARS if np.dtype(tp) != dtype]
    fits = frozenset(tp for tp in others if np.can_cast(tp, dtype, casting="safe"))
    narrows = frozenset(
        tp for tp in others
        if tp not in fits and dtype.kind != "b" and np.can_cast(tp, dtype, casting="same_kind")
    )  # fmt: skip
    return fits, narrows


def _scalar_range(dtype: np.dtype[Any]) -> tuple[float, float]:
    """The values a scalar of another type may have to be stored in a ``dtype`` field."""
    if dtype.kind in "iu":
        return _int_range(dtype)
    big = float(np.finfo(dtype).max)
    return (-big, big)


def narrowed_cast(
    name: str, arr: np.ndarray[Any, Any], dtype: np.dtype[Any]
) -> np.ndarray[Any, Any] | None:
    """``arr`` ready for a field of ``dtype`` when the cast may lose values, else ``None``.

    A narrowing float cast (float64 -> float32) is made now, so that a value beyond the
    field's range is an error here rather than an inf (and a warning) halfway through a
    write; a narrowing integer cast is checked (``arr`` is returned uncast). ``arr``'s dtype
    must cast to ``dtype`` under NumPy's ``same_kind`` rule.

    Raises:
        DTypeError: A value beyond ``dtype``'s range, naming ``name``.
    """
    if _narrowing_float(arr.dtype, dtype):
        try:
            with np.errstate(over="raise", invalid="ignore"):
                out: np.ndarray[Any, Any] = arr.astype(dtype)
                return out
        except FloatingPointError:
            raise DTypeError(
                f"{name}: values beyond the range of {dtype} "
                f"(largest magnitude {float(np.finfo(dtype).max):g})"
            ) from None
    if _narrowing_int(arr.dtype, dtype) and arr.size:
        info = np.iinfo(dtype)
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            raise DTypeError(
                f"{name}: values in [{lo}, {hi}] do not fit {dtype} "
                f"(range [{info.min}, {info.max}])"
            )
        return arr
    return None


def _narrowing_float(src: np.dtype[Any], dst: np.dtype[Any]) -> bool:
    """Whether a cast into a float field may overflow (float64 -> float32, int64 -> float16)."""
    return dst.kind == "f" and src.kind in "iuf" and not np.can_cast(src, dst, casting="safe")


def _narrowing_int(src: np.dtype[Any], dst: np.dtype[Any]) -> bool:
    """Whether an integer/bool -> integer cast may lose values (so values must be checked)."""
    return src.kind in "iu" and dst.kind in "iu" and not np.can_cast(src, dst, casting="safe")


def _convert_py_scalar(name: str, dtype: np.dtype[Any], value: bool | int | float | complex) -> Any:
    """Apply NumPy's weak-scalar rule to a Python scalar for a field of ``dtype``."""
    kind = dtype.kind
    ok = (
        (kind == "b" and isinstance(value, bool))
        or (kind in "iu" and isinstance(value, int))
        or (kind == "f" and isinstance(value, int | float))
        or kind == "c"
    )
    if not ok:
        raise DTypeError(
            f"{name}: cannot store Python {type(value).__name__} {value!r} in a {dtype} field "
            f"(pass a {'bool' if kind == 'b' else dtype.name} value)"
        )
    if kind in "iu" and isinstance(value, int) and not isinstance(value, bool):
        lo, hi = _int_range(dtype)
        if not lo <= value <= hi:
            raise DTypeError(f"{name}: {value} does not fit {dtype} (range [{lo}, {hi}])")
    if kind == "f" and isinstance(value, int | float) and not isinstance(value, bool):
        big = float(np.finfo(dtype).max)
        finite = isinstance(value, int) or math.isfinite(value)  # isfinite(10**400) overflows
        if finite and not -big <= value <= big:
            raise DTypeError(f"{name}: {value} does not fit {dtype} (largest magnitude {big:g})")
    return value


@functools.cache
def _int_range(dtype: np.dtype[Any]) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ConfigError(f"fields: field names must be Python identifiers, got {name!r}")
    if name.startswith("next_"):
        raise ConfigError(
            f"fields[{name!r}]: names starting with 'next_' are reserved for the next "
            "observation of observation fields"
        )
    if name in RESERVED_NAMES or name.startswith("_"):
        raise ConfigError(
            f"fields[{name!r}]: {name!r} is reserved (samples compute {sorted(RESERVED_NAMES)}); "
            "choose another name"
        )


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int ``>= 1``, else a :class:`rlreplay.ConfigError` naming it.

    Args:
        name: The argument's name, for the message.
        value: An ``int`` or NumPy integer (bools are refused).

    Returns:
        ``value`` as a Python ``int``.

    Raises:
        rlreplay.ConfigError: Not an integer, or below 1.

    Example:
        >>> from rlreplay.spec import positive_int
        >>> positive_int("batch_size", 32)
        32
    """
    if type(value) is not int and (
        isinstance(value, bool | np.timedelta64) or not isinstance(value, int | np.integer)
    ):
        raise ConfigError(
            f"{name}: expected a positive int, got {type(value).__name__} {shown(value)}"
        )
    if value < 1:
        raise ConfigError(f"{name}: expected a positive int, got {shown(value)}")
    return int(value)


def int_at_least(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int ``>= minimum`` (bools rejected), else ``ConfigError`` naming it."""
    if (
        isinstance(value, bool | np.timedelta64)
        or not isinstance(value, int | np.integer)
        or value < minimum
    ):
        raise ConfigError(f"{name}: expected an int >= {minimum}, got {shown(value)}")
    return int(value)


def clip_pair(name: str, value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected None or (lo, hi), got {value!r}") from None
    if not lo <= hi:
        raise ConfigError(f"{name}: expected lo <= hi, got ({lo}, {hi})")
    return lo, hi
