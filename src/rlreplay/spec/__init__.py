"""What a buffer stores: :class:`Field`, the :class:`Schema` of a buffer's fields, the checks and
casts of input values, and fields from gymnasium spaces.

Knows nothing of storage, episodes or sampling.
"""

from rlreplay.spec.schema import Field, Schema
from rlreplay.spec.spaces import fields_from_spaces

__all__ = ["Field", "Schema", "fields_from_spaces"]
