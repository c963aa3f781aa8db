"""The checks every inference request passes before a backend sees it: API key, rate limit, admission."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

from depthserve.gateway.config import EdgeConfig
from depthserve.gateway.edge.admission import PRIORITIES, AdmissionController
from depthserve.gateway.edge.api_keys import ENV_VAR, ApiKeys
from depthserve.gateway.edge.buffer_limits import reply_budget, upload_budget
from depthserve.gateway.edge.rate_limit import Limit, RateLimiter, identity
from depthserve.gateway.edge.shared_limits import SharedAdmission, SharedRateLimiter
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.processes.share import ProcessShare


class Edge:
    """Owns the gateway's keys, rate limiters and admission controller, built once from settings."""

    def __init__(
        self,
        settings: EdgeConfig,
        clock: Callable[[], float] = time.monotonic,
        capacity: Callable[[str], int | None] | None = None,
        share: ProcessShare | None = None,
        lane_capacity: Callable[[str], int | None] | None = None,
    ) -> None:
        """`capacity` gives, per model, the requests its workers hold without a long queue (the pool's), and
        `lane_capacity` the same per backend; `share` makes limits hold across the gateway's processes (the shared
        block and this process's number)."""
        self.clock = clock
        self.keys = ApiKeys.from_sources(settings.api_keys_file, os.environ.get(ENV_VAR))
        default = Limit.parse(settings.rate_limit) if settings.rate_limit else None
        per_key = {name: Limit.parse(text) for name, text in settings.rate_limits.items()}
        limits = (
            settings.max_in_flight,
            settings.max_queue,
            settings.model_limits,
            clock,
            capacity,
            settings.max_queue_wait_s,
            lane_capacity,
        )
        if share is None:
            self.limiter = RateLimiter(default, per_key, clock=clock)
            self.admission: AdmissionController = AdmissionController(*limits)
        else:
            self.limiter = SharedRateLimiter(share.state, default, per_key, clock=clock)
            self.admission = SharedAdmission(share.state, share.index, share.processes, *limits)
        self.protect_health = settings.protect_health
        processes = 1 if share is None else share.processes
        self.uploads = upload_budget(settings, processes)  # request bodies, read before admission
        self.replies = reply_budget(settings, processes)  # replies being written to clients

    def caller(self, headers: Mapping[str, str], client_host: str | None) -> str:
        """Authenticate (401) and rate-limit (429) a request; give the identity it is counted under."""
        who = identity(self.keys.authenticate(headers), client_host)
        self.limiter.check(who)
        return who

    @staticmethod
    def priority(headers: Mapping[str, str]) -> str:
        """Read X-Priority (high, normal, low); anything else is a 400."""
        value = headers.get("x-priority", "normal").strip().lower()
        if value not in PRIORITIES:
            raise GatewayError(400, "invalid_request", f"X-Priority must be one of {', '.join(PRIORITIES)}")
        return value
