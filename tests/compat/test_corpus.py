"""The pyMotor compatibility corpus: config pairs written for motor in the shapes pyMotor's releases document
(multi-pod DP/TP/EP, A2/A3/A5 hardware, single_container, PD hybrid, heterogeneous P/D, SGLang, KV pool on and
off, a one-sided UCM pool, with and without deploy_mode, infer_service_set, legacy forms, an invalid fixture).

Each case directory holds user_config.json, env.json and expected.txt, the golden `motor validate` output
(exit code, stdout, stderr). Every valid case's dry-run manifests pass `kubernetes-validate --strict`.
Regenerate the goldens after an intended change with MOTOR_UPDATE_GOLDEN=1.
"""

import json
import os
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from motor.cli.main import main

CORPUS = Path(__file__).resolve().parent / "corpus"
CASES = sorted(path.name for path in CORPUS.iterdir() if (path / "user_config.json").is_file())
KUBERNETES_VERSION = "1.33.0"


def validate_output(case: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", "--config-dir", str(case)])
    captured = capsys.readouterr()
    text = f"exit {code}\n--- stdout\n{captured.out}--- stderr\n{captured.err}"
    return code, text.replace(str(case), "<case>")


def test_the_corpus_covers_every_release_shape() -> None:
    assert len(CASES) >= 12
    modes = set()
    hardware = set()
    for name in CASES:
        deploy = json.loads((CORPUS / name / "user_config.json").read_text())["motor_deploy_config"]
        modes.add(deploy.get("deploy_mode"))
        hardware.add(deploy["hardware_type"])
    assert {None, "multi_deployment", "single_container", "infer_service_set"} <= modes
    assert {"800I_A2", "800I_A3", "950-SuperPod-Atlas-8"} <= hardware


@pytest.mark.parametrize("name", CASES)
def test_validate_output_matches_the_golden_file(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    case = CORPUS / name
    _, text = validate_output(case, capsys)
    golden = case / "expected.txt"
    if os.environ.get("MOTOR_UPDATE_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", [name for name in CASES if not name.startswith("invalid")])
def test_valid_cases_validate_and_their_manifests_pass_strict_schemas(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = CORPUS / name
    code, text = validate_output(case, capsys)
    assert code == 0, text
    output = tmp_path / "manifests"
    assert main(["deploy", "--config-dir", str(case), "--dry-run", "--output", str(output)]) == 0
    documents = [doc for path in sorted(output.iterdir()) for doc in yaml.safe_load_all(path.read_text())]
    assert {doc["kind"] for doc in documents} >= {"ConfigMap", "Deployment", "Service"}
    for document in documents:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", [name for name in CASES if name.startswith("invalid")])
def test_invalid_cases_name_every_path(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, text = validate_output(CORPUS / name, capsys)
    assert code == 2
    problems = [line.strip() for line in text.splitlines() if line.startswith("  ")]
    assert problems and all(": " in problem for problem in problems)
    assert problems == sorted(problems)
