"""Writer processes over shared memory (``storage="shared"``): handles, attached writers, and
the generated per-step ``add`` of a writer process.

Owns what crosses the process boundary. Knows nothing of sampling.
"""

from rlreplay.sharing.handle import SharedHandle, SharedWriter, attach

__all__ = ["SharedHandle", "SharedWriter", "attach"]
