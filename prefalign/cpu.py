"""Process-level CPU settings shared by every command that runs a model."""

from __future__ import annotations

import os
import sys


def tune_allocator() -> bool:
    """Keep freed memory inside the process instead of handing it back to the OS after every op (glibc).

    A training step allocates and frees the same large activation buffers again and again. glibc's
    defaults serve blocks above an adaptive threshold with fresh mmaps and return the top of the heap to
    the OS as soon as 128 KiB is free, so the next step page-faults it all back in (zeroed). Serving blocks
    up to 32 MiB from the heap, with a 1 GiB trim threshold and a 256 MiB top pad, keeps that memory mapped;
    peak memory is unchanged, but the process does not shrink between steps. Set PREFALIGN_MALLOC_TUNING=0
    to keep glibc's defaults. Returns whether the settings were applied.
    """
    import ctypes

    if os.environ.get("PREFALIGN_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3  # malloc.h
        # setting any of these turns off glibc's adaptive mmap threshold, so it is set explicitly (its maximum)
        return all(
            libc.mallopt(opt, value)
            for opt, value in ((m_mmap_threshold, 32 << 20), (m_trim_threshold, 1 << 30), (m_top_pad, 256 << 20))
        )
    except (OSError, AttributeError):  # not glibc
        return False
