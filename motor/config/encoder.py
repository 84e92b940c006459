"""The encode (EPD) role: `ec_transfer_config` (vLLM's encoder-cache connector) read, filled per role and checked
across the topology. Encode instances run a multimodal model's encoder and hand its output to the prefill
instances through the EC connector; KV still goes prefill → decode through kv_transfer_config."""

from typing import Any

from motor.config.errors import ConfigIssue
from motor.config.models import EngineSection, UserConfig
from motor.config.roles import Role
from motor.config.transfer import option_key, read_object_option

EC_ROLES: dict[Role, str] = {"encode": "ec_producer", "prefill": "ec_consumer"}
EC_ROLE_NAMES = ("ec_producer", "ec_consumer", "ec_both")
# The EC connectors vLLM 0.32 registers; a newer name passes with a warning.
KNOWN_EC_CONNECTORS = ("ECExampleConnector", "ECCPUConnector", "ECMooncakeConnector")
SHARED_STORAGE_CONNECTORS = ("ECExampleConnector",)
ENCODE_ENGINES = ("vllm", "sim")
ENCODE_SECTION = "motor_engine_encode_config"
ENCODE_COUNT = "motor_deploy_config.e_instances_num"
EXAMPLE = (
    '{"ec_connector": "ECExampleConnector", "ec_connector_extra_config": {"shared_storage_path": '
    '"/dev/shm/motor-ec"}}'
)


def ec_config_key(engine_config: dict[str, Any]) -> str | None:
    return option_key(engine_config, "ec_transfer_config")


def read_ec_config(
    engine_config: dict[str, Any], section_path: str, issues: list[ConfigIssue]
) -> tuple[dict[str, Any] | None, str]:
    """(ec_transfer_config as a dict or None when absent or broken, its JSON path), recording its problems."""
    raw, path = read_object_option(
        engine_config, "ec_transfer_config", section_path, f"e.g. {EXAMPLE}", issues
    )
    if raw is None:
        return None, path
    before = len(issues)
    connector = raw.get("ec_connector")
    if not isinstance(connector, str) or not connector:
        issues.append(
            ConfigIssue(f"{path}.ec_connector", f"required: the EC connector's name, e.g. {EXAMPLE}")
        )
    role = raw.get("ec_role")
    if role is not None and role not in EC_ROLE_NAMES:
        issues.append(
            ConfigIssue(
                f"{path}.ec_role", f"{role!r} is not one of {', '.join(EC_ROLE_NAMES)}; motor fills it"
            )
        )
    extra = raw.get("ec_connector_extra_config", {})
    if not isinstance(extra, dict):
        issues.append(ConfigIssue(f"{path}.ec_connector_extra_config", "must be an object"))
    elif connector in SHARED_STORAGE_CONNECTORS:
        storage = extra.get("shared_storage_path")
        if not isinstance(storage, str) or not storage:
            issues.append(
                ConfigIssue(
                    f"{path}.ec_connector_extra_config.shared_storage_path",
                    f"required by {connector}: a directory the encode and prefill engines both reach",
                )
            )
    return (raw, path) if len(issues) == before else (None, path)


def fill_ec_role(config: dict[str, Any], path: str, role: Role, warnings: list[str]) -> dict[str, Any]:
    """A copy of `config` with the role's ec_role (a different configured one is replaced, with a warning)."""
    wanted = EC_ROLES[role]
    given = config.get("ec_role")
    if given is not None and given != wanted:
        warnings.append(f"{path}.ec_role: {given!r} replaced by {wanted!r}: motor sets each role's ec_role")
    return {**config, "ec_role": wanted}


def encode_section(
    user: UserConfig, aggregated: bool, issues: list[ConfigIssue], warnings: list[str]
) -> EngineSection | None:
    """The encode role's engine section when the topology has encode instances, checking the combinations
    pyMotor refuses as well (no encode beside union instances, not in one container, vLLM only)."""
    count = user.motor_deploy_config.e_instances_num or 0
    section = user.motor_engine_encode_config
    if count == 0:
        if section is not None:
            warnings.append(
                f"{ENCODE_SECTION}: e_instances_num is unset or 0, so no encode instances are deployed; set "
                "motor_deploy_config.e_instances_num to deploy them"
            )
        return None
    if section is None:
        issues.append(
            ConfigIssue(
                ENCODE_SECTION,
                "required with e_instances_num: describe the encode engine (engine_type, "
                "engine_config with the multimodal model and ec_transfer_config)",
            )
        )
    if aggregated:
        issues.append(
            ConfigIssue(
                ENCODE_COUNT,
                "encode instances need PD disaggregation (p_instances_num and d_instances_num); they are not "
                "combined with union (hybrid) instances: remove e_instances_num or deploy prefill and decode",
            )
        )
    if user.motor_deploy_config.deploy_mode == "single_container":
        issues.append(
            ConfigIssue(
                "motor_deploy_config.deploy_mode",
                "single_container does not run encode instances; use multi_deployment, infer_service_set or "
                "local, or remove e_instances_num",
            )
        )
    if section is not None and section.engine_type not in ENCODE_ENGINES:
        issues.append(
            ConfigIssue(
                f"{ENCODE_SECTION}.engine_type",
                f"{section.engine_type!r} cannot encode for prefill here: encode instances run vllm (or motor's "
                "sim), whose EC connectors hand the encoder's output over",
            )
        )
    return section


def check_encode_connectors(
    sections: dict[Role, tuple[str, EngineSection]],
    shared_host: bool,
    issues: list[ConfigIssue],
    warnings: list[str],
) -> dict[Role, tuple[str, dict[str, Any]]]:
    """The filled ec_transfer_config of the encode and prefill roles by role (key, value), when the topology has
    both. The prefill side may leave it out (it is derived from the encode side's); when given, it must name the
    same connector and shared storage. `shared_host`: every engine runs on this host (local)."""
    if "encode" not in sections or "prefill" not in sections:
        return {}
    e_path, e_section = sections["encode"]
    p_path, p_section = sections["prefill"]
    if p_section.engine_type != e_section.engine_type:
        issues.append(
            ConfigIssue(
                f"{ENCODE_SECTION}.engine_type",
                f"{e_section.engine_type!r} differs from the prefill side's {p_section.engine_type!r}; encode and "
                "prefill instances must run the same engine",
            )
        )
    if "kv_transfer_config" in e_section.engine_config or "kv-transfer-config" in e_section.engine_config:
        issues.append(
            ConfigIssue(
                f"{e_path}.engine_config.kv_transfer_config",
                "encode instances hand the encoder's output over with ec_transfer_config, not KV: remove it",
            )
        )
    e_config, e_config_path = read_ec_config(e_section.engine_config, e_path, issues)
    if e_config is None:
        if ec_config_key(e_section.engine_config) is None:
            issues.append(ConfigIssue(e_config_path, f"required for encode instances, e.g. {EXAMPLE}"))
        return {}
    connector = e_config["ec_connector"]
    if connector not in KNOWN_EC_CONNECTORS:
        warnings.append(
            f"{e_config_path}.ec_connector: {connector!r} is not an EC connector vLLM 0.32 registers "
            f"({', '.join(KNOWN_EC_CONNECTORS)}); passed to the engine as it is"
        )
    if connector in SHARED_STORAGE_CONNECTORS and not shared_host:
        warnings.append(
            f"{e_config_path}.ec_connector_extra_config.shared_storage_path: {connector} hands the encoder's output "
            "over through files: the encode and prefill pods must see the same directory there (a shared "
            "filesystem mounted at that path, e.g. through the image or a volume); motor mounts none"
        )
    p_config, p_config_path = read_ec_config(p_section.engine_config, p_path, issues)
    if p_config is None and ec_config_key(p_section.engine_config) is None:
        p_config = {key: value for key, value in e_config.items() if key != "ec_role"}
    if p_config is None:
        return {}
    _check_agreement(e_config, e_config_path, p_config, p_config_path, issues)
    e_key = ec_config_key(e_section.engine_config) or "ec_transfer_config"
    p_key = ec_config_key(p_section.engine_config) or "ec_transfer_config"
    return {
        "encode": (e_key, fill_ec_role(e_config, e_config_path, "encode", warnings)),
        "prefill": (p_key, fill_ec_role(p_config, p_config_path, "prefill", warnings)),
    }


def _check_agreement(
    e_config: dict[str, Any], e_path: str, p_config: dict[str, Any], p_path: str, issues: list[ConfigIssue]
) -> None:
    if p_config.get("ec_connector") != e_config["ec_connector"]:
        issues.append(
            ConfigIssue(
                f"{p_path}.ec_connector",
                f"{p_config.get('ec_connector')!r} differs from the encode side's {e_config['ec_connector']!r} "
                f"({e_path}.ec_connector): the prefill engines must read what the encode engines write",
            )
        )
        return
    storage = (e_config.get("ec_connector_extra_config") or {}).get("shared_storage_path")
    p_storage = (p_config.get("ec_connector_extra_config") or {}).get("shared_storage_path")
    if storage != p_storage:
        issues.append(
            ConfigIssue(
                f"{p_path}.ec_connector_extra_config.shared_storage_path",
                f"{p_storage!r} differs from the encode side's {storage!r}: the prefill engines would look for "
                "the encoder's output where the encode engines do not write it; give both the same path",
            )
        )
