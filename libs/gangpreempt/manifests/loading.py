"""Reading manifest files and folders into a ``ClusterState``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from gangpreempt.collecting import paused
from gangpreempt.errors import ManifestError
from gangpreempt.manifests import core, kueue, nodes
from gangpreempt.manifests.fastpod import fast_pod
from gangpreempt.manifests.fields import Fields, Where, describe
from gangpreempt.manifests.yamlio import (
    NotFast,
    documents,
    fast_documents,
    line_of,
    yaml_files,
)
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import UNIT_GROUP, PodGroup

KUEUE_VERSIONS = ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1alpha1")
CLUSTER_SCOPED = {
    "ResourceFlavor",
    "ClusterQueue",
    "Cohort",
    "WorkloadPriorityClass",
    "PriorityClass",
    "Node",
}
PLUGINS_GROUPS = ("scheduling.x-k8s.io/v1alpha1", "scheduling.sigs.k8s.io/v1alpha1")
GANG_API_PREFIX = "scheduling.k8s.io/v1alpha"
GANG_API_BETA = "scheduling.k8s.io/v1beta"


class Loaded(msgspec.Struct):
    state: ClusterState
    warnings: list[str]
    # Objects left out (with load_objects): their error, naming the object and the field.
    rejected: list[str] = msgspec.field(default_factory=list)


class _Reader:
    def __init__(self, fast: bool = False) -> None:
        self.fast = fast  # read without line numbers (see ``load``)
        self.state = ClusterState()
        self.warnings: list[str] = []
        self._skipped: dict[tuple[str, str], list[Any]] = {}
        # scheduling.k8s.io Workloads: (namespace, name) -> group name -> template.
        self._templates: dict[tuple[str, str], dict[str, PodGroup]] = {}
        # Pods joining through spec.workloadRef: pod key -> (workload, podGroup, replica).
        self._workload_refs: dict[str, tuple[str, str, str]] = {}
        # scheduling.k8s.io PodGroups made from a template: key -> (workload, template).
        self._template_refs: dict[str, tuple[str, str]] = {}

    def read(self, paths: Sequence[str]) -> Loaded:
        for path in paths:
            for file in yaml_files(path):
                for number, doc in (fast_documents if self.fast else documents)(file):
                    if doc is None:
                        continue
                    self._object(doc, Where(file, number), None, "")
        self._join_gangs()
        for (api_version, kind), (count, first) in sorted(self._skipped.items()):
            objects = "object" if count == 1 else "objects"
            self.warnings.append(
                f"{first}: skipped {count} {objects} of unsupported kind {kind} ({api_version})"
            )
        return Loaded(self.state, self.warnings)

    def finish_objects(self, origin: str, rejected: list[str]) -> Loaded:
        """The state of API objects read one by one (see ``manifests.objects``)."""
        self._join_gangs()
        skipped = sorted(f"{kind} ({api_version})" for api_version, kind in self._skipped)
        if skipped:
            self.warnings.append(f"{origin}: skipped unsupported kinds: {', '.join(skipped)}")
        return Loaded(self.state, self.warnings, rejected)

    def _object(self, doc: Any, where: Where, container: Any, key: Any) -> None:
        prefix = where.prefix
        if not isinstance(doc, Mapping):
            raise where.error(
                prefix,
                f"expected a Kubernetes object (a mapping), got {describe(doc)}",
                container,
                key,
            )
        top = Fields(where, doc, prefix)
        kind = top.text("kind", required=True)
        api_version = top.text("apiVersion", required=True)
        if kind == "List" or (kind.endswith("List") and isinstance(doc.get("items"), list)):
            items = doc.get("items") or []
            for i, item in enumerate(items):
                if self._plain_pod(item):
                    continue
                item_where = Where(
                    where.file,
                    where.document,
                    None,
                    f"{prefix}items[{i}]" if not prefix else f"{prefix}.items[{i}]",
                )
                self._object(item, item_where, items, i)
            return
        meta = top.map("metadata", required=True)
        assert meta is not None
        name = meta.text("name", required=True)
        namespace = meta.text("namespace", default="default")
        where.obj = f"{kind} {name}" if kind in CLUSTER_SCOPED else f"{kind} {namespace}/{name}"
        spec = top.map_or_empty("spec")
        st = self.state

        if api_version in KUEUE_VERSIONS:
            if kind == "ClusterQueue":
                self._put(st.cluster_queues, name, kueue.cluster_queue(name, spec), where)
                return
            if kind == "Cohort":
                self._put(st.cohorts, name, kueue.cohort(name, spec), where)
                return
            if kind == "ResourceFlavor":
                self._put(st.flavors, name, kueue.resource_flavor(name, spec), where)
                return
            if kind == "LocalQueue":
                lq = kueue.local_queue(namespace, name, spec)
                self._put(st.local_queues, lq.key, lq, where)
                return
            if kind == "WorkloadPriorityClass":
                wpc = kueue.workload_priority_class(name, top)
                self._put(st.workload_priority_classes, name, wpc, where)
                return
            if kind == "Workload":
                status = top.map_or_empty("status")
                wl = kueue.workload(meta, namespace, name, spec, status)
                self._put(st.workloads, wl.key, wl, where)
                return
        elif api_version == "scheduling.k8s.io/v1" and kind == "PriorityClass":
            self._put(st.priority_classes, name, core.priority_class(name, top), where)
            return
        elif api_version == "v1" and kind in ("Node", "Pod"):
            status = top.map_or_empty("status")
            if kind == "Node":
                self._put(st.nodes, name, nodes.node(name, meta, spec, status), where)
                return
            pod = fast_pod(namespace, name, meta.data, spec.data, status.data) or nodes.pod(
                namespace, name, meta, spec, status
            )
            ref = spec.map("workloadRef")
            group = spec.map("schedulingGroup")
            if ref is not None:
                self._workload_refs[pod.key] = (
                    ref.text("name", required=True),
                    ref.text("podGroup", required=True),
                    ref.text("podGroupReplicaKey", default=""),
                )
            elif group is not None:
                pod = msgspec.structs.replace(
                    pod, group=f"{namespace}/{group.text('podGroupName', required=True)}"
                )
            self._put(st.pods, pod.key, pod, where)
            return
        elif api_version == "policy/v1" and kind == "PodDisruptionBudget":
            status = top.map_or_empty("status")
            pdb = nodes.pod_disruption_budget(namespace, name, spec, status)
            self._put(st.pdbs, pdb.key, pdb, where)
            return
        elif api_version in PLUGINS_GROUPS and kind == "PodGroup":
            pg = nodes.plugins_pod_group(namespace, name, meta, spec)
            self._put(st.pod_groups, pg.key, pg, where)
            return
        elif api_version in PLUGINS_GROUPS and kind == "ElasticQuota":
            eq = nodes.elastic_quota(namespace, name, spec)
            self._put(st.elastic_quotas, eq.key, eq, where)
            return
        elif api_version.startswith((GANG_API_PREFIX, GANG_API_BETA)) and kind in (
            "Workload",
            "PodGroup",
        ):
            self._gang_object(kind, namespace, name, spec, where)
            return

        location = f"{where.file}: document {where.document}"
        line = line_of(container, key) if container is not None else line_of(doc, "kind")
        if line is not None:
            location += f" (line {line})"
        entry = self._skipped.setdefault((api_version, kind), [0, location])
        entry[0] += 1

    def _gang_object(
        self, kind: str, namespace: str, name: str, spec: Fields, where: Where
    ) -> None:
        st = self.state
        if kind == "Workload":
            templates = {
                group_name: nodes.group_template(namespace, f"{name}-{group_name}", f, spec, name)
                for group_name, f in nodes.workload_groups(namespace, spec)
            }
            self._templates[(namespace, name)] = templates
            return
        wl_name = template_name = ""
        template = spec.map("podGroupTemplateRef")
        if template is not None:
            ref = template.map_or_empty("workload")
            wl_name = ref.text("workloadName", default="")
            template_name = ref.text("podGroupTemplateName", default="")
        pg = nodes.group_template(namespace, name, spec, Fields(where, {}, ""), wl_name)
        self._put(st.pod_groups, pg.key, pg, where)
        if wl_name and template_name:
            self._template_refs[pg.key] = (wl_name, template_name)

    def _join_gangs(self) -> None:
        """Resolve gang membership once every object is read: pods joining through
        ``spec.workloadRef`` get their (replica's) group, Workload templates priorities
        fill in PodGroups that name none, and pods labelled for a group that has no
        object get an implicit all-or-nothing group of all its pods."""
        st = self.state
        for pod_key, (wl, group_name, replica) in sorted(self._workload_refs.items()):
            pod = st.pods[pod_key]
            templates = self._templates.get((pod.namespace, wl))
            if templates is None or group_name not in templates:
                self.warnings.append(
                    f"Pod {pod_key}: spec.workloadRef names Workload {pod.namespace}/{wl} "
                    f"pod group {group_name!r}, which is not in the manifests: scheduled alone"
                )
                continue
            base = templates[group_name]
            name = f"{base.name}-{replica}" if replica else base.name
            key = f"{pod.namespace}/{name}"
            if key not in st.pod_groups:
                st.pod_groups[key] = msgspec.structs.replace(base, name=name)
            st.pods[pod_key] = msgspec.structs.replace(pod, group=key)
        for key, (wl, template_name) in sorted(self._template_refs.items()):
            pg = st.pod_groups[key]
            tmpl = self._templates.get((pg.namespace, wl), {}).get(template_name)
            if tmpl is not None:
                st.pod_groups[key] = msgspec.structs.replace(
                    pg,
                    priority_class_name=pg.priority_class_name or tmpl.priority_class_name,
                    preemption_priority_class_name=pg.preemption_priority_class_name
                    or tmpl.preemption_priority_class_name,
                    topology_key=pg.topology_key or tmpl.topology_key,
                )
        members: dict[str, int] = {}
        for pod in st.pods.values():
            if pod.group:
                members[pod.group] = members.get(pod.group, 0) + 1
        for key, count in sorted(members.items()):
            if key not in st.pod_groups:
                ns, name = key.split("/", 1)
                st.pod_groups[key] = PodGroup(
                    namespace=ns,
                    name=name,
                    min_count=count,
                    preemption_mode=UNIT_GROUP,
                    source="pod-group label",
                )

    def _plain_pod(self, item: Any) -> bool:
        """A list item that is a common Pod (``fastpod``), read and stored; False for
        anything else, which ``_object`` reads (and reports) as any object."""
        if type(item) is not dict or item.get("kind") != "Pod" or item.get("apiVersion") != "v1":
            return False
        meta, spec, status = item.get("metadata"), item.get("spec"), item.get("status")
        spec = {} if spec is None else spec
        status = {} if status is None else status
        if type(meta) is not dict or type(spec) is not dict or type(status) is not dict:
            return False
        name, namespace = meta.get("name"), meta.get("namespace")
        namespace = "default" if namespace is None else namespace
        if type(name) is not str or not name or type(namespace) is not str:
            return False
        if spec.get("workloadRef") is not None or spec.get("schedulingGroup") is not None:
            return False
        pod = fast_pod(namespace, name, meta, spec, status)
        if pod is None or pod.key in self.state.pods:
            return False  # read it the general way (a duplicate is reported there)
        self.state.pods[pod.key] = pod
        return True

    def _put(self, table: dict[str, Any], key: str, value: Any, where: Where) -> None:
        if key in table:
            place = f"document {where.document} ({where.obj})" if where.document else where.obj
            self.warnings.append(
                f"{where.file}: {place}: defined more than once; the last definition wins"
            )
        table[key] = value


def load(paths: Sequence[str]) -> Loaded:
    """Read every YAML document under ``paths`` (files or folders).

    Raises ``ManifestError`` on the first invalid object; unsupported kinds are skipped
    and reported once per kind in ``Loaded.warnings``.
    """
    if not paths:
        raise ManifestError("(no input)", "give at least one file or folder with -f")
    with paused():
        try:
            return _Reader(fast=True).read(paths)
        except (ManifestError, NotFast):
            # Read again, remembering lines: the error names its line. (Where the YAML
            # 1.1 reading accepts what the YAML 1.2 one did not, that reading is taken.)
            return _Reader().read(paths)


def reads(api_version: str, kind: str) -> bool:
    """Whether objects of this ``apiVersion`` and ``kind`` are read (not skipped)."""
    if api_version in KUEUE_VERSIONS:
        return kind in (
            "ClusterQueue",
            "Cohort",
            "ResourceFlavor",
            "LocalQueue",
            "WorkloadPriorityClass",
            "Workload",
        )
    if api_version == "scheduling.k8s.io/v1":
        return kind == "PriorityClass"
    if api_version == "v1":
        return kind in ("Node", "Pod")
    if api_version == "policy/v1":
        return kind == "PodDisruptionBudget"
    if api_version in PLUGINS_GROUPS:
        return kind in ("PodGroup", "ElasticQuota")
    if api_version.startswith((GANG_API_PREFIX, GANG_API_BETA)):
        return kind in ("Workload", "PodGroup")
    return False


__all__ = ["Loaded", "load", "reads"]
