"""motor's engine simulator (`engine_type: sim`, `motor-sim`): it takes vLLM's options and kv_transfer_config
and needs no model weights."""

from motor.deploy.engines.command import engine_argv, store_config_file, under_status_server
from motor.deploy.engines.registry import EngineType
from motor.deploy.engines.request import EngineLaunchRequest
from motor.deploy.engines.vllm import vllm_options
from motor.protocol.specs import EngineSpec

SIM_MODULE = "motor.engine.sim"


def launch(request: EngineLaunchRequest) -> EngineSpec:
    options, _ = vllm_options(request, SIM)
    env = dict(request.role_spec.env)
    files = store_config_file(request, env)
    return under_status_server(request, engine_argv(request, SIM_MODULE, options), env, files, None)


SIM = EngineType("sim", model_option="model", launch=launch, needs_model=False)
