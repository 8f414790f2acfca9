"""Reading manifest files and folders into a ``ClusterState``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from gangpreempt.errors import ManifestError
from gangpreempt.manifests import core, kueue
from gangpreempt.manifests.fields import Fields, Where, describe
from gangpreempt.manifests.yamlio import documents, line_of, yaml_files
from gangpreempt.model.cluster import ClusterState

KUEUE_VERSIONS = ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1alpha1")
CLUSTER_SCOPED = {
    "ResourceFlavor",
    "ClusterQueue",
    "Cohort",
    "WorkloadPriorityClass",
    "PriorityClass",
}


class Loaded(msgspec.Struct):
    state: ClusterState
    warnings: list[str]


class _Reader:
    def __init__(self) -> None:
        self.state = ClusterState()
        self.warnings: list[str] = []
        self._skipped: dict[tuple[str, str], list[Any]] = {}

    def read(self, paths: Sequence[str]) -> Loaded:
        for path in paths:
            for file in yaml_files(path):
                for number, doc in documents(file):
                    if doc is None:
                        continue
                    self._object(doc, Where(file, number), None, "")
        for (api_version, kind), (count, first) in sorted(self._skipped.items()):
            objects = "object" if count == 1 else "objects"
            self.warnings.append(
                f"{first}: skipped {count} {objects} of unsupported kind {kind} ({api_version})"
            )
        return Loaded(self.state, self.warnings)

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

        location = f"{where.file}: document {where.document}"
        line = line_of(container, key) if container is not None else line_of(doc, "kind")
        if line is not None:
            location += f" (line {line})"
        entry = self._skipped.setdefault((api_version, kind), [0, location])
        entry[0] += 1

    def _put(self, table: dict[str, Any], key: str, value: Any, where: Where) -> None:
        if key in table:
            self.warnings.append(
                f"{where.file}: document {where.document} ({where.obj}): "
                "defined more than once; the last definition wins"
            )
        table[key] = value


def load(paths: Sequence[str]) -> Loaded:
    """Read every YAML document under ``paths`` (files or folders).

    Raises ``ManifestError`` on the first invalid object; unsupported kinds are skipped
    and reported once per kind in ``Loaded.warnings``.
    """
    if not paths:
        raise ManifestError("(no input)", "give at least one file or folder with -f")
    return _Reader().read(paths)


__all__ = ["Loaded", "load"]
