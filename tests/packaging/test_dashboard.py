"""Monitoring, read statically: the Grafana dashboard deploy/grafana/dashboards/gangpreempt.json
(its shape, a grid without overlaps, and every PromQL query naming only metrics and labels
the services export), Prometheus in docker compose scraping the four services on their
health port, Grafana provisioned with that Prometheus and the dashboard, and on Kubernetes
the base's prometheus.io annotations and the optional component
deploy/k8s/components/servicemonitor (Services, ServiceMonitor, NetworkPolicy)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from gangpreempt.bus import SERVICES
from gangpreempt.config import load_settings
from gangpreempt.telemetry import metrics
from tests.packaging.conftest import K8S, ROOT, load_yaml, named, of_kind, render
from tests.packaging.test_compose import environment, interpolate
from tests.packaging.test_kubernetes import (
    HEALTH_PORT,
    KUBERNETES_VERSION,
    NAMESPACE,
    allowed,
    container,
    deployment,
    env_of,
    pod_labels,
    selects,
)

pytestmark = pytest.mark.packaging

COMPOSE = ROOT / "docker-compose.yml"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "gangpreempt.json"
COMPONENT = K8S / "components" / "servicemonitor"
GRID_WIDTH = 24
DATASOURCE = "${datasource}"
# Series Prometheus writes itself for every target (not exported by the services).
PROMETHEUS_SERIES = {"up"}
# Labels Prometheus puts on every series it scrapes (the scrape config's job, the target).
TARGET_LABELS = {"job", "instance"}


# -- what the services export -------------------------------------------------------------

SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}


def exported() -> dict[str, set[str] | None]:
    """Every sample name the registry of ``gangpreempt.telemetry.metrics`` exports, with
    the label names of its metric (None when unknown: a family with no sample yet that is
    not one of the module's metric objects)."""
    labels: dict[str, set[str] | None] = {}
    declared = {
        m._name: set(m._labelnames)
        for m in vars(metrics).values()
        if isinstance(m, MetricWrapperBase)
    }
    for family in REGISTRY.collect():
        names: set[str] | None = declared.get(family.name)
        if names is None and family.samples:
            names = {k for s in family.samples for k in s.labels}
        elif names is None and family.name.endswith("_info"):
            names = set()  # python_info and the like: fixed labels, none used here
        for suffix in (*SUFFIXES[family.type], ""):
            sample = family.name + suffix
            extra = {"le"} if suffix == "_bucket" else set()
            labels[sample] = None if names is None else names | extra
    return labels


EXPORTED = exported()


def test_the_registry_holds_the_modules_metrics() -> None:
    """The test reads the real registry: the names it checks against are there."""
    for name in (
        "gangpreempt_plans_total",
        "gangpreempt_decision_hop_seconds_bucket",
        "gangpreempt_consumer_lag",
        "gangpreempt_state_objects",
        "kueue_preempted_workloads_total",
    ):
        assert name in EXPORTED, name
    assert EXPORTED["gangpreempt_victims_total"] == {"reason", "kind"}
    assert EXPORTED["gangpreempt_decision_hop_seconds_bucket"] == {"hop", "le"}


# -- PromQL, as far as the dashboard needs ------------------------------------------------

AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}  # fmt: skip
FUNCTIONS = AGGREGATIONS | {
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max",
    "clamp_min", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta",
    "deriv", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
    "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum",
    "hour", "idelta", "increase", "irate", "label_join", "label_replace", "ln", "log2",
    "log10", "minute", "month", "predict_linear", "rate", "resets", "round", "scalar",
    "sgn", "sort", "sort_desc", "sort_by_label", "sort_by_label_desc", "sqrt", "time",
    "timestamp", "vector", "year", "avg_over_time", "min_over_time", "max_over_time",
    "sum_over_time", "count_over_time", "quantile_over_time", "stddev_over_time",
    "stdvar_over_time", "last_over_time", "present_over_time",
}  # fmt: skip
KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "atan2",
    "group_left",
    "group_right",
}
STRING = re.compile(r""""(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`""")
MATCHERS = re.compile(r"\{([^{}]*)\}")
RANGE = re.compile(r"\[[^\]]*\]")
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
IDENTIFIER = re.compile(r"(?<![\w.$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")


class Query:
    """The names in one PromQL expression: metrics, functions, grouping labels and the
    labels of its matchers."""

    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.metrics: set[str] = set()
        self.functions: set[str] = set()
        self.grouping: set[str] = set()
        self.matched: set[str] = set()
        text = STRING.sub('""', expr)
        for m in MATCHERS.finditer(text):
            self.matched |= set(MATCHER_LABEL.findall(m.group(1)))
        text = MATCHERS.sub(" ", text)
        text = RANGE.sub(" ", text)
        for m in GROUPING.finditer(text):
            self.grouping |= {label.strip() for label in m.group(2).split(",") if label.strip()}
        text = GROUPING.sub(" ", text)
        for m in IDENTIFIER.finditer(text):
            name, call = m.group(1), m.group(2)
            if call:
                self.functions.add(name)
            elif name not in KEYWORDS:
                self.metrics.add(name)


def test_the_query_reader_reads_promql() -> None:
    q = Query(
        'histogram_quantile(0.95, sum by (le, hop) (rate(gangpreempt_decision_hop_seconds_bucket{job=~"$job",hop!="x"}[$__rate_interval]))) '
        "/ on (job) group_left sum(up) * 1e3"
    )
    assert q.metrics == {"gangpreempt_decision_hop_seconds_bucket", "up"}
    assert q.functions == {"histogram_quantile", "sum", "rate"}
    assert q.grouping == {"le", "hop", "job"}
    assert q.matched == {"job", "hop"}


# -- the dashboard ------------------------------------------------------------------------

# The shape Grafana needs to load it, as a JSON schema (Grafana publishes none to validate
# against offline; its own schema is CUE): the parts gangpreempt's dashboard uses.
GRID_POS = {
    "type": "object",
    "required": ["x", "y", "w", "h"],
    "properties": {
        "x": {"type": "integer", "minimum": 0, "maximum": GRID_WIDTH - 1},
        "y": {"type": "integer", "minimum": 0},
        "w": {"type": "integer", "minimum": 1, "maximum": GRID_WIDTH},
        "h": {"type": "integer", "minimum": 1},
    },
}
DATASOURCE_REF = {
    "type": "object",
    "required": ["type", "uid"],
    "properties": {"type": {"const": "prometheus"}, "uid": {"const": DATASOURCE}},
}
TARGET = {
    "type": "object",
    "required": ["refId", "expr", "datasource"],
    "properties": {
        "refId": {"type": "string", "pattern": "^[A-Z]$"},
        "expr": {"type": "string", "minLength": 1},
        "legendFormat": {"type": "string"},
        "datasource": DATASOURCE_REF,
    },
}
PANEL = {
    "type": "object",
    "required": ["id", "type", "title", "gridPos"],
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "type": {"enum": ["row", "timeseries", "stat", "gauge", "bargauge", "table"]},
        "title": {"type": "string", "minLength": 1},
        "gridPos": GRID_POS,
    },
    "if": {"properties": {"type": {"const": "row"}}},
    "then": {"required": ["collapsed", "panels"], "properties": {"panels": {"maxItems": 0}}},
    "else": {
        "required": ["datasource", "targets", "fieldConfig", "options", "description"],
        "properties": {
            "datasource": DATASOURCE_REF,
            "targets": {"type": "array", "minItems": 1, "items": TARGET},
            "fieldConfig": {"type": "object", "required": ["defaults", "overrides"]},
        },
    },
}
DASHBOARD_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": [
        "title",
        "uid",
        "panels",
        "schemaVersion",
        "templating",
        "time",
        "editable",
        "refresh",
        "tags",
        "annotations",
    ],
    "properties": {
        "title": {"const": "gangpreempt"},
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "id": {"type": "null"},  # provisioned: Grafana assigns it
        "schemaVersion": {"type": "integer", "minimum": 36, "maximum": 41},
        "panels": {"type": "array", "minItems": 1, "items": PANEL},
        "time": {"type": "object", "required": ["from", "to"]},
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {
                "list": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name", "type", "query"]},
                }
            },
        },
    },
}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The panels that query (rows left out)."""
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            yield panel


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], Query]]:
    for panel in panels(dashboard):
        for target in panel["targets"]:
            yield panel["title"], target, Query(target["expr"])


def test_dashboard_has_grafanas_shape(dashboard: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(DASHBOARD_SCHEMA)
    errors = [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(dashboard)
    ]
    assert not errors, "\n".join(errors)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    titles = [p["title"] for p in panels(dashboard)]
    assert len(titles) == len(set(titles)), "panel titles are unique"
    for panel in panels(dashboard):
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_dashboard_picks_its_prometheus_by_a_variable(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    source = variables["datasource"]
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    job = variables["job"]
    assert job["type"] == "query"
    assert job["datasource"] == {"type": "prometheus", "uid": DATASOURCE}
    assert job["includeAll"]
    assert job["multi"]
    m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", job["definition"])
    assert m, job["definition"]
    assert job["query"]["query"] == job["definition"]
    assert m.group(1) in EXPORTED
    assert m.group(2) == "job"
    # every panel queries through the variables: no data source or service hard-coded
    for title, target, q in queries(dashboard):
        assert "job" in q.matched, title
        assert '=~"$job"' in target["expr"].replace(" ", ""), title
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == DATASOURCE, panel["title"]


def test_no_two_panels_overlap(dashboard: dict[str, Any]) -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= GRID_WIDTH, f"{panel['title']}: wider than the grid"
        if panel["type"] == "row":
            assert (g["x"], g["w"], g["h"]) == (0, GRID_WIDTH, 1), panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                other = taken.setdefault((x, y), panel["title"])
                assert other == panel["title"], f"{panel['title']} overlaps {other} at {x},{y}"


def test_every_query_names_metrics_the_services_export(dashboard: dict[str, Any]) -> None:
    for title, target, q in queries(dashboard):
        where = f"{title} [{target['refId']}]: {q.expr}"
        assert q.expr.count("(") == q.expr.count(")"), where
        assert q.metrics, f"{where}: no metric"
        unknown = q.metrics - set(EXPORTED) - PROMETHEUS_SERIES
        assert not unknown, f"{where}: not exported by gangpreempt.telemetry.metrics: {unknown}"
        assert q.functions <= FUNCTIONS, f"{where}: not PromQL: {q.functions - FUNCTIONS}"
        known: set[str] = set(TARGET_LABELS)
        for metric in q.metrics - PROMETHEUS_SERIES:
            labels = EXPORTED[metric]
            if labels is None:
                break  # a metric whose labels cannot be read: trust the query
            known |= labels
        else:
            assert q.grouping <= known, f"{where}: no such label {q.grouping - known}"
            assert q.matched <= known, f"{where}: no such label {q.matched - known}"
        if "histogram_quantile" in q.functions:
            assert all(m.endswith("_bucket") for m in q.metrics), where
            assert "le" in q.grouping, f"{where}: histogram_quantile needs `by (le)`"
        counters = {m for m in q.metrics if m.endswith(("_total", "_bucket", "_count"))}
        if counters:
            assert q.functions & {"rate", "increase", "irate"}, f"{where}: a raw counter"
        legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
        shown = q.grouping if q.functions & AGGREGATIONS else known
        assert legend <= shown, f"{where}: legend names {legend - shown}, not in the result"


# Each group of the issue, by a metric its panel must query (and how).
GROUPS = {
    "decisions": ("gangpreempt_plans_total", "outcome"),
    "drops": ("gangpreempt_plans_dropped_total", "reason"),
    "preemption attempts": ("scheduler_preemption_attempts_total", None),
    "victims": ("gangpreempt_victims_total", "kind"),
    "kueue preempted": ("kueue_preempted_workloads_total", "preempting_cluster_queue"),
    "latency per hop": ("gangpreempt_decision_hop_seconds_bucket", "hop"),
    "core calls": ("gangpreempt_core_call_seconds_bucket", "call"),
    "quota cycle": ("gangpreempt_quota_cycle_seconds_bucket", None),
    "lag": ("gangpreempt_consumer_lag", "consumer"),
    "redeliveries": ("gangpreempt_redeliveries_total", "consumer"),
    "dead letters": ("gangpreempt_dead_letters_total", "reason"),
    "lease holder": ("gangpreempt_lease_holder", "service"),
    "fencing token": ("gangpreempt_fencing_token", "service"),
    "state objects": ("gangpreempt_state_objects", "kind"),
    "ingest relists": ("gangpreempt_ingest_relists_total", "source"),
    "ingest decode": ("gangpreempt_ingest_decode_seconds_bucket", "source"),
    "gc pauses": ("gangpreempt_gc_pause_seconds_bucket", "generation"),
}


@pytest.mark.parametrize("group", GROUPS)
def test_each_group_of_the_issue_has_its_panel(dashboard: dict[str, Any], group: str) -> None:
    metric, split = GROUPS[group]
    found = [(title, q) for title, _, q in queries(dashboard) if metric in q.metrics]
    assert found, f"{group}: no panel queries {metric}"
    if split:
        assert any(split in q.grouping for _, q in found), f"{group}: not split by {split}"


def test_latency_per_hop_shows_p50_p95_p99(dashboard: dict[str, Any]) -> None:
    quantiles = set()
    for _, target, q in queries(dashboard):
        if "gangpreempt_decision_hop_seconds_bucket" in q.metrics:
            m = re.match(r"\s*histogram_quantile\(\s*([0-9.]+)", target["expr"])
            assert m, target["expr"]
            quantiles.add(float(m.group(1)))
    assert quantiles >= {0.5, 0.95, 0.99}


# -- docker compose: Prometheus and Grafana -------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc: dict[str, Any] = load_yaml(COMPOSE)
    return doc


def mounts(svc: dict[str, Any]) -> dict[str, str]:
    """target -> source of a compose service's volumes (bind mounts of the repository as
    paths under ROOT, named volumes by name)."""
    found = {}
    for volume in svc.get("volumes", []):
        source, target, *_ = interpolate(volume, {}).split(":")
        found[target] = str((ROOT / source).resolve()) if source.startswith(".") else source
    return found


def mounted(svc: dict[str, Any], path: str) -> Path:
    """The file or directory of the repository that ``path`` is inside the container."""
    inside = PurePosixPath(path)
    for target, source in mounts(svc).items():
        if inside.is_relative_to(target):
            assert source.startswith("/"), f"{path} is on volume {source}, not a repository file"
            return Path(source) / inside.relative_to(target)
    raise AssertionError(f"{path} is not mounted")


def flag(command: list[str], name: str, default: str) -> str:
    for arg in command:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return default


PINNED = re.compile(r"^[\w./-]+:v?\d+\.\d+\.\d+$")


def test_prometheus_scrapes_each_service_on_its_health_port(compose: dict[str, Any]) -> None:
    prometheus = compose["services"]["prometheus"]
    assert PINNED.match(prometheus["image"]), prometheus["image"]
    config_path = flag(prometheus["command"], "config.file", "/etc/prometheus/prometheus.yml")
    source = mounted(prometheus, config_path)
    assert source == ROOT / "deploy" / "prometheus" / "prometheus.yml"
    config = load_yaml(source)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(SERVICES), "one job per service, named as the service"
    networks = prometheus.get("networks")
    for service, job in jobs.items():
        svc = compose["services"][service]
        assert svc.get("networks") == networks, f"{service}: not on Prometheus's network"
        settings = load_settings(environ=environment(compose, service))
        assert settings.health_port != 0, f"{service}: no health port, so no /metrics"
        assert job.get("metrics_path", "/metrics") == "/metrics"
        assert job.get("scheme", "http") == "http"
        assert job.get("honor_labels", False) is False
        targets = [t for group in job["static_configs"] for t in group["targets"]]
        assert targets == [f"{service}:{settings.health_port}"], service
        for group in job["static_configs"]:
            assert not set(group.get("labels", {})) & {"service"}, "`service` is a metric's label"
    interval = config["global"]["scrape_interval"]
    assert all(job.get("scrape_interval", interval) == interval for job in jobs.values())
    storage = flag(prometheus["command"], "storage.tsdb.path", "/prometheus")
    assert mounts(prometheus)[storage] in compose["volumes"], "the TSDB is on a volume"
    assert "127.0.0.1:9090:9090" in prometheus["ports"]
    assert "/-/ready" in " ".join(prometheus["healthcheck"]["test"])


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard(
    compose: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    grafana = compose["services"]["grafana"]
    assert PINNED.match(grafana["image"]), grafana["image"]
    env = grafana.get("environment", {})
    provisioning = mounted(grafana, env.get("GF_PATHS_PROVISIONING", "/etc/grafana/provisioning"))
    assert provisioning == GRAFANA / "provisioning"

    (datasources_file,) = (provisioning / "datasources").glob("*.yaml")
    (source,) = load_yaml(datasources_file)["datasources"]
    assert source["type"] == "prometheus" == dashboard["templating"]["list"][0]["query"]
    url = urlparse(source["url"])
    assert url.hostname == "prometheus"
    assert url.hostname in compose["services"]
    prometheus = compose["services"]["prometheus"]
    listen = flag(prometheus["command"], "web.listen-address", "0.0.0.0:9090")
    assert str(url.port) == listen.rsplit(":", 1)[1]
    assert source["isDefault"] is True
    assert "prometheus" in grafana["depends_on"]

    (providers_file,) = (provisioning / "dashboards").glob("*.yaml")
    (provider,) = load_yaml(providers_file)["providers"]
    assert provider["type"] == "file"
    directory = mounted(grafana, provider["options"]["path"])
    assert directory == DASHBOARD.parent
    assert (directory / DASHBOARD.name).is_file()
    home = env.get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        assert mounted(grafana, home) == DASHBOARD
    for target, source_path in mounts(grafana).items():
        if source_path.startswith("/"):
            assert any(v.endswith(f":{target}:ro") for v in grafana["volumes"]), target
    assert "127.0.0.1:3000:3000" in grafana["ports"]
    assert "/api/health" in " ".join(grafana["healthcheck"]["test"])


def test_monitoring_runs_as_hardened_as_the_rest(compose: dict[str, Any]) -> None:
    for name in ("prometheus", "grafana"):
        svc = compose["services"][name]
        assert svc["read_only"] is True, name
        assert svc["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in svc["security_opt"], name
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name}: {port} is open beyond this machine"
        for target, source in mounts(svc).items():
            if not source.startswith("/"):
                assert source in compose["volumes"], f"{name}: {target} on {source}"


# -- Kubernetes: annotations on the base, the ServiceMonitor component ----------------------


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(K8S)


@pytest.mark.parametrize("service", SERVICES)
def test_each_pod_template_asks_to_be_scraped_on_its_health_port(
    base: list[dict[str, Any]], service: str
) -> None:
    dep = deployment(base, service)
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    c = container(dep)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    settings = load_settings(environ={**env_of(base, c), "GANGPREEMPT_NATS_PASSWORD": "x"})
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(ports["health"]) == str(settings.health_port)
    assert annotations["prometheus.io/path"] == "/metrics"


@pytest.fixture(scope="module")
def with_component(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The base with the component, as an overlay uses it."""
    overlay = tmp_path_factory.mktemp("overlay")
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(K8S, overlay)],
                "components": [os.path.relpath(COMPONENT, overlay)],
            }
        )
    )
    return render(overlay)


def added(base: list[dict[str, Any]], objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    before = {(o["kind"], o["metadata"]["name"]) for o in base}
    return [o for o in objects if (o["kind"], o["metadata"]["name"]) not in before]


def test_component_adds_only_monitoring_objects(
    base: list[dict[str, Any]], with_component: list[dict[str, Any]]
) -> None:
    assert load_yaml(COMPONENT / "kustomization.yaml")["kind"] == "Component"
    new = added(base, with_component)
    assert sorted({o["kind"] for o in new}) == ["NetworkPolicy", "Service", "ServiceMonitor"]
    untouched = [o for o in with_component if o not in new]
    assert untouched == base, "the component changes nothing of the base"
    errors = []
    for obj in new:
        assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            continue  # the operator's CRD: no schema in kubernetes-validate
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
    assert not errors, "\n".join(errors)


def test_servicemonitor_scrapes_each_services_pods_as_its_job(
    with_component: list[dict[str, Any]],
) -> None:
    (monitor,) = of_kind(with_component, "ServiceMonitor")
    spec = monitor["spec"]
    services = [
        s
        for s in of_kind(with_component, "Service")
        if selects(spec["selector"], s["metadata"]["labels"])
    ]
    jobs = {s["metadata"]["labels"][spec["jobLabel"]] for s in services}
    assert jobs == set(SERVICES), "job is the service's name, as in docker compose"
    (endpoint,) = spec["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint.get("scheme", "http") == "http"
    workloads = of_kind(with_component, "Deployment") + of_kind(with_component, "StatefulSet")
    for svc in services:
        service = svc["metadata"]["labels"][spec["jobLabel"]]
        backing = [
            w["metadata"]["name"]
            for w in workloads
            if selects(
                {"matchLabels": svc["spec"]["selector"]},
                w["spec"]["template"]["metadata"]["labels"],
            )
        ]
        assert backing == [f"gangpreempt-{service}"], f"{svc['metadata']['name']}: {backing}"
        (port,) = [p for p in svc["spec"]["ports"] if p["name"] == endpoint["port"]]
        ports = {
            p["name"]: p["containerPort"]
            for p in container(named(with_component, "Deployment", backing[0]))["ports"]
        }
        assert ports.get(port["targetPort"], port["targetPort"]) == HEALTH_PORT, service


def test_prometheus_may_reach_the_health_port_and_nothing_more(
    with_component: list[dict[str, Any]],
) -> None:
    policies = of_kind(with_component, "NetworkPolicy")
    prometheus = {
        "labels": {"app.kubernetes.io/name": "prometheus"},
        "namespace": {"kubernetes.io/metadata.name": "monitoring"},
    }
    impostor = {
        "labels": {"app": "other"},
        "namespace": {"kubernetes.io/metadata.name": "monitoring"},
    }
    nats = pod_labels(with_component, "StatefulSet", "nats")
    for service in SERVICES:
        labels = pod_labels(with_component, "Deployment", f"gangpreempt-{service}")
        assert allowed(policies, "ingress", labels, prometheus, HEALTH_PORT), service
        assert not allowed(policies, "ingress", labels, prometheus, 4222), service
        assert not allowed(policies, "ingress", labels, impostor, HEALTH_PORT), service
    assert not allowed(policies, "ingress", nats, prometheus, HEALTH_PORT)
    assert not allowed(policies, "ingress", nats, prometheus, 8222)
