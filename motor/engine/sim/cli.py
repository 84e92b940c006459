"""Command line of `python -m motor.engine.sim`: dashed flags, shaped like vLLM's where the meaning is the same.

The node manager turns an engine section's `engine_config` into these flags exactly as for vLLM, so unknown
flags are an error that names the flag (argparse's "unrecognized arguments"), never silently ignored.
"""

import argparse
import json
import os
from collections.abc import Callable, Sequence

from pydantic import ValidationError

from motor.config.transfer import KvTransferConfig
from motor.engine.sim.capacity import CapacityModel, blocks_for
from motor.engine.sim.config import EcTransferConfig, KvEventsConfig, SimConfig
from motor.engine.sim.faults import Faults
from motor.engine.sim.latency import LatencyModel
from motor.kv.block_hashes import ALGORITHMS, DEFAULT_ALGORITHM, DEFAULT_SEED
from motor.protocol import env as env_names


def _number(kind: Callable[[str], float], low: float, *, inclusive: bool = True) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if value < low or (value == low and not inclusive):
            bound = f">= {low}" if inclusive else f"> {low}"
            raise argparse.ArgumentTypeError(f"{text} must be {bound}")
        return value

    return parse


def _probability(text: str) -> float:
    value = _number(float, 0.0)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text} must be between 0 and 1")
    return value


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


_CAPACITY_DEFAULTS = CapacityModel()
# (flag, parser, help); each flag's default and field come from CapacityModel.
_CAPACITY_FLAGS = [
    (
        "--prefill-tokens-per-s",
        _number(float, 0.0),
        f"prompt tokens computed per second (default {_CAPACITY_DEFAULTS.prefill_tokens_per_s:g}; 0: free)",
    ),
    (
        "--max-num-batched-tokens",
        _number(int, 1),
        f"tokens per step: decode tokens plus prefill chunks (default {_CAPACITY_DEFAULTS.max_num_batched_tokens})",
    ),
    (
        "--step-overhead-ms",
        _number(float, 0.0),
        f"fixed cost of every step (default {_CAPACITY_DEFAULTS.step_overhead_ms:g})",
    ),
    (
        "--decode-ms-per-seq",
        _number(float, 0.0),
        f"step cost per decoding sequence (default {_CAPACITY_DEFAULTS.decode_ms_per_seq:g})",
    ),
    (
        "--decode-ms-per-1k-context",
        _number(float, 0.0),
        "step cost per 1000 context tokens of the decoding sequences "
        f"(default {_CAPACITY_DEFAULTS.decode_ms_per_1k_context:g})",
    ),
    (
        "--kv-link-gb-per-s",
        _number(float, 0.0),
        f"bandwidth of the link KV arrives on, 10^9 bytes/s (default {_CAPACITY_DEFAULTS.kv_link_gb_per_s:g}; "
        "0: unlimited)",
    ),
    (
        "--kv-transfer-latency-ms",
        _number(float, 0.0),
        f"fixed cost of each KV transfer (default {_CAPACITY_DEFAULTS.kv_transfer_latency_ms:g})",
    ),
    (
        "--kv-transfer-bytes-per-token",
        _number(int, 0),
        "modelled KV bytes per token on the link, independent of the bytes the simulator really moves "
        f"(default {_CAPACITY_DEFAULTS.kv_transfer_bytes_per_token})",
    ),
]
_LATENCY_FIELDS = ("overhead_ms", "prefill_ms_per_token", "itl_ms", "itl_batch_factor")


def _flag_field(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m motor.engine.sim",
        description="motor-sim: an engine SIMULATOR (test tool, not inference) with vLLM's OpenAI HTTP surface.",
        allow_abbrev=False,
    )
    server = parser.add_argument_group("server")
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=_number(int, 0), default=8000, help="0: any free port (logged)")
    server.add_argument("--model", default="motor-sim", help="a model name or path; only names the model")
    server.add_argument(
        "--served-model-name",
        nargs="+",
        action="extend",
        default=None,
        help="names the API answers to (default: --model); the first one namespaces the pool keys",
    )
    server.add_argument("--max-model-len", type=_number(int, 2), default=8192)
    server.add_argument("--seed", type=int, default=0, help="sampling seed for requests without one")
    server.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")
    server.add_argument(
        "--otlp-traces-endpoint",
        default="",
        help="export a span per request (vLLM's llm_request) to this OTLP endpoint, continuing the request's "
        "traceparent (protocol: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, grpc by default)",
    )
    server.add_argument(
        "--virtual-engines",
        type=_number(int, 1),
        default=1,
        help="engines this process serves, each on its own port (--port, --port + 1, ...; all free ports "
        "with --port 0) with its own state; engine ids <--engine-id>-<index>",
    )

    kv = parser.add_argument_group("KV cache and transfer")
    kv.add_argument(
        "--kv-transfer-config",
        type=_json_object,
        default=None,
        help='vLLM\'s shape, e.g. {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_producer", '
        '"engine_id": "prefill-0"}; the simulator reads kv_role and engine_id',
    )
    kv.add_argument(
        "--ec-transfer-config",
        type=_json_object,
        default=None,
        help='vLLM\'s shape, e.g. {"ec_connector": "ECExampleConnector", "ec_role": "ec_producer", '
        '"ec_connector_extra_config": {"shared_storage_path": "/tmp/ec"}}: an ec_producer (encode instance) '
        "writes each image's or video's encoder output there, an ec_consumer (prefill) needs it there; "
        "without, multimodal items are encoded locally",
    )
    kv.add_argument(
        "--engine-id",
        default=None,
        help="overrides kv_transfer_config.engine_id (default: sim-<host>-<port>)",
    )
    kv.add_argument("--block-size", type=_number(int, 1), default=16, help="tokens per KV block")
    kv.add_argument("--kv-bytes-per-token", type=_number(int, 1), default=1024)
    kv.add_argument(
        "--num-gpu-blocks-override",
        dest="num_kv_blocks",
        type=_number(int, 0),
        default=4096,
        help="KV blocks the engine holds: local prefix cache size and the base of kv_cache_usage_perc",
    )
    kv.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    kv.add_argument(
        "--kv-wait-timeout-s",
        type=_number(float, 0.0, inclusive=False),
        default=30.0,
        help="how long a decode waits for a prefill's KV (callback answer or transfer manifest)",
    )
    kv.add_argument(
        "--kv-events-config",
        type=_json_object,
        default=None,
        help='vLLM\'s shape, e.g. {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": '
        '"ipc:///tmp/kv.ev", "replay_endpoint": "ipc:///tmp/kv.rp", "topic": "kv-events"}: the prefix cache\'s '
        "changes published as vLLM's KV events",
    )
    kv.add_argument(
        "--prefix-caching-hash-algo",
        choices=sorted(ALGORITHMS),
        default=DEFAULT_ALGORITHM,
        help="the hash of the published block hashes, as vLLM's (seeded by $PYTHONHASHSEED when set)",
    )
    kv.add_argument(
        "--store-config",
        default=None,
        help=f"Mooncake store config JSON (default: ${env_names.STORE_CONFIG_PATH}); without one there is no pool",
    )

    latency = parser.add_argument_group("latency model (see motor/engine/sim/latency.py)")
    latency.add_argument("--overhead-ms", type=_number(float, 0.0), default=0.0, help="fixed per request")
    latency.add_argument(
        "--prefill-ms-per-token", type=_number(float, 0.0), default=0.0, help="per uncached prompt token"
    )
    latency.add_argument(
        "--itl-ms", type=_number(float, 0.0), default=0.0, help="inter-token latency at batch 1"
    )
    latency.add_argument(
        "--itl-batch-factor",
        type=_number(float, 0.0),
        default=0.0,
        help="ITL = itl_ms × (1 + factor × (running − 1))",
    )
    latency.add_argument(
        "--max-batch",
        "--max-num-seqs",
        dest="max_batch",
        type=_number(int, 1),
        default=256,
        help="sequences running at once; the rest wait",
    )

    capacity = parser.add_argument_group(
        "capacity model (docs/sim-capacity-model.md): prefill queue, decode steps, KV-block budget, KV link; "
        "replaces the latency model"
    )
    capacity.add_argument("--capacity-model", action=argparse.BooleanOptionalAction, default=False)
    for flag, kind, help_text in _CAPACITY_FLAGS:
        capacity.add_argument(flag, type=kind, default=None, help=help_text)
    capacity.add_argument(
        "--kv-preemption",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="preempt the youngest running request when a decode needs a block and none is free "
        "(default); without, admission reserves blocks for prompt + max_tokens",
    )

    faults = parser.add_argument_group("faults (also settable at runtime: POST /admin/faults)")
    faults.add_argument("--fault-crash-after", type=_number(int, 1), default=None, metavar="N")
    faults.add_argument("--fault-hang", action=argparse.BooleanOptionalAction, default=False)
    faults.add_argument(
        "--fault-slowdown", type=_number(float, 0.0, inclusive=False), default=1.0, metavar="K"
    )
    faults.add_argument("--fault-error-rate", type=_probability, default=0.0, metavar="P")
    faults.add_argument("--fault-kv-put-fail", action=argparse.BooleanOptionalAction, default=False)
    faults.add_argument("--fault-kv-get-fail", action=argparse.BooleanOptionalAction, default=False)
    faults.add_argument("--fault-kv-corrupt", action=argparse.BooleanOptionalAction, default=False)
    faults.add_argument("--fault-health-down", action=argparse.BooleanOptionalAction, default=False)
    return parser


def parse_config(argv: Sequence[str] | None = None, *, environ: dict[str, str] | None = None) -> SimConfig:
    """Parse the command line; exits with status 2 and a message naming the flag on any error."""
    parser = build_parser()
    args = parser.parse_args(argv)
    env = os.environ if environ is None else environ

    transfer = KvTransferConfig()
    if args.kv_transfer_config is not None:
        try:
            transfer = KvTransferConfig.model_validate(args.kv_transfer_config)
        except ValidationError as exc:
            parser.error(f"argument --kv-transfer-config: {_first_error(exc)}")
    kv_events = None
    if args.kv_events_config is not None:
        try:
            kv_events = KvEventsConfig.model_validate(args.kv_events_config)
        except ValidationError as exc:
            parser.error(f"argument --kv-events-config: {_first_error(exc)}")
    ec_transfer = None
    if args.ec_transfer_config is not None:
        try:
            ec_transfer = EcTransferConfig.model_validate(args.ec_transfer_config)
        except ValidationError as exc:
            parser.error(f"argument --ec-transfer-config: {_first_error(exc)}")
    engine_id = args.engine_id or transfer.engine_id or ""
    served = tuple(args.served_model_name or [args.model])
    capacity = _capacity_model(parser, args)
    if args.port and args.port + args.virtual_engines - 1 > 65535:
        parser.error(
            f"argument --virtual-engines: ports {args.port}..{args.port + args.virtual_engines - 1} "
            "go beyond 65535; lower --port or use --port 0"
        )

    return SimConfig(
        host=args.host,
        port=args.port,
        model=args.model,
        served_model_names=served,
        kv_role=transfer.kv_role or "kv_both",
        kv_connector=transfer.kv_connector,
        engine_id=engine_id,
        block_size=args.block_size,
        max_model_len=args.max_model_len,
        seed=args.seed,
        latency=LatencyModel(
            overhead_ms=args.overhead_ms,
            prefill_ms_per_token=args.prefill_ms_per_token,
            itl_ms=args.itl_ms,
            itl_batch_factor=args.itl_batch_factor,
        ),
        capacity=capacity,
        max_batch=args.max_batch,
        kv_bytes_per_token=args.kv_bytes_per_token,
        kv_wait_timeout_s=args.kv_wait_timeout_s,
        num_kv_blocks=args.num_kv_blocks,
        enable_prefix_caching=args.enable_prefix_caching,
        store_config_path=args.store_config or env.get(env_names.STORE_CONFIG_PATH) or None,
        faults=Faults(
            crash_after=args.fault_crash_after,
            hang=args.fault_hang,
            slowdown=args.fault_slowdown,
            error_rate=args.fault_error_rate,
            kv_put_fail=args.fault_kv_put_fail,
            kv_get_fail=args.fault_kv_get_fail,
            kv_corrupt=args.fault_kv_corrupt,
            health_down=args.fault_health_down,
        ),
        log_level=args.log_level,
        otlp_traces_endpoint=args.otlp_traces_endpoint,
        virtual_engines=args.virtual_engines,
        kv_events=kv_events,
        prefix_caching_hash_algo=args.prefix_caching_hash_algo,
        hash_seed=env.get("PYTHONHASHSEED", DEFAULT_SEED),
        ec_transfer=ec_transfer,
    )


def _capacity_model(parser: argparse.ArgumentParser, args: argparse.Namespace) -> CapacityModel:
    """The capacity model from its flags; they need --capacity-model, which excludes the latency model."""
    given = {flag: getattr(args, _flag_field(flag)) for flag, _, _ in _CAPACITY_FLAGS}
    given["--kv-preemption"] = args.kv_preemption
    given = {flag: value for flag, value in given.items() if value is not None}
    if not args.capacity_model:
        if given:
            parser.error(f"{', '.join(given)}: capacity model settings need --capacity-model")
        return CapacityModel()
    latency = [f"--{name.replace('_', '-')}" for name in _LATENCY_FIELDS if getattr(args, name)]
    if latency:
        parser.error(f"{', '.join(latency)}: the latency model does not apply with --capacity-model")
    needed = blocks_for(args.max_model_len, args.block_size)
    if needed > args.num_kv_blocks:
        parser.error(
            f"argument --max-model-len: {args.max_model_len} tokens need {needed} KV blocks of "
            f"{args.block_size}, more than --num-gpu-blocks-override {args.num_kv_blocks}; raise it or lower "
            "--max-model-len"
        )
    fields = {
        "preemption" if flag == "--kv-preemption" else _flag_field(flag): value
        for flag, value in given.items()
    }
    return CapacityModel(enabled=True, **fields)


def capacity_flags(model: CapacityModel) -> list[str]:
    """The flags that give an engine `model` (none when it is off): how a launcher passes a capacity model."""
    if not model.enabled:
        return []
    flags = ["--capacity-model"]
    for flag, _, _ in _CAPACITY_FLAGS:
        flags += [flag, str(getattr(model, _flag_field(flag)))]
    flags.append("--kv-preemption" if model.preemption else "--no-kv-preemption")
    return flags


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    location = ".".join(str(part) for part in error["loc"])
    return f"{location}: {error['msg']}" if location else error["msg"]
