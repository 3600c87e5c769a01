"""Datasets, exports and framework outputs: Arrow/Parquet/pandas, Minari, torch/JAX, prefetching.

Every optional dependency (pyarrow, pandas, minari, torch, jax, rich, matplotlib) is imported
inside the function that needs it; importing this package costs nothing more than the core.
"""

from rlreplay.io.frameworks import TensorBatch, convert
from rlreplay.io.iterate import Prefetcher
from rlreplay.io.mixin import IOMixin

__all__ = ["IOMixin", "Prefetcher", "TensorBatch", "convert"]
