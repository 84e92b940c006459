"""Monitoring in the Kubernetes manifests: scrape annotations, the Grafana dashboard ConfigMap, and the
prometheus-operator PodMonitor/PrometheusRule checked offline against the operator's CRD schemas.

The CRD schemas come from PyPI's `cloudcoil-models-prometheus-operator` (Apache-2.0): pydantic models generated
from prometheus-operator v0.80's CRDs. Their JSON schema is the CRDs' OpenAPI schema (types, enums, patterns,
required fields) re-expressed; the test closes every object schema (`additionalProperties: false`) so an
unknown field fails, as a strict server-side field validation would.
"""

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from cloudcoil.models.prometheus_operator.v1 import PodMonitor, PrometheusRule

from motor.cli.main import main
from motor.deploy.prometheus import WATERMARK_RECORD
from motor.observability.dashboard import dashboard_json
from tests.integration.k8s_support import sim_union_config, sim_user_config, write_config
from tests.integration.test_k8s_manifests import (
    SIM_VARIANTS,
    by_kind_name,
    manifests_for,
    seed_manifests,
    validate_all,
)

OPERATOR_MODELS = {"PodMonitor": PodMonitor, "PrometheusRule": PrometheusRule}


def _closed(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for value in node.values():
            _closed(value)
    elif isinstance(node, list):
        for value in node:
            _closed(value)


@cache
def operator_validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = copy.deepcopy(OPERATOR_MODELS[kind].model_json_schema(by_alias=True))
    _closed(schema)
    return jsonschema.Draft202012Validator(schema)


def validate_operator_object(obj: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError naming the first problem (after a round trip through YAML)."""
    [document] = yaml.safe_load_all(yaml.safe_dump(obj))
    operator_validator(document["kind"]).validate(document)
    OPERATOR_MODELS[document["kind"]].model_validate(document)


def metrics_annotation(deployment: dict[str, Any]) -> dict[str, str]:
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    return {key: value for key, value in annotations.items() if key.startswith("prometheus.io/")}


def test_every_pod_template_says_where_its_metrics_are() -> None:
    objects = by_kind_name(seed_manifests())
    ports = {name: deployment for (kind, name), deployment in objects.items() if kind == "Deployment"}
    expected_port = {"kv-pool": "metrics", "controller": "api", "coordinator": "mgmt", "prefill-0": "engine"}
    expected_port["decode-0"] = "engine"
    for name, port_name in expected_port.items():
        container = ports[name]["spec"]["template"]["spec"]["containers"][0]
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == port_name)
        assert metrics_annotation(ports[name]) == {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(port),
            "prometheus.io/path": "/metrics",
        }, name


def test_the_dashboard_config_map_carries_the_sidecar_label_and_the_generated_dashboard() -> None:
    config_map = by_kind_name(seed_manifests())["ConfigMap", "motor-grafana-dashboard"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["labels"]["motor.io/job"] == "mindie-motor"
    assert config_map["data"] == {"motor.json": dashboard_json()}


@pytest.mark.parametrize("variant", sorted(SIM_VARIANTS))
def test_operator_objects_validate_against_the_crd_schemas(variant: str) -> None:
    objects = manifests_for(SIM_VARIANTS[variant], prometheus_operator=True)
    operator = [obj for obj in objects if obj["apiVersion"] == "monitoring.coreos.com/v1"]
    assert {obj["kind"] for obj in operator} <= {"PodMonitor", "PrometheusRule"}
    assert "PodMonitor" in {obj["kind"] for obj in operator}
    for obj in operator:
        validate_operator_object(obj)
    validate_all([obj for obj in objects if obj not in operator])


def test_a_wrong_field_fails_the_crd_schema() -> None:
    monitor = by_kind_name(manifests_for(sim_user_config(), prometheus_operator=True))["PodMonitor", "motor"]
    misspelt = copy.deepcopy(monitor)
    misspelt["spec"]["podMetricEndpoints"] = misspelt["spec"].pop("podMetricsEndpoints")
    with pytest.raises(jsonschema.ValidationError, match="podMetricEndpoints"):
        validate_operator_object(misspelt)
    bad_action = copy.deepcopy(monitor)
    bad_action["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["action"] = "keepall"
    with pytest.raises(jsonschema.ValidationError):
        validate_operator_object(bad_action)


def endpoint_labels(endpoint: dict[str, Any]) -> tuple[str, dict[str, str]]:
    keep, *replacements = endpoint["relabelings"]
    assert keep["action"] == "keep"
    return keep["regex"], {r["targetLabel"]: r["replacement"] for r in replacements}


def test_the_pod_monitor_scrapes_every_component_with_the_local_labels() -> None:
    objects = by_kind_name(manifests_for(sim_user_config(), prometheus_operator=True))
    monitor = objects["PodMonitor", "motor"]
    assert monitor["spec"]["selector"] == {"matchLabels": {"motor.io/job": "simjob"}}
    endpoints = {}
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        pod, labels = endpoint_labels(endpoint)
        endpoints[labels["job"], labels["instance"]] = (pod, endpoint["portNumber"], labels)
    names = ["prefill-0", "prefill-1", "decode-0"]
    assert set(endpoints) == {
        ("motor-kv-pool", "kv-pool"),
        ("motor-controller", "controller"),
        ("motor-coordinator", "coordinator"),
        *((job, name) for name in names for job in ("motor-engine", "motor-node-manager")),
    }
    for (job, instance), (pod, port, labels) in endpoints.items():
        assert pod == instance
        assert labels["motor_job"] == "simjob"
        container = objects["Deployment", pod]["spec"]["template"]["spec"]["containers"][0]
        assert port in {p["containerPort"] for p in container["ports"]}, (job, instance)
        assert ("role" in labels) == (job in ("motor-engine", "motor-node-manager"))
    assert endpoints["motor-engine", "decode-0"][2]["role"] == "decode"
    rule = objects["PrometheusRule", "motor"]["spec"]["groups"][0]["rules"][0]
    assert rule["record"] == WATERMARK_RECORD and rule["labels"] == {"motor_job": "simjob"}


def test_single_container_endpoints_address_declared_ports_of_the_one_pod() -> None:
    objects = by_kind_name(manifests_for(sim_union_config("single_container"), prometheus_operator=True))
    container = objects["Deployment", "single-container"]["spec"]["template"]["spec"]["containers"][0]
    declared = {p["containerPort"] for p in container["ports"]}
    endpoints = objects["PodMonitor", "motor"]["spec"]["podMetricsEndpoints"]
    assert {endpoint_labels(e)[0] for e in endpoints} == {"single-container"}
    assert {e["portNumber"] for e in endpoints} <= declared
    labels = [endpoint_labels(e)[1] for e in endpoints]
    assert len({(label["job"], label["instance"]) for label in labels}) == len(endpoints)
    assert len({e["portNumber"] for e in endpoints}) == len(endpoints)  # one pod: every target its own port
    assert ("PrometheusRule", "motor") not in objects  # no pool, no watermark rule


def test_dry_run_writes_the_operator_objects_only_when_asked(tmp_path: Path) -> None:
    config = write_config(tmp_path / "sim", sim_user_config())
    plain, operator = tmp_path / "plain", tmp_path / "operator"
    assert main(["deploy", "--config-dir", str(config), "--dry-run", "--output", str(plain)]) == 0
    assert (
        main(
            [
                "deploy",
                "--config-dir",
                str(config),
                "--dry-run",
                "--output",
                str(operator),
                "--prometheus-operator",
            ]
        )
        == 0
    )

    def kinds(directory: Path) -> set[str]:
        text = (directory / "08-monitoring.yaml").read_text()
        return {document["kind"] for document in yaml.safe_load_all(text)}

    assert kinds(plain) == {"ConfigMap"}
    assert kinds(operator) == {"ConfigMap", "PodMonitor", "PrometheusRule"}
