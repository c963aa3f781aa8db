"""Slots held per client, kept with how many clients hold each count, so admission's "is another client
heavy" needs no scan of every client holding a slot (thousands of them under overload)."""

from __future__ import annotations

from collections import Counter


class Holdings:
    """Slots held per client (`per_client`, read-only outside), the counts per held value and the highest one."""

    def __init__(self) -> None:
        self.per_client: Counter[str] = Counter()  # only clients holding at least one slot
        self._holders_at: Counter[int] = Counter()  # held count -> clients holding exactly that many
        self._most = 0

    def take(self, client: str) -> int:
        """Count one more slot for `client`; give what it held before."""
        held = self.per_client[client]
        self.per_client[client] = held + 1
        self._moved(held, held + 1)
        return held

    def give_back(self, client: str) -> int:
        """Count one slot fewer for `client` (it holds one); give what it held before."""
        held = self.per_client[client]
        if held == 1:
            del self.per_client[client]
        else:
            self.per_client[client] = held - 1
        self._moved(held, held - 1)
        return held

    def most_held_by_other(self, client: str) -> int:
        """The most slots any client but `client` holds."""
        top = self._most
        if self.per_client.get(client, 0) != top or self._holders_at[top] > 1:
            return top
        # `client` alone holds the most: the next count anyone holds (rare: a heavy client asking if it is light)
        return next((held for held in range(top - 1, 0, -1) if self._holders_at[held]), 0)

    def _moved(self, before: int, after: int) -> None:
        """Keep the counts per held value and the highest one in step with a client going one up or down."""
        if before:
            self._holders_at[before] -= 1
            if not self._holders_at[before]:
                del self._holders_at[before]
        if after:
            self._holders_at[after] += 1
        if after > self._most:
            self._most = after
        elif before == self._most and before not in self._holders_at:
            self._most = after  # one down from the top, and nobody else was there: this client holds the most
