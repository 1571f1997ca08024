"""Per-process memo tables filled under a lock (double-checked: a hit never takes the lock)."""
from __future__ import annotations


def memoized(table: dict, lock, key, make):
    """``table[key]``, building it with ``make()`` under ``lock`` on a miss (once, even when racing)."""
    hit = table.get(key)
    if hit is not None:
        return hit
    with lock:
        if key in table:
            return table[key]
        value = table[key] = make()
        return value
