"""SSL contexts from a spec's `TlsFiles`, for servers and for the clients of motor's internal calls.

- Server: presents cert_file/key_file; with ca_file it requires a client certificate signed by it (mutual
  TLS), checked against crl_file when given.
- Internal client: verifies the server's chain against ca_file (else the system's trust store, with host
  names checked) and presents cert_file/key_file when given. With ca_file the host name is not checked:
  components reach each other at pod IPs no certificate can name in advance, so the private CA of the
  deployment is what is trusted.

A key protected by a password is opened with the password from passwd_file; without one it fails at once
instead of prompting on a terminal. Every failure names the file it comes from.
"""

import ssl
from pathlib import Path

from motor.protocol.specs import TlsFiles

MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2


class TlsError(ValueError):
    """A TLS file cannot be read or does not fit: the message names it."""


def server_context(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MINIMUM_VERSION
    if not files.cert_file or not files.key_file:
        raise TlsError("a TLS server needs cert_file and key_file")
    _load_identity(context, files)
    if files.ca_file:
        _load_trust(context, files)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(files: TlsFiles | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = MINIMUM_VERSION
    if files is None or not files.ca_file:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    else:
        context.check_hostname = False
        _load_trust(context, files)
    if files is not None and files.cert_file and files.key_file:
        _load_identity(context, files)
    return context


def read_password(passwd_file: str | None) -> bytes | None:
    if not passwd_file:
        return None
    try:
        return Path(passwd_file).read_bytes().strip()
    except OSError as exc:
        raise TlsError(f"cannot read passwd_file {passwd_file}: {exc.strerror}") from exc


def _load_identity(context: ssl.SSLContext, files: TlsFiles) -> None:
    password = read_password(files.passwd_file)
    try:
        # An empty password makes an encrypted key fail instead of prompting.
        context.load_cert_chain(files.cert_file or "", files.key_file, password=password or b"")
    except FileNotFoundError as exc:
        raise TlsError(f"cannot read {exc.filename or files.cert_file}: no such file") from exc
    except (ssl.SSLError, OSError) as exc:
        hint = "" if password else " (if the key is encrypted, set passwd_file)"
        raise TlsError(
            f"cannot use cert_file {files.cert_file} with key_file {files.key_file}: {exc}{hint}"
        ) from exc


def _load_trust(context: ssl.SSLContext, files: TlsFiles) -> None:
    for name in ("ca_file", "crl_file"):
        path = getattr(files, name)
        if not path:
            continue
        try:
            context.load_verify_locations(cafile=path)
        except FileNotFoundError as exc:
            raise TlsError(f"cannot read {name} {path}: no such file") from exc
        except (ssl.SSLError, OSError) as exc:
            raise TlsError(f"cannot use {name} {path}: {exc}") from exc
    if files.crl_file:
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
