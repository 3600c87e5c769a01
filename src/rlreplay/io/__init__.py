"""Datasets, exports and framework outputs: Arrow/Parquet/pandas, Minari, torch/JAX, prefetching.

Owns the conversion of a buffer's contents to and from other formats, through the buffer's
public API: :func:`from_arrow` and :func:`from_parquet` rebuild a buffer from its Arrow or
Parquet export. Knows nothing of how the buffer stores, indexes or samples its data.

Every optional dependency (pyarrow, pandas, minari, torch, jax, rich, matplotlib) is imported
inside the function that needs it; importing this package costs nothing more than the core.
"""

from rlreplay.io.arrow import from_arrow, from_parquet
from rlreplay.io.frameworks import TensorBatch, convert
from rlreplay.io.iterate import Prefetcher

__all__ = ["Prefetcher", "TensorBatch", "convert", "from_arrow", "from_parquet"]
