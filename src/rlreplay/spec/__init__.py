"""What a buffer stores: :class:`Field`, the :class:`Schema` of a buffer's fields, the checks and
casts of input values (timeouts and the size budget of every call included), and fields from
gymnasium spaces.

Knows nothing of storage, episodes or sampling.
"""

from rlreplay.spec.arguments import as_array, check_rows, shown, size_budget, timeout_seconds
from rlreplay.spec.schema import RESERVED_NAMES, Field, Schema, positive_int
from rlreplay.spec.spaces import fields_from_spaces

__all__ = [
    "RESERVED_NAMES",
    "Field",
    "Schema",
    "as_array",
    "check_rows",
    "fields_from_spaces",
    "positive_int",
    "shown",
    "size_budget",
    "timeout_seconds",
]
