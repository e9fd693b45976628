"""The simulated language server's TLS: a fresh self-signed loopback certificate per run.

Owns making the key and certificate, loading them into a server `ssl.SSLContext`, and the files.
The certificate is made on the first TLS handshake (`lazy_server_context`): importing
`cryptography` and signing cost tens of milliseconds of CPU at every start, and most runs only
ever see plain HTTP (clients probe the plain port first).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path
from typing import Final

__all__ = ["CERT_VALIDITY", "lazy_server_context", "make_server_context"]

_log = logging.getLogger("agy_provider.sim.server")

# agy makes its certificate at start and nobody verifies it (clients pin nothing, they only refuse
# non-loopback hosts), so a short life is enough and keeps a leaked key worthless soon.
CERT_VALIDITY: Final = datetime.timedelta(days=2)
_OPENSSL_TIMEOUT_S: Final = 30.0


def lazy_server_context(work_dir: Path) -> ssl.SSLContext:
    """A server-side TLS context whose certificate is made (by `make_server_context`) during the
    first handshake, then used by every later one.

    OpenSSL calls the server-name callback for every ClientHello, with or without SNI (clients of
    127.0.0.1 send none), and the callback may switch the connection to another context: the one
    holding the certificate. A certificate that cannot be made fails that handshake (logged).
    """
    made: list[ssl.SSLContext] = []

    def with_certificate(
        connection: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _context: ssl.SSLContext
    ) -> int | None:
        if not made:
            try:
                made.append(make_server_context(work_dir))
            except OSError as exc:
                _log.error("no TLS certificate for the HTTPS port: %s", exc)
                return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        connection.context = made[0]
        return None

    context = _server_context()
    context.sni_callback = with_certificate
    return context


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # Our HTTP layer speaks HTTP/1.1 only; advertising it keeps h2-capable clients off h2.
    context.set_alpn_protocols(["http/1.1"])
    return context


def make_server_context(work_dir: Path) -> ssl.SSLContext:
    """A server-side TLS context holding a freshly made self-signed certificate for 127.0.0.1.

    The key and certificate are written to a private temporary folder under `work_dir` (0700, files
    0600), loaded, and removed again before returning: the context keeps them in memory, so no key
    is left on disk even if the process is killed.

    Raises:
        OSError: the folder could not be made, or neither `cryptography` nor `openssl` made a key.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="ls-tls-", dir=work_dir))
    try:
        cert_path, key_path = folder / "cert.pem", folder / "key.pem"
        try:
            cert_pem, key_pem = _self_signed_with_cryptography()
        except ImportError:
            cert_pem, key_pem = b"", b""
        if cert_pem:
            _write_private(cert_path, cert_pem)
            _write_private(key_path, key_pem)
        else:
            _self_signed_with_openssl(cert_path, key_path)
        context = _server_context()
        context.load_cert_chain(cert_path, key_path)
        return context
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _self_signed_with_cryptography() -> tuple[bytes, bytes]:
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _self_signed_with_openssl(cert_path: Path, key_path: Path) -> None:
    # Fallback when the `cryptography` package is absent; openssl writes the key with 0600 itself
    # only on some versions, so the umask makes sure.
    openssl = shutil.which("openssl")
    if openssl is None:
        raise OSError("cannot make a TLS certificate: neither `cryptography` nor `openssl` found")
    argv = [
        openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", str(key_path), "-out", str(cert_path),
        "-days", str(CERT_VALIDITY.days), "-subj", "/CN=localhost",
        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
    ]  # fmt: skip
    old_umask = os.umask(0o077)
    try:
        subprocess.run(argv, check=True, capture_output=True, timeout=_OPENSSL_TIMEOUT_S)
    except (subprocess.SubprocessError, OSError) as exc:
        raise OSError(f"openssl could not make a TLS certificate: {exc}") from exc
    finally:
        os.umask(old_umask)
    with contextlib.suppress(OSError):
        os.chmod(key_path, 0o600)
