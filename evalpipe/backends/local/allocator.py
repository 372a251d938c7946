"""Keep freed memory in the process, so the batching loop's large buffers are reused;
let go of the pages of a weights file once the weights read from them are packed.

glibc's malloc hands allocations above its mmap threshold back to the kernel
when they are freed, and trims the heap as it shrinks; the next buffer of that
size then pays a page fault per 4 KiB on first touch. The batching loop makes
such buffers all the time (KV caches when batches merge, a prefill's keys
repeated per query head, the logits). Raising both thresholds, as
`MALLOC_MMAP_THRESHOLD_` and `MALLOC_TRIM_THRESHOLD_` would at start-up, cut
the time in tensor copies of one W2 run from 2.4 to 1.0 s (docs/speed.md). The
process then keeps its peak memory until it exits, which a run reaches anyway.
`EVALPIPE_KEEP_MEMORY=0`, or a C library without mallopt, leaves malloc as it is.

A safetensors load maps the whole file privately, and every page a weight is read
from while packing stays resident until the mapping goes: the 1.5B's 7.1 GB file
in float32 was counted beside the packed copy growing from it (`release_file_pages`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_THRESHOLD = 1 << 30  # above any one buffer of the loop (mallopt takes an int)
# The largest trim threshold mallopt takes: a RAG cell frees more than 1 GiB of caches at
# once (its first wave's), which a 1 GiB threshold gave back, so the next cell faulted
# them in anew (default job: 1.17 million page faults, 0.79 million with this).
_TRIM = 2**31 - 1
_kept = False


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds, once per process; True where it did."""
    global _kept  # noqa: PLW0603 -- a once-per-process switch of the C library
    if _kept or os.environ.get("EVALPIPE_KEEP_MEMORY", "1") == "0" \
            or not sys.platform.startswith("linux"):
        return _kept
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _kept = mallopt(_M_MMAP_THRESHOLD, _THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD,
                                                                     _TRIM) == 1
    return _kept


_MADV_DONTNEED = 4  # Linux: drop the pages; a file-backed page is read again if touched


def file_mappings() -> list[tuple[int, int]]:
    """Address ranges of this process's private mappings of files, as a safetensors
    load maps its weights file; empty where /proc is not there."""
    ranges = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[1].endswith("p") and fields[5].startswith("/"):
                    low, high = (int(x, 16) for x in fields[0].split("-"))
                    ranges.append((low, high))
    except OSError:
        pass
    return ranges


def release_file_pages(tensor, mappings: list[tuple[int, int]]) -> int:
    """Drop from the process's resident memory the pages of a file mapping (one of
    `mappings`) that lie wholly inside `tensor`'s bytes; the bytes dropped. For a weight
    being let go: a page touched again is read from the file, so a tensor changed in
    place since it was loaded must not be passed. Anonymous memory is never touched."""
    if tensor is None or tensor.device.type != "cpu" or not tensor.is_contiguous() \
            or not sys.platform.startswith("linux"):
        return 0
    page = os.sysconf("SC_PAGE_SIZE")
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    low, high = -(-start // page) * page, end // page * page  # the pages only it covers
    if high <= low or not any(lo <= low and high <= hi for lo, hi in mappings):
        return 0
    madvise = _libc().madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return high - low if madvise(low, high - low, _MADV_DONTNEED) == 0 else 0
