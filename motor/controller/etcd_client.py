"""The controller's etcd client: aetcd, with etcd authentication and TLS as the spec says.

aetcd authenticates (user and password) but only opens plaintext gRPC channels, so with TLS the client below
opens the channel with the spec's CA, client certificate and key, then authenticates the same way. gRPC wants
the key unencrypted in memory: a key protected by passwd_file is decrypted with `cryptography` first.
"""

from pathlib import Path

import aetcd
import grpc
from aetcd import rpc
from cryptography.hazmat.primitives import serialization

from motor.protocol.specs import EtcdSpec, TlsFiles
from motor.runtime.tls import TlsError, read_password


def etcd_client(spec: EtcdSpec, username: str, password: str) -> aetcd.Client:
    credentials = {"username": username, "password": password} if username else {}
    if spec.tls is None:
        return aetcd.Client(spec.host, spec.port, timeout=spec.timeout, **credentials)
    return TlsClient(spec.host, spec.port, channel_credentials(spec.tls), timeout=spec.timeout, **credentials)


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """gRPC credentials: the CA that signs etcd's certificate (else the system's), and the client certificate
    etcd asks for with --client-cert-auth."""
    key = None
    if files.key_file:
        key = _read(files.key_file, "key_file")
        secret = read_password(files.passwd_file)
        if secret:
            try:
                loaded = serialization.load_pem_private_key(key, password=secret)
            except (ValueError, TypeError) as exc:
                raise TlsError(f"cannot open key_file {files.key_file} with passwd_file: {exc}") from exc
            key = loaded.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
    return grpc.ssl_channel_credentials(
        root_certificates=_read(files.ca_file, "ca_file") if files.ca_file else None,
        private_key=key,
        certificate_chain=_read(files.cert_file, "cert_file") if files.cert_file else None,
    )


def _read(path: str, name: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsError(f"cannot read etcd_tls_config.{name} {path}: {exc.strerror}") from exc


class TlsClient(aetcd.Client):
    """An aetcd client whose gRPC channel is TLS; the KV calls motor makes (get, put, delete) work unchanged."""

    def __init__(
        self,
        host: str,
        port: int,
        credentials: grpc.ChannelCredentials,
        *,
        timeout: float,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        super().__init__(host, port, username=username, password=password, timeout=timeout)  # type: ignore[arg-type]
        self._channel_credentials = credentials

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        self.channel = grpc.aio.secure_channel(f"{self._host}:{self._port}", self._channel_credentials)
        if self._username is not None:
            token = await rpc.AuthStub(self.channel).Authenticate(
                rpc.AuthenticateRequest(name=self._username, password=self._password), timeout=self._timeout
            )
            self.metadata = (("token", token.token),)
        self.kvstub = rpc.KVStub(self.channel)
        self._connected.set()
