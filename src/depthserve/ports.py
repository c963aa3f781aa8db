"""Listening ports: checked before anything starts, and bound so that no other process can share them."""

from __future__ import annotations

import errno
import socket

BACKLOG = 1024  # pending connections the gateway's HTTP socket holds
IN_USE = "the port is in use"  # in the one-line refusal; a launcher reads it to give a server another port


class PortUnavailable(Exception):
    """A port this process would listen on is taken or forbidden; the message is one line for the user."""


def listen_exclusive(host: str, port: int, flag: str = "--port", backlog: int = BACKLOG) -> socket.socket:
    """Bind and listen without SO_REUSEPORT, so a second server on this port fails instead of sharing it."""
    addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = addresses[0]
    sock = socket.socket(family, kind, proto)
    # SO_REUSEADDR only lets a restart bind over old TIME_WAIT connections; Linux still refuses a second listener.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family in (socket.AF_INET, socket.AF_INET6):
        # Accepted connections inherit it (as from granian's own bind): without it Nagle's algorithm held
        # small HTTP/2 frames back for the peer's delayed ACK, ~25 ms on a 30 ms request.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind(address)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise PortUnavailable(_in_use_message(host, port, flag, exc)) from None
        raise
    return sock


def check_free(host: str, port: int | None, flag: str) -> None:
    """Raise PortUnavailable when `port` cannot be listened on now; port None or 0 (pick one) always passes."""
    if port:
        listen_exclusive(host, port, flag, backlog=1).close()


def taken(host: str, port: int, flag: str = "--port") -> PortUnavailable:
    """The error for a port another process bound after `check_free` passed (a server's own bind failed)."""
    return PortUnavailable(_in_use_message(host, port, flag, OSError(errno.EADDRINUSE, "in use")))


def _in_use_message(host: str, port: int, flag: str, exc: OSError) -> str:
    if exc.errno == errno.EACCES:
        return f"cannot listen on {host}:{port}: permission denied (ports below 1024 need root); choose another {flag}"
    return (
        f"cannot listen on {host}:{port}: {IN_USE} (another depthserve, or another program, listens there);"
        f" stop it or choose another {flag}"
    )
