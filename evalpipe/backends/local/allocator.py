"""Keep freed memory in the process, so the batching loop's large buffers are reused.

glibc's malloc hands allocations above its mmap threshold back to the kernel
when they are freed, and trims the heap as it shrinks; the next buffer of that
size then pays a page fault per 4 KiB on first touch. The batching loop makes
such buffers all the time (KV caches when batches merge, a prefill's keys
repeated per query head, the logits). Raising both thresholds, as
`MALLOC_MMAP_THRESHOLD_` and `MALLOC_TRIM_THRESHOLD_` would at start-up, cut
the time in tensor copies of one W2 run from 2.4 to 1.0 s (docs/speed.md). The
process then keeps its peak memory until it exits, which a run reaches anyway.
`EVALPIPE_KEEP_MEMORY=0`, or a C library without mallopt, leaves malloc as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_THRESHOLD = 1 << 30  # above any one buffer of the loop (mallopt takes an int)
# The largest trim threshold mallopt takes: a RAG cell frees more than 1 GiB of caches at
# once (its first wave's), which a 1 GiB threshold gave back, so the next cell faulted
# them in anew (default job: 1.17 million page faults, 0.79 million with this).
_TRIM = 2**31 - 1
_kept = False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds, once per process; True where it did."""
    global _kept  # noqa: PLW0603 -- a once-per-process switch of the C library
    if _kept or os.environ.get("EVALPIPE_KEEP_MEMORY", "1") == "0" \
            or not sys.platform.startswith("linux"):
        return _kept
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _kept = mallopt(_M_MMAP_THRESHOLD, _THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD,
                                                                     _TRIM) == 1
    return _kept
