"""Deterministic hash-based splits: a record's split depends only on its key and the seed.

The key defaults to the prompt text, so every pair of one prompt lands in the same split (no prompt leaks
from train into test). The same data gives the same split on every machine, in any order.
"""

from __future__ import annotations

import hashlib

SPLITS = ("train", "dev", "test")


def unit_hash(key: str, seed: int = 0) -> float:
    """A uniform number in [0, 1) from sha256(seed, key)."""
    h = hashlib.sha256(f"{seed}\x00{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def split_of(key: str, fractions: tuple[float, float, float] = (0.9, 0.05, 0.05), seed: int = 0) -> str:
    """'train', 'dev' or 'test' for `key`, with the given fractions (they must sum to 1)."""
    u = unit_hash(key, seed)
    edge = 0.0
    for name, frac in zip(SPLITS, fractions, strict=True):
        edge += frac
        if u < edge:
            return name
    return SPLITS[-1]
