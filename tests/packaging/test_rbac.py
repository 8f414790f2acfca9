"""RBAC of the kustomize base and its components against services/kube/access.py, the
table every API call of the services is checked against: each service account is
granted exactly ``rbac_rules(service, ...)`` for the configuration the rendering sets,
nothing more, nothing less; quota and victims nothing at all. The base grants the
actuator no pod delete or patch; the committed RBAC files are ``gangpreempt rbac``'s
output."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gangpreempt.bus import SERVICES
from gangpreempt.cli import cli
from services.kube.access import rbac_rules
from services.kube.rbac import feature_access
from tests.packaging.conftest import K8S, ROOT, SERVICE_ACCOUNTS, generated, named, of_kind, render

pytestmark = pytest.mark.packaging

NAMESPACE = "gangpreempt"
Grant = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


# What the base configures: the Eviction API, shadow mode.
BASE_EVICTION, BASE_ACT = "eviction", False


def expected(service: str, pod_eviction: str = BASE_EVICTION, act: bool = BASE_ACT) -> set[Grant]:
    return {
        (group, resource, verb)
        for (group, resource), verbs in rbac_rules(service, pod_eviction, act).items()
        for verb in verbs
    }


def bindings_of(objects: list[dict[str, Any]], account: str) -> list[dict[str, Any]]:
    found = []
    for binding in of_kind(objects, "ClusterRoleBinding") + of_kind(objects, "RoleBinding"):
        default_ns = binding["metadata"].get("namespace")
        for subject in binding.get("subjects", []):
            if (
                subject["kind"] == "ServiceAccount"
                and subject["name"] == account
                and subject.get("namespace", default_ns) == NAMESPACE
            ):
                found.append(binding)
    return found


def granted(objects: list[dict[str, Any]], account: str) -> set[Grant]:
    grants: set[Grant] = set()
    for binding in bindings_of(objects, account):
        ref = binding["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        role = named(objects, ref["kind"], ref["name"])
        where = f"{ref['kind']}/{ref['name']}"
        assert "aggregationRule" not in role, f"{where}: aggregated roles grant unseen rights"
        for rule in role.get("rules", []):
            assert not rule.get("nonResourceURLs"), f"{where}: nonResourceURLs"
            assert not rule.get("resourceNames"), f"{where}: resourceNames"
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{where}: a wildcard in {field}"
            grants |= {
                (group, resource, verb)
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            }
    return grants


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_account_is_granted_exactly_its_access(
    rendered: list[dict[str, Any]], service: str
) -> None:
    account = SERVICE_ACCOUNTS[service]
    pod = named(rendered, "Deployment", f"gangpreempt-{service}")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account
    want = expected(service)
    got = granted(rendered, account)
    assert not got - want, f"{account} is granted more than access.py: {sorted(got - want)}"
    assert not want - got, f"{account} lacks what access.py needs: {sorted(want - got)}"


def test_quota_and_victims_have_no_binding(rendered: list[dict[str, Any]]) -> None:
    for service in ("quota", "victims"):
        assert not expected(service), f"access.py gives {service} API access"
        assert not bindings_of(rendered, SERVICE_ACCOUNTS[service]), service


def test_nobody_else_is_bound(rendered: list[dict[str, Any]]) -> None:
    """The only subjects of any binding are ingest's and the actuator's accounts."""
    allowed = {SERVICE_ACCOUNTS["ingest"], SERVICE_ACCOUNTS["actuator"]}
    for binding in of_kind(rendered, "ClusterRoleBinding") + of_kind(rendered, "RoleBinding"):
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount", binding["metadata"]["name"]
            assert subject["name"] in allowed, binding["metadata"]["name"]


def test_ingest_watches_cluster_wide(rendered: list[dict[str, Any]]) -> None:
    """ingest lists and watches every namespace (a ClusterRoleBinding), except
    ConfigMaps: those of kueue-system only (a RoleBinding there, for Kueue's manager
    Configuration), never cluster-wide."""
    bindings = bindings_of(rendered, SERVICE_ACCOUNTS["ingest"])
    assert {b["kind"] for b in bindings} == {"ClusterRoleBinding", "RoleBinding"}
    assert {verb for _, _, verb in expected("ingest")} == {"list", "watch"}
    for b in bindings:
        role = named(rendered, b["roleRef"]["kind"], b["roleRef"]["name"])
        resources = {r for rule in role.get("rules", []) for r in rule["resources"]}
        if b["kind"] == "RoleBinding":
            assert b["metadata"]["namespace"] == "kueue-system"
            assert resources == {"configmaps"}
        else:
            assert "configmaps" not in resources


def test_the_base_grants_the_actuator_no_pod_delete_or_patch(
    rendered: list[dict[str, Any]],
) -> None:
    got = granted(rendered, SERVICE_ACCOUNTS["actuator"])
    on_pods = {verb for group, resource, verb in got if (group, resource) == ("", "pods")}
    assert on_pods == {"get", "list"}
    assert ("", "pods/eviction", "create") in got
    assert not {g for g in got if g[1] in ("pods/status", "jobs")}
    env = generated(rendered, "ConfigMap", "gangpreempt-actuator")["data"]
    assert env["GANGPREEMPT_POD_EVICTION"] == BASE_EVICTION
    assert generated(rendered, "ConfigMap", "gangpreempt")["data"]["GANGPREEMPT_MODE"] == "shadow"


@pytest.mark.parametrize(
    "components",
    [
        ("act",),
        ("pod-delete",),
        ("soft-eviction",),
        ("act", "pod-delete"),
        ("act", "soft-eviction"),
    ],
)
def test_each_component_grants_exactly_what_its_configuration_calls(
    tmp_path: Path, components: tuple[str, ...]
) -> None:
    """An overlay of the base with the components: the actuator's grants are exactly
    those of the configuration the rendered ConfigMaps set."""
    overlay = {
        "resources": [os.path.relpath(K8S, tmp_path)],
        "components": [os.path.relpath(K8S / "components" / c, tmp_path) for c in components],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    objects = render(tmp_path)
    mode = generated(objects, "ConfigMap", "gangpreempt")["data"]["GANGPREEMPT_MODE"]
    eviction = generated(objects, "ConfigMap", "gangpreempt-actuator")["data"][
        "GANGPREEMPT_POD_EVICTION"
    ]
    assert mode == ("act" if "act" in components else "shadow")
    assert eviction == next(
        (c.removeprefix("pod-") for c in components if c != "act"), BASE_EVICTION
    )
    got = granted(objects, SERVICE_ACCOUNTS["actuator"])
    want = expected("actuator", eviction, mode == "act")
    assert got == want, sorted(got ^ want)


@pytest.mark.parametrize(
    ("path", "args"),
    [
        ("actuator-rbac.yaml", ["--pod-eviction", "eviction", "--mode", "shadow"]),
        ("components/act/rbac.yaml", ["--feature", "placement"]),
        ("components/pod-delete/rbac.yaml", ["--feature", "delete"]),
        ("components/soft-eviction/rbac.yaml", ["--feature", "soft-eviction"]),
    ],
)
def test_the_committed_rbac_is_what_gangpreempt_rbac_prints(path: str, args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["rbac", *args])
    assert result.exit_code == 0, result.output
    assert (K8S / path).read_text() == result.output, (
        f"deploy/k8s/{path} is stale: run `gangpreempt rbac {' '.join(args)} -o deploy/k8s/{path}`"
    )


def test_listed_namespaces_get_role_bindings_there() -> None:
    """With the managed namespaces listed, every namespaced grant is bound in each of
    them only; the cluster-scoped ones (AdmissionChecks) stay cluster-wide."""
    result = CliRunner().invoke(
        cli, ["rbac", "--pod-eviction", "delete", "--mode", "act", "--namespaces", "a,b"]
    )
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.output) if d]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    for binding in (d for d in docs if d["kind"].endswith("Binding")):
        role = roles[binding["roleRef"]["name"]]
        scoped = {r for rule in role["rules"] for r in rule["resources"]}
        if binding["kind"] == "RoleBinding":
            assert binding["metadata"]["namespace"] in ("a", "b")
            assert "admissionchecks" not in scoped
        else:
            assert scoped <= {"admissionchecks", "admissionchecks/status"}
    rolebindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert len(rolebindings) == 2 * 3  # base, delete, placement in each namespace


def test_the_permissions_tables_of_the_docs_are_access_py() -> None:
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    section = text[text.index("## Permissions") : text.index("## Deploying")]
    rows = re.findall(r"^\| (\w+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", section, re.M)
    table: dict[str, dict[tuple[str, str], frozenset[str]]] = {}
    for service, group, resource, verbs in rows:
        if service == "Service":
            continue  # the header
        key = ("" if group.strip() == "(core)" else group.strip(), resource.strip())
        table.setdefault(service, {})[key] = frozenset(v.strip() for v in verbs.split(","))
    for service in ("ingest", "quota", "victims"):
        assert table.get(service, {}) == rbac_rules(service), service
    # the actuator's, one table per feature: | feature | group | resource | verbs |
    grants = re.findall(r"^\| `([\w-]+)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", section, re.M)
    features: dict[str, dict[tuple[str, str], frozenset[str]]] = {}
    for feature, group, resource, verbs in grants:
        key = ("" if group.strip() == "(core)" else group.strip(), resource.strip())
        features.setdefault(feature, {})[key] = frozenset(v.strip() for v in verbs.split(","))
    assert set(features) == {"base", "eviction", "delete", "soft-eviction", "placement"}
    for feature, documented in features.items():
        want = {r.rbac: verbs for r, verbs in feature_access(feature).items()}
        assert documented == want, feature
