"""Kueue's topology-aware scheduling as the manifest reader takes it: Topology objects,
a flavor's topologyName, a pod set's topology request (the Workload's field, else its
pod template's annotations, Kueue's precedence), and an admitted pod set's
topologyAssignment in both API versions' encodings; bad input named by file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangpreempt.errors import ManifestError
from gangpreempt.manifests import load
from gangpreempt.model.topology import TopologyAssignment, TopologyDomain, TopologyRequest

pytestmark = pytest.mark.unit
BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"


def topology(*levels: str, version: str = "v1beta2") -> str:
    items = "".join(f"  - nodeLabel: {level}\n" for level in levels)
    return (
        f"apiVersion: kueue.x-k8s.io/{version}\nkind: Topology\nmetadata: {{name: t}}\n"
        f"spec:\n  levels:\n{items}"
    )


def workload(pod_set_extra: str = "", annotations: str = "", status: str = "") -> str:
    return (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w, namespace: n}\n"
        "spec:\n  queueName: q\n  podSets:\n  - name: main\n    count: 6\n"
        f"{pod_set_extra}"
        f"    template:\n      metadata:\n        annotations: {{{annotations}}}\n"
        "      spec:\n        containers: [{name: c, resources: {requests: {cpu: '1'}}}]\n"
        f"{status}"
    )


def read(tmp_path: Path, *docs: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "in.yaml"
    path.write_text("---\n".join(docs))
    return load([str(path)], references=False).state


def test_a_topology_and_a_flavor_naming_it(tmp_path: Path) -> None:
    flavor = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: tas}\n"
        "spec: {nodeLabels: {pool: gpu}, topologyName: t}\n"
    )
    state = read(tmp_path, topology(BLOCK, RACK, HOST, version="v1beta1"), flavor)
    assert state.topologies["t"].levels == (BLOCK, RACK, HOST)
    assert state.topologies["t"].hostname_leaves
    assert state.flavors["tas"].topology_name == "t"


@pytest.mark.parametrize(
    ("levels", "says"),
    [
        ((HOST, RACK), "kubernetes.io/hostname may only be the last level"),
        ((RACK, RACK), "duplicate"),
    ],
)
def test_a_bad_topology_is_named(tmp_path: Path, levels: tuple[str, ...], says: str) -> None:
    with pytest.raises(ManifestError, match=says) as err:
        read(tmp_path, topology(*levels))
    assert "in.yaml" in str(err.value)
    assert "spec.levels" in str(err.value)


def test_the_request_from_annotations_and_from_the_field_which_wins(tmp_path: Path) -> None:
    by_annotation = read(
        tmp_path,
        workload(
            annotations=f"kueue.x-k8s.io/podset-preferred-topology: {RACK}, "
            f"kueue.x-k8s.io/podset-slice-required-topology: {HOST}, "
            "kueue.x-k8s.io/podset-slice-size: '2'"
        ),
    )
    ps = by_annotation.workloads["n/w"].pod_sets[0]
    assert ps.topology == TopologyRequest(preferred=RACK, slice_level=HOST, slice_size=2)
    by_field = read(
        tmp_path,
        workload(
            pod_set_extra=f"    topologyRequest: {{required: {BLOCK}, preferred: {RACK}}}\n",
            annotations=f"kueue.x-k8s.io/podset-preferred-topology: {RACK}",
        ),
    )
    assert by_field.workloads["n/w"].pod_sets[0].topology == TopologyRequest(required=BLOCK)
    plain = read(tmp_path, workload())
    assert plain.workloads["n/w"].pod_sets[0].topology is None


def test_a_slice_size_without_its_topology_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="a slice size and a slice topology go together"):
        read(tmp_path, workload(annotations="kueue.x-k8s.io/podset-slice-size: '2'"))


ADMITTED = """status:
  admission:
    clusterQueue: cq
    podSetAssignments:
    - name: main
      count: 6
      flavors: {cpu: tas}
      topologyAssignment:
"""


def test_the_v1beta2_slices_encoding_is_decoded(tmp_path: Path) -> None:
    slices = (
        f"        levels: [{BLOCK}, {RACK}]\n"
        "        slices:\n"
        "        - domainCount: 2\n"
        "          valuesPerLevel:\n"
        "          - universal: b1\n"
        "          - individual: {prefix: 'rack-', roots: ['1', '2']}\n"
        "          podCounts: {individual: [4, 1]}\n"
        "        - domainCount: 1\n"
        "          valuesPerLevel: [{universal: b2}, {universal: rack-9}]\n"
        "          podCounts: {universal: 1}\n"
    )
    state = read(tmp_path, workload(status=ADMITTED + slices))
    wl = state.workloads["n/w"]
    assert wl.admission is not None
    assert wl.admission.pod_set_assignments[0].topology_assignment == TopologyAssignment(
        (BLOCK, RACK),
        (
            TopologyDomain(("b1", "rack-1"), 4),
            TopologyDomain(("b1", "rack-2"), 1),
            TopologyDomain(("b2", "rack-9"), 1),
        ),
    )


def test_the_v1beta1_domains_encoding_and_a_count_that_does_not_add_up(tmp_path: Path) -> None:
    domains = (
        f"        levels: [{HOST}]\n"
        "        domains:\n"
        "        - {values: [x1], count: 4}\n"
        "        - {values: [x2], count: 2}\n"
    )
    state = read(tmp_path, workload(status=ADMITTED + domains))
    wl = state.workloads["n/w"]
    assert wl.admission is not None
    ta = wl.admission.pod_set_assignments[0].topology_assignment
    assert ta is not None
    assert [(d.values, d.count) for d in ta.domains] == [(("x1",), 4), (("x2",), 2)]
    short = domains.replace("count: 2", "count: 1")
    with pytest.raises(ManifestError, match="assigns 5 pods, the pod set's count is 6") as err:
        read(tmp_path, workload(status=ADMITTED + short))
    assert "topologyAssignment.domains" in str(err.value)
