"""examples/sim deployed locally with pyMotor's TLS settings, certificates from a throwaway CA: the OpenAI API
over HTTPS with client certificates (mutual TLS), the control plane (registrations, heartbeats, pushes, probes)
over HTTPS with mutual TLS, and the clients that lack the CA or a certificate turned away."""

import os
import ssl
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from motor.protocol.controller import ControllerState, bearer
from tests.fixtures.control import LocalRun
from tests.fixtures.pki import Issued, Pki

CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "hello over TLS"}], "max_tokens": 4}


def tls_section(pki: Pki, issued: Issued, **extra: Any) -> dict[str, Any]:
    section = {
        "enable_tls": True,
        "ca_file": str(pki.ca_file),
        "cert_file": str(issued.cert),
        "key_file": str(issued.key),
        **extra,
    }
    if issued.passwd is not None:
        section["passwd_file"] = str(issued.passwd)
    return section


def client_tls(pki: Pki | None, issued: Issued | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_file) if pki else None)
    if issued is not None:
        context.load_cert_chain(issued.cert, issued.key)
    return context


def https(url: str) -> str:
    return url.replace("http://", "https://", 1)


@pytest.fixture
def tls_run(local_run: Callable[..., LocalRun], pki: Pki) -> tuple[LocalRun, Pki, Issued]:
    infer = pki.issue("coordinator-api")
    mgmt = pki.issue("motor-mgmt", password="mgmt-key-password")
    client = pki.issue("test-client")
    crl = pki.crl([pki.issue("revoked-client")])
    run = local_run(
        pool=False,
        overrides={
            "motor_deploy_config": {
                "tls_config": {
                    "infer_tls_config": tls_section(pki, infer, crl_file=str(crl)),
                    "mgmt_tls_config": tls_section(pki, mgmt),
                }
            }
        },
    )
    assert run.plan_and_deploy() == 0
    return run, pki, client


@pytest.mark.slow
def test_tls_deployment_serves_and_registers_over_mutual_tls(tls_run: tuple[LocalRun, Pki, Issued]) -> None:
    run, pki, client = tls_run
    api, mgmt = https(run.api_url), https(run.mgmt_url)
    controller = https(run.config.controller_url)

    # a chat request over HTTPS through the coordinator, the client presenting its certificate
    with httpx.Client(base_url=api, verify=client_tls(pki, client), timeout=30) as http:
        response = http.post("/v1/chat/completions", json=CHAT)
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["completion_tokens"] == 4

    # the control plane registered and heartbeats over HTTPS: every instance active at the controller
    state = ControllerState.model_validate_json(
        httpx.get(
            f"{controller}/controller/instances",
            headers=bearer(run.state()["token"]),
            verify=client_tls(pki, client),
            timeout=10,
        ).content
    )
    assert {v.instance.id: v.instance.status for v in state.instances} == {
        "prefill-0": "active",
        "decode-0": "active",
    }
    assert all(v.node_manager_url.startswith("https://") for v in state.instances)
    assert all(link.url.startswith("https://") and link.last_error is None for link in state.coordinators)
    assert httpx.get(f"{mgmt}/readiness", verify=client_tls(pki, client), timeout=10).json()["ready"]

    # a client without the CA does not trust the coordinator
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.post(f"{api}/v1/chat/completions", json=CHAT, verify=client_tls(None, client), timeout=10)
    # with mutual TLS, a client without a certificate is refused on both the API and the management ports
    for url in (f"{api}/v1/models", f"{mgmt}/readiness", f"{controller}/readiness"):
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            httpx.get(url, verify=client_tls(pki, None), timeout=10).raise_for_status()
    # plain HTTP gets no answer from a TLS port
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError, httpx.ConnectError)):
        httpx.get(f"{run.api_url}/v1/models", timeout=10).raise_for_status()


@pytest.mark.slow
def test_a_revoked_client_certificate_is_refused(tls_run: tuple[LocalRun, Pki, Issued]) -> None:
    run, pki, _ = tls_run
    revoked = Issued(pki.directory / "revoked-client.crt", pki.directory / "revoked-client.key", 0)
    with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
        httpx.get(
            f"{https(run.api_url)}/v1/models", verify=client_tls(pki, revoked), timeout=10
        ).raise_for_status()


@pytest.mark.slow
def test_the_exec_probe_kubernetes_runs_presents_the_components_certificate(
    tls_run: tuple[LocalRun, Pki, Issued],
) -> None:
    run, pki, client = tls_run
    url = https(run.mgmt_url).replace("127.0.0.1", "{advertise_host}") + "/readiness"
    env = {**os.environ, "MOTOR_ADVERTISE_HOST": "127.0.0.1"}
    probe = [sys.executable, "-m", "motor.runtime.probe", url, "--ca-file", str(pki.ca_file)]
    with_cert = [*probe, "--cert-file", str(client.cert), "--key-file", str(client.key)]
    assert subprocess.run(with_cert, env=env, capture_output=True, timeout=30).returncode == 0
    refused = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=30)
    assert refused.returncode == 1 and "no answer" in refused.stderr
