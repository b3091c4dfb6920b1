"""The C allocator of a web server process, set for request bodies of megabytes.

An ingest batch is a few megabytes: its gzip body, the inflated JSON (3.5 MB for 100 turns of 12
blocks) and the buffers the store sends. glibc's malloc serves each allocation over its mmap
threshold (128 KiB at first, raised as such blocks are freed) with a fresh mapping, and gives the
top of its heap back to the system once more than twice that is free: so every batch's buffers
came in pages the kernel had to find and zero again, about 900 page faults a batch and 3% of the
web server's CPU (BENCHMARKS.md, "The web process's allocator").

Set here: allocations up to 32 MiB (glibc's most; a body is at most `max_body_bytes`, 16 MiB)
come from the heap, and up to 128 MiB of free heap is kept for the next request instead of being
given back. A worker's resident memory then stays near the peak of the requests it served, the
usual trade of a server's allocator. glibc only (elsewhere nothing changes);
`CTXOBS_WEB_MALLOC_TUNE=0` leaves the allocator as it comes.
"""

from __future__ import annotations

import ctypes
import logging
import os

from django.conf import settings

logger = logging.getLogger(__name__)

# mallopt(3) parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError, AttributeError):  # not a glibc system, or no confstr
        return False


def allocator_tune() -> bool:
    """Set this process's malloc for megabyte request bodies (see the module); whether it was set.
    Call it once, at a web process's start."""
    if not settings.CTXOBS_WEB_MALLOC_TUNE or not _glibc():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success. Setting either turns off glibc's own adjustment of both.
    done: bool = (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                  and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    if not done:
        logger.warning("web.malloc_tune_failed")
    return done
