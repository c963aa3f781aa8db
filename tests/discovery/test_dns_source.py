"""DNS discovery against a real (tiny) UDP DNS server started by the test: A, AAAA, SRV, changes, NXDOMAIN."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest
from dns.nameserver import Do53Nameserver

from depthserve.discovery.dns_source import DnsSource, DnsTarget, parse_dns_url

pytestmark = pytest.mark.timeout(30)


class StubDns(asyncio.DatagramProtocol):
    """Answers from a dict {(name, type): [rdata]}; names it does not know get NXDOMAIN."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], list[str]] = {}
        self.queries = 0
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a datagram endpoint's transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.queries += 1
        query = dns.message.from_wire(data)
        reply = dns.message.make_response(query)
        question = query.question[0]
        name = question.name.to_text().rstrip(".")
        rdtype = dns.rdatatype.to_text(question.rdtype)
        if not any(known == name for known, _ in self.records):
            reply.set_rcode(dns.rcode.NXDOMAIN)
        elif self.records.get((name, rdtype)):
            reply.answer.append(dns.rrset.from_text(question.name, 5, "IN", rdtype, *self.records[(name, rdtype)]))
        assert self.transport is not None
        self.transport.sendto(reply.to_wire(), addr)


@pytest.fixture
async def stub() -> AsyncIterator[tuple[StubDns, int]]:
    server = StubDns()
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(lambda: server, ("127.0.0.1", 0))
    yield server, transport.get_extra_info("sockname")[1]
    transport.close()


def addresses(specs: frozenset) -> set[str]:  # type: ignore[type-arg]
    return {spec.address for spec in specs}


async def test_a_records_of_a_headless_service_follow_changes(stub: tuple[StubDns, int]) -> None:
    server, port = stub
    server.records[("workers.test", "A")] = ["10.1.0.1", "10.1.0.2"]
    server.records[("workers.test", "AAAA")] = ["fd00::3"]
    source = DnsSource(f"dns://127.0.0.1:{port}/workers.test:50051", poll_s=0.02)
    updates = source.updates()
    try:
        first = await anext(updates)
        assert addresses(first) == {"10.1.0.1:50051", "10.1.0.2:50051", "[fd00::3]:50051"}
        assert {spec.source for spec in first} == {"dns"}
        server.records[("workers.test", "A")] = ["10.1.0.2", "10.1.0.4"]
        assert addresses(await anext(updates)) == {"10.1.0.2:50051", "10.1.0.4:50051", "[fd00::3]:50051"}
        server.records.clear()  # the service is gone: NXDOMAIN means no backends
        assert addresses(await anext(updates)) == set()
    finally:
        await updates.aclose()


async def test_srv_records_give_hosts_and_ports(stub: tuple[StubDns, int]) -> None:
    server, port = stub
    server.records[("_grpc._tcp.workers.test", "SRV")] = ["0 0 50051 w1.test.", "0 0 50052 w2.test."]
    server.records[("w1.test", "A")] = ["10.2.0.1"]
    server.records[("w2.test", "A")] = ["10.2.0.2"]
    source = DnsSource(f"dns://127.0.0.1:{port}/_grpc._tcp.workers.test", poll_s=0.02)
    assert addresses(await source.read()) == {"10.2.0.1:50051", "10.2.0.2:50052"}


async def test_an_unreachable_nameserver_keeps_the_last_set(stub: tuple[StubDns, int]) -> None:
    server, port = stub
    server.records[("workers.test", "A")] = ["10.3.0.1"]
    source = DnsSource(f"dns://127.0.0.1:{port}/workers.test:1", poll_s=0.02)
    source.resolver.lifetime = 0.3
    updates = source.updates()
    try:
        assert addresses(await anext(updates)) == {"10.3.0.1:1"}
        source.resolver.nameservers = [Do53Nameserver("127.0.0.1", 9)]  # nothing answers: time-outs, not "none"
        nxt = asyncio.ensure_future(anext(updates))
        while source.failures == 0:
            await asyncio.sleep(0.05)
        assert not nxt.done() and "DNS workers.test" in (source.last_error or "")
        nxt.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await nxt
    finally:
        await updates.aclose()


def test_url_forms() -> None:
    assert parse_dns_url("dns://workers.ns.svc.cluster.local:50051") == DnsTarget(
        "workers.ns.svc.cluster.local", 50051, None
    )
    assert parse_dns_url("dns://10.0.0.10/_grpc._tcp.w") == DnsTarget("_grpc._tcp.w", None, ("10.0.0.10", 53))
    assert parse_dns_url("dns://[::1]:5353/w:1") == DnsTarget("w", 1, ("::1", 5353))
    with pytest.raises(ValueError, match="needs a port"):
        parse_dns_url("dns://w")
    with pytest.raises(ValueError, match="bad port"):
        parse_dns_url("dns://w:99999")
