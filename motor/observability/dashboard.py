"""motor's Grafana dashboard, built as code with grafana-foundation-sdk (extra `observability`).

`python -m motor.observability.dashboard [--output FILE]` (or `motor dashboard`) writes it; the committed copy
is deploy/grafana/motor.json and a unit test keeps the two equal. Every query reads metrics motor's
components export today and the target labels of motor.deploy.prometheus (`motor_job`, `instance`, `role`):

- coordinator (`motor_coordinator_*`): requests, TTFT, ITL, end-to-end and per-leg latency, retries,
  cancelled legs, routable instances, self-overhead; `motor_coordinator_info` names its dispatch profile;
- controller (`motor_controller_instances`) and node managers (`motor_node_manager_*`): instance and engine
  states;
- engines (vLLM's own `vllm:*` metrics, which the simulator serves under the same names): queue, KV cache use,
  prompt tokens by source, generation throughput;
- the KV pool (mooncake_master's metrics) and the recording rule `motor:kv_pool_eviction_high_watermark_ratio`
  that motor's Prometheus config carries (motor.deploy.prometheus): occupancy against the watermark,
  evictions, puts/gets and the get hit ratio;
- the planner (`motor_planner_*`): instances per role it runs, wants and needs, what it measured, its
  decisions and scale steps, the reason of its last decision.
"""

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model

UID = "motor-overview"
DATASOURCE_VARIABLE = "datasource"
JOB_VARIABLE = "motor_job"
SELECTOR = f'motor_job=~"${JOB_VARIABLE}"'
RATE_WINDOW = "$__rate_interval"
DEFAULT_OUTPUT = Path("deploy/grafana/motor.json")  # relative to the repository root
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VARIABLE}}}")


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    no_value: str | None = (
        None  # what to show when nothing happened (e.g. no error yet), instead of "No data"
    )
    width: int = 8


def rate(metric: str, labels: str = "") -> str:
    selector = f"{SELECTOR},{labels}" if labels else SELECTOR
    return f"rate({metric}{{{selector}}}[{RATE_WINDOW}])"


def quantiles(histogram: str, by: str = "", legend: str = "") -> tuple[Query, ...]:
    grouping = f"le, {by}" if by else "le"
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by ({grouping}) ({rate(histogram + '_bucket')}))",
            f"{legend}P{round(q * 100)}",
        )
        for q in (0.5, 0.99)
    )


NON_2XX = 'status!~"2.."'


def by_profile(expr: str) -> str:
    return f"{expr} * on (job, instance) group_left (profile) motor_coordinator_info{{{SELECTOR}}}"


PLANNER_ROW: tuple[str, tuple[PanelSpec, ...]] = (
    "Planner",
    (
        PanelSpec(
            "Instances: running, active, target",
            "Instances per role the job runs (deployed), those routable (active) and the planner's target.",
            "short",
            (Query(f"sum by (role, state) (motor_planner_instances{{{SELECTOR}}})", "{{role}} {{state}}"),),
        ),
        PanelSpec(
            "Instances needed",
            "What each role needs for the TTFT and ITL objectives at the measured traffic and capacity.",
            "short",
            (Query(f"max by (role) (motor_planner_needed_instances{{{SELECTOR}}})", "{{role}}"),),
        ),
        PanelSpec(
            "Decisions and scale steps",
            "The planner's decisions per second by kind (hold, scale, convert) and scale steps by outcome.",
            "ops",
            (
                Query(f"sum by (kind) ({rate('motor_planner_decisions_total')})", "{{kind}}"),
                Query(f"sum by (outcome) ({rate('motor_planner_scale_steps_total')})", "steps {{outcome}}"),
            ),
            no_value="0",
        ),
        PanelSpec(
            "Arrivals and capacity",
            "Requests/s arriving, and one instance's measured capacity in tokens/s (prefill: prompt tokens "
            "computed; decode: output tokens within the ITL objective).",
            "short",
            (
                Query(f'max(motor_planner_figure{{{SELECTOR},figure="arrival_rate"}})', "arrivals/s"),
                Query(
                    f'max by (figure) (motor_planner_figure{{{SELECTOR},figure=~".+_tokens_per_s"}})',
                    "{{figure}}",
                ),
            ),
            width=12,
        ),
        PanelSpec(
            "Last decision",
            "The planner's last decision and its reason (in the legend).",
            "short",
            (Query(f"motor_planner_last_decision_info{{{SELECTOR}}}", "{{kind}}: {{reason}}"),),
            width=12,
        ),
    ),
)
ROWS: tuple[tuple[str, tuple[PanelSpec, ...]], ...] = (
    (
        "Traffic",
        (
            PanelSpec(
                "Requests by profile and route",
                "Client requests answered per second (all statuses), by the coordinator's dispatch profile.",
                "reqps",
                (
                    Query(
                        f"sum by (profile, route) ({by_profile(rate('motor_coordinator_requests_total'))})",
                        "{{profile}} {{route}}",
                    ),
                ),
            ),
            PanelSpec(
                "Errors by profile and status",
                "Requests answered with a non-2xx status per second (499: the client went away).",
                "reqps",
                (
                    Query(
                        "sum by (profile, status) "
                        f"({by_profile(rate('motor_coordinator_requests_total', NON_2XX))})",
                        "{{profile}} {{status}}",
                    ),
                ),
                no_value="0",
            ),
            PanelSpec(
                "Requests in flight",
                "Client requests the coordinators are serving right now.",
                "short",
                (Query(f"sum(motor_coordinator_in_flight_requests{{{SELECTOR}}})", "in flight"),),
            ),
        ),
    ),
    (
        "Latency at the coordinator",
        (
            PanelSpec(
                "Time to first token",
                "From request arrival to the first streamed output sent to the client.",
                "s",
                quantiles("motor_coordinator_ttft_seconds", legend="TTFT "),
            ),
            PanelSpec(
                "Inter-token latency",
                "Time between streamed events relayed to the client.",
                "s",
                quantiles("motor_coordinator_itl_seconds", legend="ITL "),
            ),
            PanelSpec(
                "End-to-end latency",
                "From request arrival to the last byte sent, by route.",
                "s",
                quantiles("motor_coordinator_e2e_seconds", "route", "{{route}} "),
            ),
            PanelSpec(
                "Per-leg latency",
                "encode: the encode leg of an image or video request (EPD); prefill: the prefill leg; kv_wait: "
                "KV handover (prefill done → the decode's first output); decode: first output → end; aggregated: "
                "a single-instance leg.",
                "s",
                quantiles("motor_coordinator_leg_seconds", "leg", "{{leg}} "),
            ),
            PanelSpec(
                "Coordinator self-overhead",
                "Time spent in the coordinator per request, excluding waits on engines and on the client.",
                "s",
                quantiles("motor_coordinator_overhead_seconds", legend="overhead "),
            ),
        ),
    ),
    (
        "Retries and legs",
        (
            PanelSpec(
                "Legs retried (moved to another instance)",
                "Failed legs retried before anything reached the client, per second, by role and reason.",
                "ops",
                (
                    Query(
                        f"sum by (role, reason) ({rate('motor_coordinator_retries_total')})",
                        "{{role}} {{reason}}",
                    ),
                ),
                no_value="0",
            ),
            PanelSpec(
                "Legs cancelled",
                "Engine legs the coordinator closed before they finished, per second, by reason.",
                "ops",
                (Query(f"sum by (reason) ({rate('motor_coordinator_cancelled_legs_total')})", "{{reason}}"),),
                no_value="0",
            ),
            PanelSpec(
                "Encode legs (EPD)",
                "Encode legs of image and video requests, per second, by outcome: done, failed (retried on "
                "another encode instance while the budget lasts), aborted.",
                "ops",
                (Query(f"sum by (outcome) ({rate('motor_coordinator_encode_legs_total')})", "{{outcome}}"),),
                no_value="0",
            ),
        ),
    ),
    (
        "Instances",
        (
            PanelSpec(
                "Instances by role and status",
                "The controller's registry: initial, active and inactive instances per role.",
                "short",
                (
                    Query(
                        f"sum by (role, status) (motor_controller_instances{{{SELECTOR}}})",
                        "{{role}} {{status}}",
                    ),
                ),
            ),
            PanelSpec(
                "Routable instances at the coordinator",
                "Instances the coordinators can dispatch to, per role.",
                "short",
                (
                    Query(
                        f'sum by (role) (motor_coordinator_instances{{{SELECTOR},state="active"}})',
                        "{{role}}",
                    ),
                ),
            ),
            PanelSpec(
                "Engine state and restarts",
                "Each node manager's engine state (1 = current) and its engine restarts.",
                "short",
                (
                    Query(
                        f"max by (instance, state) (motor_node_manager_engine_state{{{SELECTOR}}}) == 1",
                        "{{instance}} {{state}}",
                    ),
                    Query(
                        f"max by (instance) (motor_node_manager_engine_restarts_total{{{SELECTOR}}})",
                        "{{instance}} restarts",
                    ),
                ),
            ),
        ),
    ),
    (
        "Engines (vLLM metrics)",
        (
            PanelSpec(
                "Engine queue",
                "vllm:num_requests_running and vllm:num_requests_waiting per engine.",
                "short",
                (
                    Query(
                        f"sum by (instance) (vllm:num_requests_running{{{SELECTOR}}})",
                        "{{instance}} running",
                    ),
                    Query(
                        f"sum by (instance) (vllm:num_requests_waiting{{{SELECTOR}}})",
                        "{{instance}} waiting",
                    ),
                ),
                width=6,
            ),
            PanelSpec(
                "KV cache usage",
                "vllm:kv_cache_usage_perc per engine (1 = the engine's KV cache is full).",
                "percentunit",
                (Query(f"max by (instance) (vllm:kv_cache_usage_perc{{{SELECTOR}}})", "{{instance}}"),),
                width=6,
            ),
            PanelSpec(
                "Prompt tokens by source",
                "Prompt tokens per second: computed locally, local prefix-cache hits, or received by KV transfer.",
                "short",
                (
                    Query(
                        f"sum by (role, source) ({rate('vllm:prompt_tokens_by_source_total')})",
                        "{{role}} {{source}}",
                    ),
                ),
                width=6,
            ),
            PanelSpec(
                "Generated tokens",
                "Generation tokens per second, by role.",
                "short",
                (Query(f"sum by (role) ({rate('vllm:generation_tokens_total')})", "{{role}}"),),
                width=6,
            ),
        ),
    ),
    (
        "KV pool (Mooncake master)",
        (
            PanelSpec(
                "Pool occupancy and eviction watermark",
                "Allocated / mounted capacity; the master starts evicting at the high watermark.",
                "percentunit",
                (
                    Query(
                        f"sum by (instance) (master_allocated_bytes{{{SELECTOR}}}) / "
                        f"sum by (instance) (master_total_capacity_bytes{{{SELECTOR}}})",
                        "occupancy",
                    ),
                    Query(
                        f"max(motor:kv_pool_eviction_high_watermark_ratio{{{SELECTOR}}})",
                        "eviction high watermark",
                    ),
                ),
                width=6,
            ),
            PanelSpec(
                "Evictions",
                "Objects evicted per second, and eviction runs per second.",
                "ops",
                (
                    Query(f"sum({rate('master_evicted_key_count')})", "evicted objects"),
                    Query(f"sum({rate('master_successful_evictions_total')})", "eviction runs"),
                ),
                width=6,
            ),
            PanelSpec(
                "Puts and gets",
                "Put requests (single and batch items), put failures and get requests per second.",
                "ops",
                (
                    Query(
                        f"sum({rate('master_put_start_requests_total')}) + "
                        f"sum({rate('master_batch_put_start_items_total')})",
                        "puts",
                    ),
                    Query(
                        f"sum({rate('master_put_start_failures_total')}) + "
                        f"sum({rate('master_batch_put_start_failed_items_total')})",
                        "put failures",
                    ),
                    Query(f"sum({rate('total_get_nums_')})", "gets"),
                ),
                width=6,
            ),
            PanelSpec(
                "Get hit ratio",
                "Gets that found their object / all gets.",
                "percentunit",
                (Query(f"sum({rate('valid_get_nums_')}) / sum({rate('total_get_nums_')})", "hit ratio"),),
                width=6,
            ),
        ),
    ),
    PLANNER_ROW,
)


def _panel(spec: PanelSpec, panel_id: int) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .id(panel_id)
        .title(spec.title)
        .description(spec.description)
        .datasource(DATASOURCE)
        .unit(spec.unit)
        .height(8)
        .span(spec.width)
    )
    if spec.no_value is not None:
        panel = panel.no_value(spec.no_value)
    for ref, query in zip("ABCDEFGH", spec.queries, strict=False):
        panel = panel.with_target(
            gp.Dataquery().ref_id(ref).expr(query.expr).legend_format(query.legend).datasource(DATASOURCE)
        )
    return panel


def build_dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (a dict)."""
    builder = (
        gd.Dashboard("motor")
        .uid(UID)
        .description("motor: PD-disaggregated serving through the coordinator, its engines and the KV pool")
        .tags(["motor", "llm-serving", "vllm"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .time("now-30m", "now")
        .refresh("10s")
        .with_variable(gd.DatasourceVariable(DATASOURCE_VARIABLE).label("Data source").type("prometheus"))
        .with_variable(
            gd.QueryVariable(JOB_VARIABLE)
            .label("motor job")
            .datasource(DATASOURCE)
            .query("label_values(motor_coordinator_info, motor_job)")
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .all_value(".+")
            .multi(True)
        )
    )
    panel_id = 0
    for title, panels in ROWS:
        panel_id += 1
        builder = builder.with_row(gd.Row(title).id(panel_id))
        for spec in panels:
            panel_id += 1
            builder = builder.with_panel(_panel(spec, panel_id))
    return json.loads(json.dumps(builder.build(), cls=JSONEncoder))


def dashboard_json() -> str:
    return json.dumps(build_dashboard(), indent=2, sort_keys=True) + "\n"


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of every panel, rows' nested panels included."""
    found = []
    for panel in dashboard.get("panels", []):
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                found.append((inner["title"], target["expr"]))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m motor.observability.dashboard", description=__doc__)
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help=f"file to write ('-': stdout; default {DEFAULT_OUTPUT})",
    )
    args = parser.parse_args(argv)
    return write_dashboard(args.output)


def write_dashboard(output: Path) -> int:
    text = dashboard_json()
    if str(output) == "-":
        sys.stdout.write(text)
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    print(f"wrote the motor dashboard ({len(panel_queries(json.loads(text)))} queries) to {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
