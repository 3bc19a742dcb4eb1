"""deploy/prometheus/alerts.yaml: a Prometheus rule file whose every metric is the worker's.

Every metric an alert names is checked against the worker's registry (``workers.ops.metrics``).
Prometheus's own ``promtool`` is not available here: the checks are the rule-file
structure, balanced expressions, durations, and every identifier of every expression being
a PromQL function or keyword, a label name in a grouping, or a contract metric.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).parents[2]
RULES: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text())

#: The metrics contract between the worker and the deployment files: name -> type.
CONTRACT = {
    "wm_signals_events_total": "counter",
    "wm_signals_signals_emitted_total": "counter",
    "wm_signals_dedup_skips_total": "counter",
    "wm_signals_commit_conflicts_total": "counter",
    "wm_signals_dead_letters_total": "counter",
    "wm_signals_reclaimed_entries_total": "counter",
    "wm_signals_batch_duration_seconds": "histogram",
    "wm_signals_write_to_commit_seconds": "histogram",
    "wm_signals_stream_lag": "gauge",
    "wm_signals_stream_pending": "gauge",
    "wm_signals_dead_letter_stream_length": "gauge",
    "wm_signals_reconnects_total": "counter",
    "wm_signals_lanes_compacted_total": "counter",
    "wm_signals_compaction_entries_removed_total": "counter",
    "wm_signals_build_info": "gauge",
    "wm_signals_up": "gauge",
}
_HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
#: PromQL's functions, aggregations and keywords that the rules may use.
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "and", "or", "unless", "on", "ignoring", "offset",
    "rate", "irate", "increase", "delta", "deriv", "absent", "absent_over_time", "vector", "clamp_min",
    "clamp_max", "histogram_quantile", "max_over_time", "min_over_time", "avg_over_time", "bool", "group_left",
    "group_right",
}


def _rules() -> list[dict[str, Any]]:
    return [rule for group in RULES["groups"] for rule in group["rules"]]


def _series_names() -> set[str]:
    """The series names a scrape of the contract's metrics can hold."""
    names = set()
    for name, kind in CONTRACT.items():
        names |= {name + suffix for suffix in _HISTOGRAM_SERIES} if kind == "histogram" else {name}
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names of a PromQL expression: identifiers that are neither PromQL words,
    grouping labels, label matchers, durations nor numbers."""
    text = re.sub(r'"[^"]*"', "", expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", text)  # label lists
    text = re.sub(r"\[[0-9smhdw:]+\]", "", text)  # ranges and subqueries
    text = re.sub(r"\boffset\s+[0-9]+[smhdw]", "", text)
    return {word for word in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text) if word not in PROMQL_WORDS}


def test_rule_file_structure() -> None:
    """Groups of named rules; each alert has a unique name, an expression, a severity and a
    summary; ``for`` is a Prometheus duration; expressions have balanced brackets."""
    assert RULES.keys() == {"groups"} and RULES["groups"]
    names = []
    for group in RULES["groups"]:
        assert group.keys() == {"name", "rules"} and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            names.append(rule["alert"])
            assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", rule["alert"])
            assert rule["labels"]["severity"] in ("critical", "warning", "info")
            assert rule["annotations"]["summary"]
            if "for" in rule:
                assert re.fullmatch(r"[0-9]+[smh]", rule["for"]), rule["for"]
            expr = rule["expr"]
            for open_, close in ("()", "[]", "{}"):
                assert expr.count(open_) == expr.count(close), (rule["alert"], open_)
    assert len(names) == len(set(names))


def test_every_alert_of_the_readme_is_a_rule() -> None:
    """The conditions docs/operations/alerts.md promises alerts on each have a rule on the right metric."""
    on = {rule["alert"]: metric_names(rule["expr"]) for rule in _rules()}
    wanted = {
        "WmSignalsBacklogGrowing": "wm_signals_stream_lag",
        "WmSignalsDeadLetters": "wm_signals_dead_letters_total",
        "WmSignalsCommitConflicts": "wm_signals_commit_conflicts_total",
        "WmSignalsReconnecting": "wm_signals_reconnects_total",
        "WmSignalsNoWorkerReading": "wm_signals_up",
    }
    readme = (ROOT / "docs" / "operations" / "alerts.md").read_text()
    for alert, metric in wanted.items():
        assert metric in on[alert], alert
        assert alert in readme, alert


def test_every_metric_is_in_the_contract() -> None:
    """Each rule names only metrics of the contract (a histogram by its series)."""
    series = _series_names()
    for rule in _rules():
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= series, (rule["alert"], names - series)


def test_the_name_check_catches_a_misspelt_metric() -> None:
    """The extraction finds metric names inside functions, groupings and offsets (so a typo fails)."""
    expr = 'sum by (partition, le) (rate(wm_signal_lag{job="x"}[5m] offset 1h)) > on (instance) wm_signals_up'
    assert metric_names(expr) == {"wm_signal_lag", "wm_signals_up"}


def _registry_names(module: Any) -> set[str]:
    """The series names of every metric family in the worker's registries (module-level
    registries, the default one, and a registry given to a class that takes one)."""
    from prometheus_client import REGISTRY, CollectorRegistry  # noqa: PLC0415

    registries = [value for value in vars(module).values() if isinstance(value, CollectorRegistry)] + [REGISTRY]
    for value in vars(module).values():
        if inspect.isclass(value) and getattr(value, "__module__", "") == module.__name__:
            params = inspect.signature(value).parameters
            if "registry" in params and all(p.default is not p.empty for n, p in params.items() if n != "registry"):
                registry = CollectorRegistry()
                value(registry=registry)
                registries.append(registry)
    names = set()
    for registry in registries:
        for family in registry.collect():
            if family.type == "counter":
                names.add(family.name + "_total")
            elif family.type == "histogram":
                names |= {family.name + suffix for suffix in _HISTOGRAM_SERIES}
            else:
                names.add(family.name)
    return {name for name in names if name.startswith("wm_signals_")}


def test_every_contract_metric_is_in_the_worker_registry() -> None:
    """The worker registers every contract metric (so every alert's metric exists)."""
    module = importlib.import_module("workers.ops.metrics")
    registered = _registry_names(module)
    assert registered, "found no wm_signals_ metric in workers.ops.metrics' registries: adapt _registry_names"
    assert _series_names() <= registered, _series_names() - registered
