"""Arrow arrays built from numpy buffers, never from Python objects (runs wherever it is called:
driver, planning process or executor).

``pa.array(range(n))`` converts n Python ints one by one, ``pa.array([v] * n)`` builds a list of
n references first, and ``pa.array(ndarray)`` imports pandas (0.2-0.3 s in a fresh process).
These build the same arrays from numpy's memory or from one Arrow scalar.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa


def row_numbers(count: int) -> pa.Array:
    """0 .. count-1 as an int64 array."""
    return pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(np.arange(count, dtype=np.int64))])


def repeated(value: Any, arrow_type: pa.DataType, count: int) -> pa.Array:
    """``value`` (a Python value of ``arrow_type``, or None) ``count`` times."""
    return pa.repeat(pa.scalar(value, arrow_type), count)
