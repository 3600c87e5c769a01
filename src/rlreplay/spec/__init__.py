"""What a buffer stores: :class:`Field`, the :class:`Schema` of a buffer's fields, the checks and
casts of input values (timeouts and the size budget of every call included), and fields from
gymnasium spaces.

Knows nothing of storage, episodes or sampling.
"""

from rlreplay.spec.arguments import check_rows, size_budget, timeout_seconds
from rlreplay.spec.schema import RESERVED_NAMES, Field, Schema, positive_int
from rlreplay.spec.spaces import fields_from_spaces

__all__ = [
    "RESERVED_NAMES",
    "Field",
    "Schema",
    "check_rows",
    "fields_from_spaces",
    "positive_int",
    "size_budget",
    "timeout_seconds",
]
