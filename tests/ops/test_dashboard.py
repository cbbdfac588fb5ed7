"""The Grafana dashboard and the Prometheus example use only metrics /metrics exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from qfarm.common.metrics import EXPOSED_METRICS

OPS = Path(__file__).resolve().parents[2] / "ops"
SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def base_name(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in _bases():
            return name.removesuffix(suffix)
    return name


def _bases() -> set[str]:
    return {n.removesuffix("_total") for n in EXPOSED_METRICS} | set(EXPOSED_METRICS)


def test_every_dashboard_metric_is_exposed():
    dash = json.loads((OPS / "grafana" / "qfarm-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs and all(p["datasource"]["uid"] == "${datasource}" for p in dash["panels"])
    used = {base_name(n) for e in exprs for n in re.findall(r"\bqfarm_[a-z_]+", e)}
    assert used and used <= _bases(), used - _bases()
    # and the dashboard shows each family at least once
    assert {n.removesuffix("_total") for n in EXPOSED_METRICS} <= used


def test_the_scrape_example_targets_the_api_with_a_token():
    # No YAML parser in the dependencies: the lines that matter, checked as text.
    text = (OPS / "prometheus" / "prometheus.yml").read_text()
    job = text.split("- job_name: qfarm", 1)[1].split("- job_name:", 1)[0]
    assert "metrics_path: /metrics" in job
    assert "type: Bearer" in job and "credentials_file:" in job
