"""A backend's channel: message limits, keepalive, and a reconnect backoff short enough to see a restart."""

from __future__ import annotations

from depthserve.gateway.upstream.backend import channel_options


def test_a_restarted_worker_is_redialled_within_a_second() -> None:
    options = dict(channel_options(64))
    assert options["grpc.max_receive_message_length"] == options["grpc.max_send_message_length"] == 64 * 2**20
    # gRPC's default backoff grows towards 120 s: a worker down for 10 s was redialled ~6.5 s after it came
    # back (measured: unused ~7 s after it served); the drill in the issue saw ~13 s.
    assert options["grpc.max_reconnect_backoff_ms"] <= 1000
    assert options["grpc.initial_reconnect_backoff_ms"] <= options["grpc.max_reconnect_backoff_ms"]
