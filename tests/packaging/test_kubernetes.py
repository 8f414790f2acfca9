"""The kustomize base deploy/k8s: every object valid for Kubernetes 1.32, a Deployment per
service as the services expect to be run, restricted pods, each service only its own
password, and network policies that allow exactly the traffic the services need."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gangpreempt.bus import SERVICES
from gangpreempt.bus.permissions import ADMIN, password_variable
from gangpreempt.bus.serverconfig import CLIENT_PORT, CLUSTER_PORT
from gangpreempt.config import Settings, load_settings
from gangpreempt.manifests.objects import load_objects
from gangpreempt.model.checks import CONTROLLER_NAME
from tests.packaging.conftest import (
    K8S,
    ROOT,
    SERVICE_ACCOUNTS,
    load_yaml,
    named,
    of_kind,
    pod_templates,
    render,
)

pytestmark = pytest.mark.packaging

# kubernetes-validate ships schemas per minor version; we target the one kubectl here has.
KUBERNETES_VERSION = "1.32"
NAMESPACE = "gangpreempt"
IMAGE = "gangpreempt:0.1.0"
HEALTH_PORT = 8080


def deployment(objects: list[dict[str, Any]], service: str) -> dict[str, Any]:
    return named(objects, "Deployment", f"gangpreempt-{service}")


def container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, workload["metadata"]["name"]
    return containers[0]  # type: ignore[no-any-return]


def env_of(objects: list[dict[str, Any]], c: dict[str, Any]) -> dict[str, str]:
    """The environment a container gets from its ConfigMaps and plain values (secrets
    left out)."""
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        if "configMapRef" in source:
            ref = source["configMapRef"]["name"]
            env.update(named(objects, "ConfigMap", ref)["data"])
    for var in c.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
    return env


# Kinds the base needs a newer Kubernetes for: MutatingAdmissionPolicy is GA from 1.36.
NEWER = {"MutatingAdmissionPolicy": "1.37", "MutatingAdmissionPolicyBinding": "1.37"}
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "AdmissionCheck",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
}


def test_every_object_validates_against_the_kubernetes_schemas(
    rendered: list[dict[str, Any]],
) -> None:
    """Kueue's objects (not in Kubernetes' schemas) are read by gangpreempt's own reader,
    which checks the fields it knows of Kueue's API."""
    errors = []
    for obj in rendered:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
            loaded = load_objects("deploy/k8s", [obj])
            errors += loaded.rejected
            continue
        want = NEWER.get(obj["kind"], KUBERNETES_VERSION)
        try:
            version = kubernetes_validate.validate(obj, want, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            errors.append(f"{where}: {path}: {exc.message}")
            continue
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(f"{where}: {exc.message}")
            continue
        assert version == want
    assert not errors, "\n".join(errors)


def test_the_base_holds_the_expected_objects(rendered: list[dict[str, Any]]) -> None:
    names = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    for service in SERVICES:
        assert ("Deployment", f"gangpreempt-{service}") in names
        assert ("ServiceAccount", SERVICE_ACCOUNTS[service]) in names
    assert ("StatefulSet", "nats") in names
    assert ("Job", "gangpreempt-provision") in names
    assert ("Namespace", NAMESPACE) in names
    assert not of_kind(rendered, "Secret"), "no Secret is committed: the user creates it"
    # (kustomize stamps its namespace on the kinds it does not know are cluster-scoped;
    # the API server drops it for them)
    cluster_scoped = CLUSTER_SCOPED
    # ingest's Role (and its binding) for Kueue's manager ConfigMap, in Kueue's namespace.
    in_kueue = {
        ("Role", "gangpreempt-ingest-kueue-config"),
        ("RoleBinding", "gangpreempt-ingest-kueue-config"),
    }
    for obj in rendered:
        if obj["kind"] in cluster_scoped:
            continue
        want = "kueue-system" if (obj["kind"], obj["metadata"]["name"]) in in_kueue else NAMESPACE
        assert obj["metadata"].get("namespace") == want, obj["metadata"]["name"]


def test_the_base_holds_the_admission_check_and_the_gate(
    rendered: list[dict[str, Any]],
) -> None:
    check = named(rendered, "AdmissionCheck", "gangpreempt")
    assert check["spec"]["controllerName"] == CONTROLLER_NAME
    policy = named(rendered, "MutatingAdmissionPolicy", "gangpreempt-placement-gate")
    (mutation,) = policy["spec"]["mutations"]
    assert '"gangpreempt.io/placement"' in mutation["applyConfiguration"]["expression"]
    binding = named(rendered, "MutatingAdmissionPolicyBinding", "gangpreempt-placement-gate")
    assert binding["spec"]["policyName"] == "gangpreempt-placement-gate"
    # the managed workloads' pods by their label, any namespace
    (selected,) = binding["spec"]["matchResources"]["objectSelector"]["matchExpressions"]
    assert (selected["key"], selected["operator"]) == ("gangpreempt.io/workload", "Exists")
    # every pod of a namespace handed over: by the namespace's label (a policy's CEL
    # cannot read it: namespaceObject is empty for a MutatingAdmissionPolicy)
    by_namespace = named(
        rendered, "MutatingAdmissionPolicyBinding", "gangpreempt-placement-gate-namespaces"
    )
    assert by_namespace["spec"]["policyName"] == "gangpreempt-placement-gate"
    assert by_namespace["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
        "gangpreempt.io/authority": "enabled"
    }
    config = named(
        rendered,
        "ConfigMap",
        next(
            o["metadata"]["name"]
            for o in of_kind(rendered, "ConfigMap")
            if o["metadata"]["name"].startswith("gangpreempt-quota")
        ),
    )
    assert config["data"]["GANGPREEMPT_AUTHORITY"] == "admission-check"
    common = named(
        rendered,
        "ConfigMap",
        next(
            o["metadata"]["name"]
            for o in of_kind(rendered, "ConfigMap")
            if o["metadata"]["name"].startswith("gangpreempt-")
            and o["data"].get("GANGPREEMPT_NATS_URL")
        ),
    )
    assert common["data"]["GANGPREEMPT_MODE"] == "shadow"  # the base starts in shadow


def test_namespace_enforces_the_restricted_pod_security_standard(
    rendered: list[dict[str, Any]],
) -> None:
    labels = named(rendered, "Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_runs_as_its_deployment_says(
    rendered: list[dict[str, Any]], service: str
) -> None:
    dep = deployment(rendered, service)
    pod = dep["spec"]["template"]["spec"]
    c = container(dep)
    assert c["image"] == IMAGE
    assert c["args"] == ["serve", service]
    # victims scale out; quota runs active/standby under its lease
    assert dep["spec"]["replicas"] == (2 if service in ("victims", "quota") else 1)
    # The services stop within ~10 s of SIGTERM; the grace period leaves room.
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["serviceAccountName"] == SERVICE_ACCOUNTS[service]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path, probe
        assert ports.get(get["port"], get["port"]) == HEALTH_PORT, probe
    for kind in ("requests", "limits"):
        assert set(c["resources"][kind]) == {"cpu", "memory"}, kind

    env = env_of(rendered, c)
    settings = load_settings(environ={**env, "GANGPREEMPT_NATS_PASSWORD": "x"})
    assert settings.health_port == HEALTH_PORT
    assert settings.nats_user == service
    assert settings.provision is False
    assert settings.nats_url == f"tls://nats:{CLIENT_PORT}"
    assert settings.nats_ca is not None  # NATS' CA, mounted from the Secret nats-tls
    assert nats_ca_mounted(dep["spec"]["template"]["spec"], c, settings.nats_ca)
    unknown = {
        k
        for k in env
        if k.startswith("GANGPREEMPT_") and k[12:].lower() not in Settings.__struct_fields__
    }
    assert not unknown, f"not settings of gangpreempt: {unknown}"
    if service == "ingest":
        assert (settings.source, settings.sim) == ("kubernetes", False)
    if service == "actuator":
        assert settings.sink == "kubernetes"
    assert env["OTEL_SERVICE_NAME"] == f"gangpreempt-{service}"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith("http")


def nats_ca_mounted(pod: dict[str, Any], c: dict[str, Any], path: str) -> bool:
    """Whether ``path`` is ca.crt of the Secret nats-tls, mounted alone in ``c``."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in c.get("volumeMounts", []):
        secret = volumes[mount["name"]].get("secret", {})
        if secret.get("secretName") == "nats-tls":
            items = secret.get("items") or []
            return [i["key"] for i in items] == ["ca.crt"] and path == (
                f"{mount['mountPath']}/{items[0]['path']}"
            )
    return False


def secret_references(pod: dict[str, Any]) -> set[str]:
    """Every Secret key a pod can read (``secret/*`` for a whole Secret)."""
    found: set[str] = set()
    for c in pod.get("initContainers", []) + pod["containers"]:
        for var in c.get("env", []):
            ref = var.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                found.add(f"{ref['name']}/{ref['key']}")
        for source in c.get("envFrom", []):
            if "secretRef" in source:
                found.add(f"{source['secretRef']['name']}/*")
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            name, items = volume["secret"]["secretName"], volume["secret"].get("items")
            found |= {f"{name}/{i['key']}" for i in items} if items else {f"{name}/*"}
    return found


def test_each_pod_reads_only_its_own_password(rendered: list[dict[str, Any]]) -> None:
    # ...and NATS' CA, not its key
    for service in SERVICES:
        pod = deployment(rendered, service)["spec"]["template"]["spec"]
        assert secret_references(pod) == {
            f"nats-passwords/{password_variable(service)}",
            "nats-tls/ca.crt",
        }
    job = named(rendered, "Job", "gangpreempt-provision")["spec"]["template"]["spec"]
    assert secret_references(job) == {
        f"nats-passwords/{password_variable(ADMIN)}",
        "nats-tls/ca.crt",
    }
    nats = named(rendered, "StatefulSet", "nats")["spec"]["template"]["spec"]
    # nats.conf reads every password's hash (never a client's password), its certificate
    # and the route user's password (its routes log in with it)
    assert secret_references(nats) == {
        "nats-password-hashes/*",
        "nats-tls/*",
        "nats-passwords/NATS_ROUTE_PASSWORD",
    }


def test_provision_job_makes_replicated_streams(rendered: list[dict[str, Any]]) -> None:
    job = named(rendered, "Job", "gangpreempt-provision")
    c = container(job)
    assert c["image"] == IMAGE
    assert c["args"][0] == "provision"
    settings = load_settings(environ={**env_of(rendered, c), "GANGPREEMPT_NATS_PASSWORD": "x"})
    assert settings.nats_user == ADMIN
    replicas = named(rendered, "StatefulSet", "nats")["spec"]["replicas"]
    assert settings.stream_replicas == replicas == 3


def effective(pod: dict[str, Any], c: dict[str, Any], key: str) -> Any:
    return c.get("securityContext", {}).get(key, pod.get("securityContext", {}).get(key))


ALLOWED_VOLUMES = {
    "configMap",
    "emptyDir",
    "secret",
    "projected",
    "downwardAPI",
    "persistentVolumeClaim",
}


def test_every_pod_is_restricted(rendered: list[dict[str, Any]]) -> None:
    templates = list(pod_templates(rendered))
    assert len(templates) == 6  # 4 services, NATS, provision
    for where, pod in templates:
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod.get(key), f"{where}: {key}"
        for volume in pod.get("volumes", []):
            kinds = set(volume) - {"name"}
            assert kinds <= ALLOWED_VOLUMES, f"{where}: volume {volume['name']}: {kinds}"
        for c in pod.get("initContainers", []) + pod["containers"]:
            at = f"{where} container {c['name']}"
            assert effective(pod, c, "runAsNonRoot") is True, at
            assert effective(pod, c, "runAsUser") not in (None, 0), at
            assert effective(pod, c, "seccompProfile") == {"type": "RuntimeDefault"}, at
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, at
            assert sc["readOnlyRootFilesystem"] is True, at
            assert sc["capabilities"] == {"drop": ["ALL"]}, at
            assert not sc.get("privileged"), at
            if c["image"].startswith("gangpreempt:"):
                assert effective(pod, c, "runAsUser") == 10001, at  # the image's user
                mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
                tmp = next(v for v in pod["volumes"] if v["name"] == mounts.get("/tmp"))
                assert "emptyDir" in tmp, f"{at}: /tmp is an emptyDir"


def test_only_ingest_and_actuator_get_an_api_token(rendered: list[dict[str, Any]]) -> None:
    accounts = {o["metadata"]["name"]: o for o in of_kind(rendered, "ServiceAccount")}
    for where, pod in pod_templates(rendered):
        account = pod["serviceAccountName"]
        assert account in accounts, f"{where}: service account {account} is not in the base"
        mounted = pod.get(
            "automountServiceAccountToken",
            accounts[account].get("automountServiceAccountToken", True),
        )
        talks_to_api = account in (SERVICE_ACCOUNTS["ingest"], SERVICE_ACCOUNTS["actuator"])
        assert mounted is talks_to_api, where
    for service in ("quota", "victims"):
        sa = accounts[SERVICE_ACCOUNTS[service]]
        assert sa["automountServiceAccountToken"] is False, service


def test_images_are_set_in_one_place(rendered: list[dict[str, Any]]) -> None:
    """Every gangpreempt container names the image ``gangpreempt``, so one kustomize
    ``images:`` entry retargets them all."""
    kustomization = load_yaml(K8S / "kustomization.yaml")
    names = {i["name"] for i in kustomization["images"]}
    assert "gangpreempt" in names
    for where, pod in pod_templates(rendered):
        for c in pod["containers"]:
            repo = c["image"].rsplit(":", 1)[0]
            assert repo in ("gangpreempt", "nats"), f"{where}: {c['image']}"


# -- network policies ------------------------------------------------------------------

Peer = dict[str, Any]  # {"labels": {...}, "namespace": {...labels}} or {"external": True}


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return True
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def peer_matches(rule_peer: dict[str, Any], peer: Peer) -> bool:
    if "ipBlock" in rule_peer:
        return bool(peer.get("external")) and rule_peer["ipBlock"]["cidr"] in (
            "0.0.0.0/0",
            "::/0",
        )
    if peer.get("external"):
        return False
    if "namespaceSelector" in rule_peer:
        if not selects(rule_peer["namespaceSelector"], peer["namespace"]):
            return False
    elif peer["namespace"].get("kubernetes.io/metadata.name") != NAMESPACE:
        return False
    return selects(rule_peer.get("podSelector"), peer["labels"])


def allowed(
    policies: list[dict[str, Any]], direction: str, pod: dict[str, str], peer: Peer, port: int
) -> bool:
    """Whether some policy selecting ``pod`` (in our namespace) lets traffic with ``peer``
    pass on TCP ``port`` in ``direction`` (``ingress`` or ``egress``)."""
    key, peers = ("ingress", "from") if direction == "ingress" else ("egress", "to")
    for policy in policies:
        spec = policy["spec"]
        if direction.capitalize() not in spec["policyTypes"]:
            continue
        if not selects(spec["podSelector"], pod):
            continue
        for rule in spec.get(key, []):
            ports = rule.get("ports")
            if ports and not any(
                p.get("protocol", "TCP") == "TCP" and p.get("port") in (None, port) for p in ports
            ):
                continue
            if peers not in rule or any(peer_matches(p, peer) for p in rule[peers]):
                return True
    return False


def pod_labels(rendered: list[dict[str, Any]], kind: str, name: str) -> dict[str, str]:
    labels: dict[str, str] = named(rendered, kind, name)["spec"]["template"]["metadata"]["labels"]
    return labels


def test_network_policies_allow_exactly_what_the_services_need(
    rendered: list[dict[str, Any]],
) -> None:
    policies = of_kind(rendered, "NetworkPolicy")
    ours = {"kubernetes.io/metadata.name": NAMESPACE}
    nats = pod_labels(rendered, "StatefulSet", "nats")
    nats_peer: Peer = {"labels": nats, "namespace": ours}
    stranger: Peer = {"labels": {"app": "other"}, "namespace": ours}
    elsewhere: Peer = {"labels": nats, "namespace": {"kubernetes.io/metadata.name": "other"}}
    api_server: Peer = {"external": True}
    dns: Peer = {
        "labels": {"k8s-app": "kube-dns"},
        "namespace": {"kubernetes.io/metadata.name": "kube-system"},
    }
    clients = {s: pod_labels(rendered, "Deployment", f"gangpreempt-{s}") for s in SERVICES}
    clients["provision"] = pod_labels(rendered, "Job", "gangpreempt-provision")

    # default deny: a pod nothing else selects may do nothing
    assert not allowed(policies, "egress", {"app": "other"}, nats_peer, CLIENT_PORT)
    assert not allowed(policies, "ingress", {"app": "other"}, stranger, 80)

    for name, labels in clients.items():
        me: Peer = {"labels": labels, "namespace": ours}
        assert allowed(policies, "egress", labels, nats_peer, CLIENT_PORT), name
        assert allowed(policies, "ingress", nats, me, CLIENT_PORT), name
        assert allowed(policies, "egress", labels, dns, 53), name
        assert not allowed(policies, "egress", labels, nats_peer, CLUSTER_PORT), name
        assert not allowed(policies, "ingress", nats, me, CLUSTER_PORT), name
        assert not allowed(policies, "egress", labels, elsewhere, CLIENT_PORT), name
        assert not allowed(policies, "ingress", labels, stranger, HEALTH_PORT), name
        for port in (443, 6443):
            talks_to_api = name in ("ingest", "actuator")
            assert allowed(policies, "egress", labels, api_server, port) is talks_to_api, name

    # NATS: clients only from our pods, routes only between NATS pods
    assert not allowed(policies, "ingress", nats, stranger, CLIENT_PORT)
    assert not allowed(policies, "ingress", nats, elsewhere, CLIENT_PORT)
    assert allowed(policies, "ingress", nats, nats_peer, CLUSTER_PORT)
    assert allowed(policies, "egress", nats, nats_peer, CLUSTER_PORT)
    assert not allowed(policies, "ingress", nats, stranger, CLUSTER_PORT)
    assert not allowed(policies, "egress", nats, api_server, 443)


def test_the_documented_overlay_retargets_image_and_collector(tmp_path: Path) -> None:
    """docs/kubernetes.md's overlay, rendered: every gangpreempt container runs the
    pushed image and every service gets the collector's endpoint."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (overlay,) = [yaml.safe_load(textwrap.dedent(b)) for b in blocks if "Kustomization" in b]
    overlay["resources"] = [os.path.relpath(K8S, tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    objects = render(tmp_path)
    image = overlay["images"][0]
    pushed = f"{image['newName']}:{image['newTag']}"
    endpoint = overlay["configMapGenerator"][0]["literals"][0].split("=", 1)[1]
    workloads = [o for o in objects if o["kind"] in ("Deployment", "Job")]
    assert len(workloads) == 5
    for workload in workloads:
        c = container(workload)
        assert c["image"] == pushed
        env = env_of(objects, c)
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == endpoint
        assert env["GANGPREEMPT_NATS_URL"] == f"tls://nats:{CLIENT_PORT}"  # merged, not replaced
