"""RBAC of the kustomize base against services/kube/access.py, the table every API call
of the services is checked against: each service account is granted exactly
``rbac_rules(service)``, nothing more, nothing less; quota and victims nothing at all."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gangpreempt.bus import SERVICES
from services.kube.access import rbac_rules
from tests.packaging.conftest import ROOT, SERVICE_ACCOUNTS, named, of_kind

pytestmark = pytest.mark.packaging

NAMESPACE = "gangpreempt"
Grant = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


def expected(service: str) -> set[Grant]:
    return {
        (group, resource, verb)
        for (group, resource), verbs in rbac_rules(service).items()
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


def test_the_permissions_table_of_the_docs_is_access_py() -> None:
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    section = text[text.index("## Permissions") : text.index("## Deploying")]
    rows = re.findall(r"^\| (\w+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", section, re.M)
    table: dict[str, dict[tuple[str, str], frozenset[str]]] = {}
    for service, group, resource, verbs in rows:
        if service == "Service":
            continue  # the header
        key = ("" if group.strip() == "(core)" else group.strip(), resource.strip())
        table.setdefault(service, {})[key] = frozenset(v.strip() for v in verbs.split(","))
    for service in SERVICES:
        assert table.get(service, {}) == rbac_rules(service), service
