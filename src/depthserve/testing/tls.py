"""Throw-away certificates for TLS tests: a CA, a server certificate for 127.0.0.1, a client certificate."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    """Paths of a CA and two certificates it signed, keys in PKCS#8 PEM."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _signed(folder: Path, name: str, subject: str, extensions: str) -> tuple[Path, Path]:
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-subj",
        subject,
        "-out",
        f"{name}.csr",
        cwd=folder,
    )
    (folder / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-sha256",
        "-extfile",
        f"{name}.ext",
        "-out",
        f"{name}.pem",
        cwd=folder,
    )
    _openssl("pkcs8", "-topk8", "-nocrypt", "-in", f"{name}.key", "-out", f"{name}.pk8", cwd=folder)
    return folder / f"{name}.pem", folder / f"{name}.pk8"


def make_test_pki(folder: Path) -> Pki:
    """Create the CA and certificates with the openssl command (valid two days)."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-subj",
        "/CN=depthserve test CA",
        "-days",
        "2",
        "-out",
        "ca.pem",
        cwd=folder,
    )
    server = _signed(
        folder, "server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    )
    client = _signed(folder, "client", "/CN=depthserve gateway", "extendedKeyUsage=clientAuth\n")
    return Pki(folder / "ca.pem", server[0], server[1], client[0], client[1])
