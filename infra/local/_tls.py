"""Test certificates made with the ``openssl`` CLI: a CA, a server certificate for
127.0.0.1 / localhost and a client certificate, all EC P-256, valid for two days. For the
local servers that run with TLS (the Kafka SASL_SSL listener, the credential tests); never
for anything but loopback tests."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TestPki", "make_test_pki", "openssl_available"]

_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
_EXTENSIONS = {
    "server": "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    "client": "extendedKeyUsage=clientAuth\n",
}


@dataclass(frozen=True)
class TestPki:
    __test__ = False  # not a pytest class

    ca: Path
    server_cert: Path
    server_key: Path  # PKCS#8 PEM (what Kafka's PEM key store wants)
    client_cert: Path
    client_key: Path


def openssl_available() -> bool:
    return shutil.which("openssl") is not None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_test_pki(directory: Path) -> TestPki:
    """Write ca.pem, server.pem/server.key and client.pem/client.key into ``directory``
    (made if missing; files already there are kept: a restarted server finds the same)."""
    d = directory
    d.mkdir(parents=True, exist_ok=True)
    pki = TestPki(
        d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key"
    )
    if all(p.is_file() for p in (pki.ca, pki.server_cert, pki.server_key, pki.client_cert)):
        return pki
    _openssl(
        "req", "-x509", *_EC, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=shoal test CA", cwd=d,
    )  # fmt: skip
    for name, extensions in _EXTENSIONS.items():
        (d / f"{name}.ext").write_text(extensions)
        _openssl(
            "req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN=shoal {name}", cwd=d,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
            "-extfile", f"{name}.ext", cwd=d,
        )  # fmt: skip
    return pki
