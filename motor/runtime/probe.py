"""HTTP(S) GETs of a component's probe and status endpoints, and the exec probe Kubernetes runs when the
management port speaks TLS (kubelet's own HTTPS probes cannot present a client certificate):

    python3 -m motor.runtime.probe https://{advertise_host}:1027/readiness --ca-file F --cert-file F --key-file F

`{advertise_host}` is replaced by MOTOR_ADVERTISE_HOST (the pod IP). Exit status 0 when the answer is 200.
"""

import argparse
import os
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping

from motor.protocol import env
from motor.protocol.specs import HOST_PLACEHOLDER, TlsFiles
from motor.runtime.tls import TlsError, client_context


def fetch(
    url: str,
    *,
    timeout: float = 2.0,
    context: ssl.SSLContext | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, bytes] | None:
    """(status, body) of a GET, or None when nothing answers (refused, timed out, TLS handshake failed)."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m motor.runtime.probe", description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--timeout", type=float, default=5.0)
    for name in ("ca_file", "cert_file", "key_file", "passwd_file", "crl_file"):
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name)
    args = parser.parse_args(argv)
    url = args.url.replace(HOST_PLACEHOLDER, os.environ.get(env.ADVERTISE_HOST, "127.0.0.1"))
    files = TlsFiles(
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
        passwd_file=args.passwd_file,
        crl_file=args.crl_file,
    )
    try:
        context = client_context(files) if url.startswith("https:") else None
    except TlsError as exc:
        print(f"probe {url}: {exc}", file=sys.stderr)
        return 1
    answer = fetch(url, timeout=args.timeout, context=context)
    if answer is None or answer[0] != 200:
        print(f"probe {url}: {'no answer' if answer is None else f'HTTP {answer[0]}'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
