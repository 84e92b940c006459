"""Manifests as YAML: multi-line strings (config files, scripts) as literal blocks, keys in written order."""

from pathlib import Path
from typing import Any

import yaml

from motor.deploy.k8s.manifests import ManifestFile


class _Dumper(yaml.SafeDumper):
    pass


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump_all(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def write_manifests(files: list[ManifestFile], output_dir: Path) -> list[Path]:
    """Write one YAML file per group into `output_dir` (created if needed); returns the paths written."""
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for manifest_file in files:
        path = output_dir / manifest_file.name
        path.write_text(dump_all(manifest_file.objects), encoding="utf-8")
        written.append(path)
    return written
