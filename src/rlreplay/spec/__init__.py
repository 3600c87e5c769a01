"""What a buffer stores: :class:`Field`, the :class:`Schema` of a buffer's fields, the checks and
casts of input values, and fields from gymnasium spaces.

Knows nothing of storage, episodes or sampling.
"""

from rlreplay.spec.schema import RESERVED_NAMES, Field, Schema, positive_int
from rlreplay.spec.spaces import fields_from_spaces

__all__ = ["RESERVED_NAMES", "Field", "Schema", "fields_from_spaces", "positive_int"]
