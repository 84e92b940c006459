"""What the coordinator needs: its compiled spec, with the controller token and the API keys read from the
environment (the spec names the variables)."""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from motor.config.models import CoordinatorConfig
from motor.kv.connectors import DispatchProfile
from motor.protocol.engine import engine_owned_by
from motor.protocol.instances import InstanceRole
from motor.protocol.specs import CoordinatorSpec, KvIndexSpec, TlsFiles


@dataclass(frozen=True)
class CoordinatorSettings:
    config: CoordinatorConfig
    profile: DispatchProfile
    required_roles: tuple[InstanceRole, ...]
    advertise_host: str
    bind_host: str
    infer_port: int
    mgmt_port: int
    served_models: tuple[str, ...]
    engine_types: tuple[str, ...]  # of the configured roles, for /v1/models and GET /version
    owned_by: str  # `owned_by` in /v1/models: the configured engine types (the simulator says it is one)
    run_dir: str | None
    spec_path: Path | None  # where workers of a multi-worker coordinator read the same spec
    controller_token: str | None  # POST /instances/refresh requires it as a bearer token (unset: refused)
    infer_tls: TlsFiles | None = None
    mgmt_tls: TlsFiles | None = None
    kv_index: KvIndexSpec | None = (
        None  # kv_cache_affinity: how the engines hash blocks, where their tokenizer is
    )

    @classmethod
    def from_spec(
        cls, spec: CoordinatorSpec, spec_path: Path | None = None, environ: Mapping[str, str] = os.environ
    ) -> "CoordinatorSettings":
        config = spec.config
        if spec.api_keys is not None:
            keys = [line.strip() for line in spec.api_keys.resolve(environ).splitlines() if line.strip()]
            config = config.model_copy(
                update={"api_key_config": config.api_key_config.model_copy(update={"valid_keys": keys})}
            )
        return cls(
            config=config,
            profile=spec.profile,
            required_roles=tuple(spec.required_roles),
            advertise_host=spec.advertise_host,
            bind_host=spec.bind_host,
            infer_port=spec.infer_port,
            mgmt_port=spec.mgmt_port,
            served_models=tuple(spec.served_models),
            engine_types=tuple(spec.engine_types),
            owned_by=", ".join(dict.fromkeys(engine_owned_by(t) for t in spec.engine_types)),
            run_dir=spec.run_dir,
            spec_path=spec_path,
            controller_token=spec.controller_token.resolve(environ) or None,
            infer_tls=spec.infer_tls,
            mgmt_tls=spec.mgmt_tls,
            kv_index=spec.kv_index,
        )
