"""Reading manifest files and folders into a ``ClusterState``."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from gangpreempt.collecting import paused
from gangpreempt.errors import ManifestError
from gangpreempt.manifests import (
    apifields,
    core,
    integrations,
    kueue,
    kueueconfig,
    nodes,
    topology,
)
from gangpreempt.manifests.authority import join_checks
from gangpreempt.manifests.deriving import Derived, KueuePod, derive_pods, derive_submitted
from gangpreempt.manifests.fastpod import fast_pod
from gangpreempt.manifests.fields import Fields, Where, describe
from gangpreempt.manifests.labels import metadata_labels
from gangpreempt.manifests.yamlio import (
    LazyItems,
    NotFast,
    documents,
    fast_documents,
    line_of,
    yaml_files,
)
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import UNIT_GROUP, Namespace, PodGroup
from gangpreempt.model.workloads import WORKLOAD_PRIORITY_CLASS

_QUEUE_LABEL = integrations.QUEUE_LABEL
TIMELINE = "timeline.yaml"  # a scenario's timeline (ingest's sim plays it), not manifests
# The letters Kubernetes draws generated name suffixes from.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

KUEUE_VERSIONS = ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1alpha1")
CLUSTER_SCOPED = {
    "AdmissionCheck",
    "ResourceFlavor",
    "Topology",
    "ClusterQueue",
    "Cohort",
    "WorkloadPriorityClass",
    "PriorityClass",
    "Node",
    "Namespace",
}
PLUGINS_GROUPS = ("scheduling.x-k8s.io/v1alpha1", "scheduling.sigs.k8s.io/v1alpha1")
GANG_API_PREFIX = "scheduling.k8s.io/v1alpha"
GANG_API_BETA = "scheduling.k8s.io/v1beta"


class Loaded(msgspec.Struct):
    state: ClusterState
    warnings: list[str]
    # Objects left out: their error, naming the object and the field (and, from files,
    # the file and line).
    rejected: list[str] = msgspec.field(default_factory=list)
    # What the reader did that is worth saying but is no problem (names it generated,
    # files it left out, Workloads it derived).
    notes: list[str] = msgspec.field(default_factory=list)


class _Reader:
    def __init__(self, fast: bool = False) -> None:
        self.fast = fast  # read without line numbers (see ``load``)
        # Say which fields are not fields (files: what the API server has not pruned).
        self.check_fields = False
        # The input is whole: a class it does not hold is missing (see ``load``).
        self.references = True
        self.state = ClusterState()
        self.warnings: list[str] = []
        self._skipped: dict[tuple[str, str], list[Any]] = {}
        # scheduling.k8s.io Workloads: (namespace, name) -> group name -> template.
        self._templates: dict[tuple[str, str], dict[str, PodGroup]] = {}
        # Pods joining through spec.workloadRef: pod key -> (workload, podGroup, replica).
        self._workload_refs: dict[str, tuple[str, str, str]] = {}
        self._api_grouped: set[str] = set()  # pods joined by spec.schedulingGroup
        # scheduling.k8s.io PodGroups made from a template: key -> (workload, template).
        self._template_refs: dict[str, tuple[str, str]] = {}
        self.notes: list[str] = []
        self.rejected: list[str] = []
        # What Kueue's integrations manage, made into Workloads once all is read.
        self._submitted: list[integrations.Submitted] = []
        self._kueue_pods: list[KueuePod] = []
        self._unqueued: dict[str, list[Any]] = {}  # kind -> [count, first location]
        self._generated: set[str] = set()
        # Where each object was read (the lined reading only): (id(table), key) -> text.
        self._located: dict[tuple[int, str], str] = {}

    def read(
        self, paths: Sequence[str], objects: Sequence[Mapping[str, Any]] = (), origin: str = ""
    ) -> Loaded:
        for obj in objects:
            # API objects (the API server has pruned unknown fields): one that cannot be
            # read is left out, the rest is read.
            check, self.check_fields = self.check_fields, False
            try:
                self._object(obj, Where(origin, None), None, "")
            except ManifestError as exc:
                self.rejected.append(str(exc))
            finally:
                self.check_fields = check
        for path in paths:
            for file in yaml_files(path):
                if _is_timeline(path, file):
                    self.notes.append(
                        f"{file}: left out: a scenario's timeline (what the sim cluster of "
                        "`gangpreempt up` plays), not manifests"
                    )
                    continue
                for number, doc in (fast_documents if self.fast else documents)(file):
                    if doc is None:
                        continue
                    self._object(doc, Where(file, number), None, "")
        derived = self._finish()
        if self.fast and derived.rejected:
            raise NotFast("an object is left out: read again for its lines")
        if self.references:
            self._check_classes()
        for (api_version, kind), (count, first) in sorted(self._skipped.items()):
            noun = "object" if count == 1 else "objects"
            self.warnings.append(
                f"{first}: skipped {count} {noun} of unsupported kind {kind} ({api_version})"
            )
        return Loaded(
            self.state,
            self.warnings,
            [*derived.rejected, *self.rejected],
            self.notes,
        )

    def finish_objects(self, origin: str, rejected: list[str]) -> Loaded:
        """The state of API objects read one by one (see ``manifests.objects``)."""
        derived = self._finish()
        skipped = sorted(f"{kind} ({api_version})" for api_version, kind in self._skipped)
        if skipped:
            self.warnings.append(f"{origin}: skipped unsupported kinds: {', '.join(skipped)}")
        return Loaded(self.state, self.warnings, [*rejected, *derived.rejected], self.notes)

    def _finish(self) -> Derived:
        """Everything that joins objects once all are read: the Workloads Kueue would
        create for submitted objects, then gang membership."""
        derived = Derived(warnings=self.warnings, check_classes=self.references)
        derive_submitted(self.state, self._submitted, derived)
        derive_pods(self.state, self._kueue_pods, derived)
        for key, owner in sorted(derived.owners.items()):
            self.notes.append(f"{owner}: Kueue's Workload derived as Workload/{key}")
        for kind, (count, first) in sorted(self._unqueued.items()):
            objects = "object" if count == 1 else "objects"
            self.warnings.append(
                f"{first}: skipped {count} {kind} {objects} without a "
                f"{integrations.QUEUE_LABEL} label: Kueue does not manage them (their pods "
                "are read when they are in the input)"
            )
        self._join_gangs()
        join_checks(self.state, self.warnings)
        return derived

    def _warn_located(self, message: str) -> None:
        """A warning that names a line (the fast reading has none: it reads again)."""
        if self.fast:
            raise NotFast("a warning: read again for its line")
        self.warnings.append(message)

    def _check_fields(self, doc: Any, api_version: str, kind: str, where: Where) -> None:
        """A warning for each key that is not a field of its kind, naming the nearest
        known one (the fast reading has no lines: it reads again when there is one)."""
        root = apifields.root_of(api_version, kind)
        if root is None:
            return
        for unknown in apifields.unknown_fields(doc, root):
            if self.fast:
                raise NotFast("a field is not a field: read again for its line")
            error = where.error(unknown.path, unknown.message(), unknown.container, unknown.key)
            error.field = None  # the message names the path
            self.warnings.append(error.render())

    # -- Kueue's manager Configuration -------------------------------------------------------

    def _configuration(self, top: Fields, api_version: str, where: Where) -> None:
        config = kueueconfig.configuration(top, api_version)
        self._put(self.state.kueue_configurations, config.name, config, where)

    def _config_map(self, top: Fields, where: Where) -> bool:
        """The ``kueue-manager-config`` ConfigMap: its Configuration is read (True); any
        other ConfigMap is not (False: skipped as a kind that is not read)."""
        meta = top.map_or_empty("metadata")
        if meta.raw("name") != kueueconfig.CONFIG_MAP_NAME:
            return False
        namespace = meta.text("namespace", default="default")
        where.obj = f"ConfigMap {namespace}/{kueueconfig.CONFIG_MAP_NAME}"
        data = top.map_or_empty("data")
        found = kueueconfig.from_config_map(data)
        if found is None:
            self.warnings.append(
                f"{_location(where)}{where.obj}: no {kueueconfig.CONFIG_MAP_KEY} in data: "
                "Kueue's defaults (fair sharing off)"
            )
            return True
        doc, api_version = found
        inner = Where(where.file, where.document, where.obj, f"data.{kueueconfig.CONFIG_MAP_KEY}")
        self._configuration(Fields(inner, doc, inner.prefix), api_version, where)
        return True

    # -- names ------------------------------------------------------------------------------

    def _name(self, meta: Fields, kind: str, namespace: str, where: Where) -> str:
        """``metadata.name``, or for an object with only ``generateName`` a name made as
        the API server makes one (five letters after the prefix), the same on every run:
        drawn from the object's kind, namespace, prefix, file name and place in it."""
        name = meta.opt_text("name")
        if name is not None:
            return name
        stem = meta.opt_text("generateName")
        if stem is None:
            meta.fail("name", "required field is missing (and there is no generateName)")
        seed = "\0".join(
            (kind, namespace, stem, os.path.basename(where.file), str(where.document), where.prefix)
        )
        attempt, generated = 0, ""
        while not generated or f"{kind}/{namespace}/{generated}" in self._generated:
            digest = hashlib.sha256(f"{seed}\0{attempt}".encode()).digest()
            generated = stem + "".join(_NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in digest[:5])
            attempt += 1
        self._generated.add(f"{kind}/{namespace}/{generated}")
        place = f"document {where.document}" if where.document else where.prefix or "object"
        self.notes.append(
            f"{where.file}: {place}: {kind} with generateName {stem!r} named {generated}"
        )
        return generated

    # -- cross-object references -------------------------------------------------------------

    def _check_classes(self) -> None:
        """Objects whose priority comes from a class that is not in the input are left out
        (the API server would not have taken them) and reported with their file and
        line; the rest is decided. The fast reading has no lines: it reads again."""
        st = self.state
        missing: list[tuple[dict[str, Any], str, str, str]] = []
        for key, pod in st.pods.items():
            name = pod.priority_class_name
            if pod.priority is None and name and name not in st.priority_classes:
                what = f"PriorityClass {name!r}"
                missing.append((st.pods, key, "spec.priorityClassName", what))
        for key, pg in st.pod_groups.items():
            for field, name in (
                ("spec.priorityClassName", pg.priority_class_name),
                ("spec.preemptionPriorityClassName", pg.preemption_priority_class_name),
            ):
                if name and name not in st.priority_classes:
                    missing.append((st.pod_groups, key, field, f"PriorityClass {name!r}"))
                    break
        for key, wl in st.workloads.items():
            ref = wl.priority_class
            if wl.priority is not None or ref is None:
                continue
            if ref.kind == WORKLOAD_PRIORITY_CLASS:
                if ref.name not in st.workload_priority_classes:
                    what = f"WorkloadPriorityClass {ref.name!r}"
                    missing.append((st.workloads, key, "spec.priorityClassName", what))
            elif ref.name not in st.priority_classes:
                what = f"PriorityClass {ref.name!r}"
                missing.append((st.workloads, key, "spec.priorityClassName", what))
        if not missing:
            return
        if self.fast:
            raise NotFast("a class is missing: read again for the lines")
        for table, key, field, what in missing:
            if key not in table:
                continue
            where = self._located.get((id(table), key), "")
            kinds = {id(st.pods): "Pod", id(st.pod_groups): "PodGroup"}
            obj = f"{kinds.get(id(table), 'Workload')} {key}"
            self.rejected.append(
                f"{where}{obj}: {field}: {what} not found; {obj} is left out"
                + (" with its pods" if table is st.pod_groups else "")
            )
            del table[key]
            if table is st.pod_groups:
                for pod_key in [k for k, p in st.pods.items() if p.group == key]:
                    del st.pods[pod_key]

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
        if kind == "List" or (
            kind.endswith("List") and isinstance(doc.get("items"), list | LazyItems)
        ):
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
        if api_version in kueueconfig.CONFIG_VERSIONS and kind == "Configuration":
            where.obj = "Kueue Configuration"  # the manager's file: it has no metadata
            self._configuration(top, api_version, where)
            return
        if api_version == "v1" and kind == "ConfigMap" and self._config_map(top, where):
            return
        if not reads(api_version, kind):
            self._skip(api_version, kind, where, doc, container, key)
            return
        meta = top.map("metadata", required=True)
        assert meta is not None
        where.line = (
            line_of(container, key) if container is not None else getattr(doc, "line", None)
        )
        namespace = meta.text("namespace", default="default")
        name = self._name(meta, kind, namespace, where)
        where.obj = f"{kind} {name}" if kind in CLUSTER_SCOPED else f"{kind} {namespace}/{name}"
        if self.check_fields:
            self._check_fields(doc, api_version, kind, where)
        spec = top.map_or_empty("spec")
        st = self.state

        if (api_version, kind) in integrations.INTEGRATIONS:
            queue = integrations.queue_name(meta)
            if queue is None:
                entry = self._unqueued.setdefault(kind, [0, _location(where).rstrip(": ")])
                entry[0] += 1
                return
            self._submitted.append(
                integrations.submitted(
                    kind,
                    meta,
                    namespace,
                    name,
                    spec,
                    top.map_or_empty("status"),
                    queue,
                    _location(where) + where.obj,
                )
            )
            return
        if api_version in KUEUE_VERSIONS:
            if kind == "ClusterQueue":
                tolerating = core.toleration(top, self.warnings.append)
                cq = kueue.cluster_queue(name, spec, meta, tolerating)
                self._put(st.cluster_queues, name, cq, where)
                return
            if kind == "AdmissionCheck":
                status = top.map_or_empty("status")
                ac = kueue.admission_check(name, spec, status)
                self._put(st.admission_checks, name, ac, where)
                return
            if kind == "Cohort":
                self._put(st.cohorts, name, kueue.cohort(name, spec), where)
                return
            if kind == "ResourceFlavor":
                self._put(st.flavors, name, kueue.resource_flavor(name, spec), where)
                return
            if kind == "Topology":
                self._put(st.topologies, name, topology.topology(name, spec), where)
                return
            if kind == "LocalQueue":
                lq = kueue.local_queue(namespace, name, spec)
                self._put(st.local_queues, lq.key, lq, where)
                return
            if kind == "WorkloadPriorityClass":
                wpc = kueue.workload_priority_class(name, top, self.warnings.append)
                self._put(st.workload_priority_classes, name, wpc, where)
                return
            if kind == "Workload":
                status = top.map_or_empty("status")
                wl = kueue.workload(meta, namespace, name, spec, status)
                self._put(st.workloads, wl.key, wl, where)
                return
        elif api_version == "scheduling.k8s.io/v1" and kind == "PriorityClass":
            self._put(
                st.priority_classes,
                name,
                core.priority_class(name, top, self.warnings.append),
                where,
            )
            return
        elif api_version == "v1" and kind == "Namespace":
            labels = metadata_labels(meta, self._warn_located)
            self._put(st.namespaces, name, Namespace(name=name, labels=labels), where)
            return
        elif api_version == "v1" and kind in ("Node", "Pod"):
            status = top.map_or_empty("status")
            if kind == "Node":
                node = nodes.node(name, meta, spec, status, self._warn_located)
                self._put(st.nodes, name, node, where)
                return
            pod = fast_pod(namespace, name, meta.data, spec.data, status.data) or nodes.pod(
                namespace, name, meta, spec, status, self._warn_located
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
                self._api_grouped.add(pod.key)
            self._put(st.pods, pod.key, pod, where)
            queue = integrations.queue_name(meta)
            if queue is not None and not pod.kueue_workload:
                annotations = meta.text_map("annotations")
                self._kueue_pods.append(
                    KueuePod(
                        key=pod.key,
                        queue=queue,
                        group=pod.labels.get(integrations.POD_GROUP_LABEL, ""),
                        total=annotations.get(integrations.POD_GROUP_TOTAL),
                        priority_label=pod.labels.get(integrations.PRIORITY_LABEL, ""),
                        location=_location(where) + where.obj,
                    )
                )
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
            eq = nodes.elastic_quota(namespace, name, meta, spec)
            self._put(st.elastic_quotas, eq.key, eq, where)
            return
        elif api_version.startswith((GANG_API_PREFIX, GANG_API_BETA)) and kind in (
            "Workload",
            "PodGroup",
        ):
            self._gang_object(kind, namespace, name, spec, where)
            return

        self._skip(api_version, kind, where, doc, container, key)

    def _skip(
        self, api_version: str, kind: str, where: Where, doc: Any, container: Any, key: Any
    ) -> None:
        """An object of a kind that is not read: counted, reported once per kind."""
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
        object get an implicit all-or-nothing group of all its pods. Pods whose
        ``spec.schedulingGroup`` names a PodGroup that is not there keep the name but get
        no group: each is a victim of its own at its own priority (kube-scheduler)."""
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
            if pod.group and pod.key not in self._api_grouped:
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
        labels, annotations = meta.get("labels"), meta.get("annotations")
        if type(labels) not in (dict, type(None)) or type(annotations) not in (dict, type(None)):
            return False  # the general path names the field that is wrong
        if (labels and _QUEUE_LABEL in labels) or (annotations and _QUEUE_LABEL in annotations):
            return False  # Kueue manages it: read by the general path
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
        if not self.fast:
            self._located[(id(table), key)] = _location(where)


def _location(where: Where) -> str:
    """``FILE: document N (line L): `` for messages about an object."""
    text = f"{where.file}: "
    if where.document:
        text += f"document {where.document}"
        line = where.line
        if line is not None:
            text += f" (line {line})"
        text += ": "
    return text


def _is_timeline(path: str, file: str) -> bool:
    """A scenario's ``timeline.yaml`` at the top of a folder given with ``-f``."""
    return (
        os.path.basename(file) == TIMELINE
        and Path(path).is_dir()
        and Path(file).parent == Path(path)
    )


def load(
    paths: Sequence[str],
    objects: Sequence[Mapping[str, Any]] = (),
    origin: str = "",
    references: bool = True,
) -> Loaded:
    """Read every YAML document under ``paths`` (files or folders), and ``objects`` (API
    objects read from ``origin``, a live cluster) before them.

    ``references``: the input is the whole cluster, so an object whose class is not in
    it is left out (``plan``); off for a part read on its own (a file ingest's sim
    applies to a live state that holds the classes).

    Raises ``ManifestError`` on the first invalid object of a file (an API object that
    cannot be read is left out, in ``Loaded.rejected``); unsupported kinds are skipped
    and reported once per kind in ``Loaded.warnings``.
    """
    if not paths and not objects:
        raise ManifestError("(no input)", "give at least one file or folder with -f")
    with paused():
        try:
            reader = _Reader(fast=True)
            reader.check_fields, reader.references = True, references
            return reader.read(paths, objects, origin)
        except (ManifestError, NotFast, ValueError, OverflowError):
            # Read again, remembering lines: the error names its line. (Where the YAML
            # 1.1 reading accepts what the YAML 1.2 one did not, that reading is taken.
            # The fast YAML reader gives integers of any length, which Python refuses to
            # print past 4,300 digits: the lined one gives those as text, which the
            # field reading them refuses by name.)
            reader = _Reader()
            reader.check_fields, reader.references = True, references
            return reader.read(paths, objects, origin)


def reads(api_version: str, kind: str) -> bool:
    """Whether objects of this ``apiVersion`` and ``kind`` are read (not skipped)."""
    if (api_version, kind) in integrations.INTEGRATIONS:
        return True
    if api_version in KUEUE_VERSIONS:
        return kind in (
            "AdmissionCheck",
            "ClusterQueue",
            "Cohort",
            "ResourceFlavor",
            "Topology",
            "LocalQueue",
            "WorkloadPriorityClass",
            "Workload",
        )
    if api_version == "scheduling.k8s.io/v1":
        return kind == "PriorityClass"
    if api_version == "v1":
        return kind in ("Node", "Pod", "Namespace", "ConfigMap")
    if api_version == "policy/v1":
        return kind == "PodDisruptionBudget"
    if api_version in PLUGINS_GROUPS:
        return kind in ("PodGroup", "ElasticQuota")
    if api_version.startswith((GANG_API_PREFIX, GANG_API_BETA)):
        return kind in ("Workload", "PodGroup")
    return False


__all__ = ["Loaded", "load", "reads"]
