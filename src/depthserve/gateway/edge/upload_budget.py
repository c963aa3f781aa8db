"""Budgets for request bodies the gateway reads and holds: per client (uploads at once, bytes) and in total.

Bodies are read before a request asks for an admission slot, so a slow or stalled upload holds only
its own client's budget. Bytes are counted as they arrive, never reserved from a declared
Content-Length, so an upload that declares 32 MiB and sends nothing holds nothing shared.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from types import TracebackType

from depthserve.gateway.errors import GatewayError

MIB = 1024 * 1024


@dataclass
class _ClientUse:
    """What one client holds now: bodies still arriving, and bytes of its bodies held in the gateway."""

    uploading: int = 0
    held: int = 0


class UploadBudget:
    """Hands out leases that count one request body's bytes against its client's budget and the total.

    A client's entry lives only while it holds a lease, so clients that come and go cannot grow memory.
    """

    def __init__(self, total_bytes: int, client_bytes: int, client_uploads: int) -> None:
        if total_bytes < 1 or client_bytes < 1 or client_uploads < 1:
            raise ValueError("upload budgets must be >= 1")
        self.total_bytes = total_bytes
        self.client_bytes = client_bytes
        self.client_uploads = client_uploads
        self.held = 0  # bytes of request bodies held now, all clients
        self.uploading = 0  # bodies still arriving, all clients
        self._clients: dict[str, _ClientUse] = {}
        self.refused: Counter[str] = Counter()  # by GatewayError reason, for metrics

    def lease(self, client: str) -> UploadLease:
        """Start reading one body for `client`; 429 "too_many_uploads" if it is already sending its limit."""
        use = self._clients.setdefault(client, _ClientUse())
        if use.uploading >= self.client_uploads:
            raise self._refuse(
                GatewayError(
                    429,
                    "too_many_uploads",
                    f"this client is already sending {self.client_uploads} request bodies; wait for one to finish",
                    retry_after=1.0,
                )
            )
        use.uploading += 1
        self.uploading += 1
        return UploadLease(self, client, use)

    def client_held(self, client: str) -> int:
        """Bytes of `client`'s bodies held now."""
        use = self._clients.get(client)
        return use.held if use else 0

    @property
    def clients(self) -> int:
        """Clients holding a lease now."""
        return len(self._clients)

    def _refuse(self, error: GatewayError) -> GatewayError:
        self.refused[error.reason] += 1
        return error

    def _release(self, client: str, use: _ClientUse, uploading: bool, held: int) -> None:
        use.uploading -= uploading
        self.uploading -= uploading
        use.held -= held
        self.held -= held
        if not use.uploading and not use.held:
            self._clients.pop(client, None)


class UploadLease:
    """One body's share of the budget: `add` bytes as they arrive, `received` when complete, `close` when done."""

    def __init__(self, budget: UploadBudget, client: str, use: _ClientUse) -> None:
        self._budget = budget
        self._client = client
        self._use = use
        self._uploading = True
        self.size = 0
        self.closed = False

    def add(self, size: int) -> None:
        """Count `size` more bytes of this body; 429 "upload_quota" past the client's bytes, 503 "upload_memory_full"
        past the total (the bytes already counted stay counted until `close`)."""
        budget = self._budget
        if self._use.held + size > budget.client_bytes:
            raise budget._refuse(
                GatewayError(
                    429,
                    "upload_quota",
                    f"this client's request bodies would hold more than {budget.client_bytes // MIB} MiB "
                    "in the gateway at once",
                    retry_after=1.0,
                )
            )
        if budget.held + size > budget.total_bytes:
            raise budget._refuse(
                GatewayError(
                    503,
                    "upload_memory_full",
                    f"the gateway holds {budget.total_bytes // MIB} MiB of request bodies, its limit",
                    retry_after=1.0,
                )
            )
        self._use.held += size
        budget.held += size
        self.size += size

    def received(self) -> None:
        """The whole body arrived: it no longer counts as an upload in progress (its bytes still count)."""
        if self._uploading and not self.closed:
            self._uploading = False
            self._use.uploading -= 1
            self._budget.uploading -= 1

    def discard(self) -> None:
        """The body is being dropped (its request refused): give back its bytes at once, before any drain.

        Refused uploads drained while still holding their bytes kept the total full, so ten large uploads
        racing for one budget could all be refused and none served.
        """
        if self.size and not self.closed:
            self._budget._release(self._client, self._use, False, self.size)
            self.size = 0

    def close(self) -> None:
        """Give back everything this lease holds (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self._budget._release(self._client, self._use, self._uploading, self.size)
        self._uploading = False
        self.size = 0

    def __enter__(self) -> UploadLease:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
