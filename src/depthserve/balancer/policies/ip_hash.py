"""IP hash: consistent hashing on the client address, for clients that carry no session header."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from depthserve.balancer.common import Options
from depthserve.balancer.policies.consistent_hash import ConsistentHash


class IpHash(ConsistentHash):
    """Consistent hashing keyed on the client address only; a request without one starts at a random slot.

    Options are consistent_hash's table options: `algorithm` (ring | maglev), `vnodes`, `table_size` and
    `bounded_load`. Behind a proxy every request shares one address: use consistent_hash on a header instead.
    """

    name: ClassVar[str] = "ip_hash"

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> IpHash:
        """Read the table options shared with consistent_hash."""
        parse = Options(cls.name, options)
        table = cls.read_table_options(parse)
        parse.done()
        return cls(None, fallback="client", seed=seed, **table)
