"""The Grafana dashboard built as code: the committed deploy/grafana/motor.json is what the code generates, and
every panel queries motor's metrics through the data source and job variables."""

import json
import re
from pathlib import Path

from motor.observability.dashboard import build_dashboard, dashboard_json, main, panel_queries

COMMITTED = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "motor.json"
METRIC_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}")


def test_committed_dashboard_equals_the_generated_one() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == dashboard_json(), (
        "deploy/grafana/motor.json is stale: regenerate it with `python -m motor.observability.dashboard`"
    )


def test_every_panel_queries_through_the_variables() -> None:
    dashboard = build_dashboard()
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "motor_job"}
    for panel in panels:
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            selectors = METRIC_SELECTOR.findall(target["expr"])
            assert selectors, target["expr"]
            for metric, labels in selectors:
                assert 'motor_job=~"$motor_job"' in labels, (panel["title"], metric)
    assert len(panel_queries(dashboard)) == sum(len(p["targets"]) for p in panels)


def test_main_writes_the_dashboard(tmp_path: Path) -> None:
    output = tmp_path / "grafana" / "motor.json"
    assert main(["--output", str(output)]) == 0
    assert json.loads(output.read_text()) == build_dashboard()
