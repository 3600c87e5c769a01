"""Cache prefetch hints for Numba kernels (LLVM's ``llvm.prefetch``).

A prefetch asks the CPU to start loading a cache line without waiting for it. It is a pure
hint: it changes nothing a program sees and never faults, even for an address that is not
mapped. Kernels that gather a batch of random rows issue the prefetches of the whole batch
first, so that its cache misses overlap instead of only those the out-of-order window reaches.

* ``prefetch_row(array, i)``: the line holding the first item of row ``i`` of ``array`` (any
  number of dimensions; for a 1-D array, item ``i``).
* ``prefetch_address(address)``: the line holding byte ``address`` (an int64, e.g. a column's
  ``ctypes.data`` plus a row offset), for kernels that warm several columns at once.
* ``prefetch_slot(warm, s)``: every line of rows ``s`` and ``s + 1`` (the next step's, but at
  the end of a ring) of each column of a prefetch table
  (:meth:`rlreplay.storage.Columns.prefetch_table`: rows ``(base address, row bytes)``).
"""

from __future__ import annotations

from typing import Any

import numba
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import intrinsic

__all__ = ["prefetch_address", "prefetch_row", "prefetch_slot"]


def _emit(builder: Any, pointer: Any) -> None:
    byte_pointer = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    function = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
        builder.module,
        ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]),
        "llvm.prefetch.p0i8",
    )
    # (address, 0 = for reading, 3 = keep in every cache level, 1 = data cache)
    builder.call(function, [builder.bitcast(pointer, byte_pointer), i32(0), i32(3), i32(1)])


def _prefetch_row(typingctx: Any, array: Any, row: Any) -> tuple[Any, Any]:
    sig = types.void(array, row)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        array_type = signature.args[0]
        arr = context.make_array(array_type)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        index = [args[1]] + [zero] * (array_type.ndim - 1)
        pointer = cgutils.get_item_pointer(  # type: ignore[no-untyped-call]
            context, builder, array_type, arr, index, wraparound=False
        )
        _emit(builder, pointer)
        return context.get_dummy_value()

    return sig, codegen


def _prefetch_address(typingctx: Any, address: Any) -> tuple[Any, Any]:
    sig = types.void(address)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        _emit(builder, builder.inttoptr(args[0], ir.IntType(8).as_pointer()))
        return context.get_dummy_value()

    return sig, codegen


prefetch_row: Any = intrinsic(_prefetch_row)
prefetch_address: Any = intrinsic(_prefetch_address)


@numba.njit(inline="always")
def prefetch_slot(warm: Any, s: int) -> None:  # pragma: no cover - compiled
    """Prefetch rows ``s`` and ``s + 1`` of every column of the prefetch table ``warm``."""
    for c in range(warm.shape[0]):
        first = warm[c, 0] + s * warm[c, 1]
        for line in range(first >> 6, ((first + 2 * warm[c, 1] - 1) >> 6) + 1):
            prefetch_address(line << 6)
