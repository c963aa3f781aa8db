"""Maglev hashing (Eisenbud et al., NSDI 2016): a lookup table filled by per-backend permutations, O(1) lookups."""

from __future__ import annotations

from collections.abc import Sequence

from depthserve.balancer.common import HashTable, stable_hash

TABLE_SIZE = 65537  # prime, Envoy's default; keep it over ~100x the number of backends
WEIGHT_LEVELS = 64  # weights are quantised to 1..64 of the largest, so small drifts do not rebuild the table


def maglev_layout(weights: Sequence[tuple[str, float]]) -> tuple[tuple[str, int], ...]:
    """Quantise weights to whole levels relative to the largest, at least one, sorted by id."""
    top = max(w for _, w in weights)
    return tuple(sorted((i, max(1, round(WEIGHT_LEVELS * w / top))) for i, w in weights))


def is_prime(n: int) -> bool:
    """Say whether n is prime (table sizes are small enough for trial division)."""
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


def build_maglev(layout: Sequence[tuple[str, int]], size: int = TABLE_SIZE) -> HashTable:
    """Fill the table in turns, each backend taking its next free preferred slot (weighted as in Envoy).

    A backend with weight level w takes a turn in round r when r * w reaches its target, which grows by the top
    level per turn taken: the heaviest takes every round, one at a third of it every third round.
    """
    ids = [i for i, _ in layout]
    levels = [level for _, level in layout]
    top = max(levels)
    position, skip = [], []
    for i in ids:
        h = stable_hash(f"maglev:{i}")
        position.append(h % size)
        skip.append((h >> 32) % (size - 1) + 1)
    target = [0] * len(ids)
    table = [-1] * size
    filled, round_ = 0, 0
    while filled < size:
        round_ += 1
        for k, level in enumerate(levels):
            if round_ * level < target[k]:
                continue
            target[k] += top
            slot, step = position[k], skip[k]
            while table[slot] >= 0:
                slot += step
                if slot >= size:
                    slot -= size
            table[slot] = k
            position[k] = slot + step - size if slot + step >= size else slot + step
            filled += 1
            if filled == size:
                break
    return HashTable(ids, [ids[k] for k in table])
