"""An engine section's `engine_config` as command-line flags, the way vLLM's argument parser expects them: keys
normalised to dashes, `true` → bare flag, `false` and `null` → omitted, an object → one JSON string, a list →
the flag followed by every value."""

import json
from typing import Any

from motor.deploy.engines.request import LaunchError


def normalised_options(engine_config: dict[str, Any]) -> dict[str, Any]:
    """engine_config keyed by flag name (dashes), later keys winning when two spellings name one flag."""
    return {option_name(key): value for key, value in engine_config.items()}


def option_name(key: str) -> str:
    return key.strip().lstrip("-").replace("_", "-")


def option_flags(options: dict[str, Any], where: str = "engine_config") -> list[str]:
    """Render options as CLI flags: true → bare flag, false/None/[] → omitted, dict → JSON, list → values.
    `where` is the options' config path, for errors."""
    argv: list[str] = []
    for name, value in options.items():
        flag = f"--{option_name(name)}"
        path = f"{where}.{name}"
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, separators=(",", ":"))]
        elif isinstance(value, list | tuple):
            if value:
                argv += [flag, *(_scalar(item, path) for item in value)]
        else:
            argv += [flag, _scalar(value, path)]
    return argv


def _scalar(value: Any, path: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    raise LaunchError(path, f"cannot pass a {type(value).__name__} on the command line")
