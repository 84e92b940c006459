"""SGLang (`engine_type: sglang`): it pairs P and D through the prefill's bootstrap server (host, port, room in
each request). The prefill serves it on `disaggregation-bootstrap-port`, and the role picks the disaggregation
mode; SGLang takes no kv_transfer_config."""

from motor.config.transfer import transfer_config_key
from motor.deploy.engines.command import engine_argv, engine_options, under_status_server
from motor.deploy.engines.registry import EngineType
from motor.deploy.engines.request import EngineLaunchRequest, LaunchError
from motor.protocol.specs import EngineSpec

SGLANG_MODULE = "sglang.launch_server"
SGLANG_DEFAULT_BOOTSTRAP_PORT = 8998
SGLANG_HOST_IP = "SGLANG_HOST_IP"


def launch(request: EngineLaunchRequest) -> EngineSpec:
    spec = request.role_spec
    options = engine_options(request, SGLANG)
    key = transfer_config_key(spec.engine_config)
    if key is not None:
        raise LaunchError(
            f"{spec.section_path}.engine_config.{key}",
            "SGLang takes no kv_transfer_config (a vLLM option); its P/D transfer is set with the "
            "disaggregation-* options (e.g. disaggregation-transfer-backend)",
        )
    env = dict(spec.env)
    env.setdefault(SGLANG_HOST_IP, request.host)
    served_bootstrap = None
    if spec.role == "union":
        options.pop("disaggregation-mode", None)
    else:
        options["disaggregation-mode"] = spec.role
    if spec.role == "prefill":
        configured = options.get("disaggregation-bootstrap-port", SGLANG_DEFAULT_BOOTSTRAP_PORT)
        served_bootstrap = request.bootstrap_port or int(configured)
        options["disaggregation-bootstrap-port"] = served_bootstrap
    return under_status_server(
        request, engine_argv(request, SGLANG_MODULE, options), env, {}, served_bootstrap
    )


SGLANG = EngineType("sglang", model_option="model-path", launch=launch)
