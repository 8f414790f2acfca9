"""Kueue's TestFindTopologyAssignments rows (pkg/cache/scheduler/tas_cache_test.go,
Kueue main @ ff69552e79ad21652c36caa97038382e55625cf7)
that a single pod set without feature gates expresses, as data: inputs and Kueue's expected answer.
The rows left out, and why, are listed in LEFT_OUT."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TNode:
    name: str
    labels: dict[str, str]
    # cpu in millicores, memory in bytes, "pods", "nvidia.com/gpu", ...: integers
    allocatable: dict[str, int]
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    unschedulable: bool = False
    ready: bool = True


@dataclass(frozen=True)
class TPod:  # a non-TAS pod bound to a node
    node: str
    requests: dict[str, int]  # same units as allocatable
    phase: str = "Running"


@dataclass(frozen=True)
class Row:
    name: str  # Kueue's row name, verbatim
    levels: tuple[str, ...]  # label keys, highest first
    nodes: tuple[TNode, ...]
    count: int
    requests: dict[str, int]  # per pod, same units (cpu millicores)
    required: str = ""  # level label key, or ""
    preferred: str = ""
    unconstrained: bool = False
    implied: bool = False  # topologyRequest nil in the row (Kueue treats it as implied TAS)
    slice_level: str = ""  # podSetSliceRequiredTopology
    slice_size: int = 0
    pods: tuple[TPod, ...] = ()
    flavor_node_labels: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    node_selector: dict[str, str] = field(default_factory=dict)
    want_levels: tuple[str, ...] = ()  # Kueue's expected assignment levels
    # ((values per level), count), in Kueue's expected order
    want: tuple[tuple[tuple[str, ...], int], ...] = ()
    want_reason: str = ""  # Kueue's expected failure message, verbatim, when it expects none


# Notes on the translation (all rows run in Kueue with VectorizedResourceRequests on and off,
# with one expectation for both, so each appears once):
# - Kueue's test builds every node with testingnode.MakeNode, which sets no allocatable and no
#   conditions: a node's allocatable is exactly what the row lists, and a node is Ready only if the
#   row calls Ready(). A node without Ready() (or with NotReady()) has ready=False here.
# - Kueue runs every row against a flavor on topology "default", so failure messages name it.
# - Rows that set no featureGates run with today's defaults, notably TASProfileMixed on
#   (unconstrained, implied and slice-only requests use LeastFreeCapacity even when the row name
#   says BestFit) and TASBalancedPlacement off.
# - TPod.phase "" means the row set no status phase (Kueue counts such a bound pod as non-terminal).
# - Toleration operator/effect "" means the field is unset in the row (Kubernetes defaults:
#   operator "" acts as Equal, effect "" matches every effect).

BLOCK = "cloud.com/topology-block"
RACK = "cloud.com/topology-rack"
HOST = "kubernetes.io/hostname"

# defaultNodes in Kueue's test
DEFAULT_NODES: tuple[TNode, ...] = (
    TNode(
        "b1-r1-x3",
        {BLOCK: "b1", RACK: "r1", HOST: "x3"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b1-r2-x5",
        {BLOCK: "b1", RACK: "r2", HOST: "x5"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b1-r2-x1",
        {BLOCK: "b1", RACK: "r2", HOST: "x1"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b1-r2-x6",
        {BLOCK: "b1", RACK: "r2", HOST: "x6"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b2-r2-x2",
        {BLOCK: "b2", RACK: "r1", HOST: "x2"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b2-r2-x4",
        {BLOCK: "b2", RACK: "r2", HOST: "x4"},
        {"cpu": 2000, "memory": 4294967296, "pods": 40},
    ),
)

# scatteredNodes in Kueue's test
SCATTERED_NODES: tuple[TNode, ...] = (
    TNode(
        "b1-r1-x3",
        {BLOCK: "b1", RACK: "r1", HOST: "x3"},
        {"cpu": 4000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b1-r1-x5",
        {BLOCK: "b1", RACK: "r1", HOST: "x5"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b1-r1-x1",
        {BLOCK: "b1", RACK: "r1", HOST: "x1"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b2-r1-x6",
        {BLOCK: "b2", RACK: "r1", HOST: "x6"},
        {"cpu": 2000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b2-r1-x2",
        {BLOCK: "b2", RACK: "r1", HOST: "x2"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
)

# binaryTreesNodes in Kueue's test
BINARY_TREES_NODES: tuple[TNode, ...] = (
    TNode(
        "b1-r1-x3",
        {BLOCK: "b1", RACK: "r1", HOST: "x3"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b1-r1-x5",
        {BLOCK: "b1", RACK: "r1", HOST: "x5"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b1-r2-x1",
        {BLOCK: "b1", RACK: "r2", HOST: "x1"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b1-r2-x6",
        {BLOCK: "b1", RACK: "r2", HOST: "x6"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b2-r1-x2",
        {BLOCK: "b2", RACK: "r1", HOST: "x2"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b2-r1-x4",
        {BLOCK: "b2", RACK: "r1", HOST: "x4"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b2-r2-x7",
        {BLOCK: "b2", RACK: "r2", HOST: "x7"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
    TNode(
        "b2-r2-x8",
        {BLOCK: "b2", RACK: "r2", HOST: "x8"},
        {"cpu": 1000, "memory": 1073741824, "pods": 10},
    ),
)

ROWS: tuple[Row, ...] = (
    Row(
        name="minimize the number of used racks before optimizing the number of nodes; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 2000, "pods": 10}),
            TNode("b1-r2-x5", {BLOCK: "b1", RACK: "r2", HOST: "x5"}, {"cpu": 2000, "pods": 20}),
            TNode("b1-r3-x1", {BLOCK: "b1", RACK: "r3", HOST: "x1"}, {"cpu": 1000, "pods": 10}),
            TNode("b1-r3-x6", {BLOCK: "b1", RACK: "r3", HOST: "x6"}, {"cpu": 1000, "pods": 10}),
            TNode("b1-r3-x2", {BLOCK: "b1", RACK: "r3", HOST: "x2"}, {"cpu": 1000, "pods": 10}),
            TNode("b1-r3-x4", {BLOCK: "b1", RACK: "r3", HOST: "x4"}, {"cpu": 1000, "pods": 10}),
        ),
        count=4,
        requests={"cpu": 1000},
        required=BLOCK,
        want_levels=(HOST,),
        want=(
            (("x1",), 1),
            (("x2",), 1),
            (("x4",), 1),
            (("x6",), 1),
        ),
    ),
    Row(
        name="choose the node that can accommodate all Pods",
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 2000, "pods": 10}),
            TNode("b1-r1-x5", {BLOCK: "b1", RACK: "r1", HOST: "x5"}, {"cpu": 1000, "pods": 10}),
            TNode("b1-r1-x1", {BLOCK: "b1", RACK: "r1", HOST: "x1"}, {"cpu": 1000, "pods": 10}),
        ),
        count=2,
        requests={"cpu": 1000},
        required=BLOCK,
        want_levels=(HOST,),
        want=((("x3",), 2),),
    ),
    Row(
        name=(
            "no annotation; implied default to unconstrained; 6 pods fit into hosts scattered "
            "across the whole datacenter even they could fit into single rack; BestFit"
        ),
        levels=(BLOCK, RACK, HOST),
        nodes=SCATTERED_NODES,
        count=6,
        requests={"cpu": 1000},
        implied=True,
        want_levels=(HOST,),
        want=(
            (("x1",), 1),
            (("x3",), 1),
            (("x5",), 1),
            (("x2",), 1),
            (("x6",), 2),
        ),
    ),
    Row(
        name=(
            "unconstrained; 6 pods fit into hosts scattered across the whole datacenter even "
            "they could fit into single rack; BestFit"
        ),
        levels=(BLOCK, RACK, HOST),
        nodes=SCATTERED_NODES,
        count=6,
        requests={"cpu": 1000},
        unconstrained=True,
        want_levels=(HOST,),
        want=(
            (("x1",), 1),
            (("x3",), 1),
            (("x5",), 1),
            (("x2",), 1),
            (("x6",), 2),
        ),
    ),
    Row(
        name="unconstrained; a single pod fits into each host; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 1000},
        unconstrained=True,
        want_levels=(HOST,),
        want=((("x3",), 1),),
    ),
    # gate TASProfileMixed=true equals today's default
    Row(
        name="unconstrained; a single pod fits into each host; LeastFreeCapacity; TASProfileMixed",
        levels=(BLOCK, RACK, HOST),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 1000},
        unconstrained=True,
        want_levels=(HOST,),
        want=((("x3",), 1),),
    ),
    Row(
        name="block required; 4 pods fit into one host each; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=BINARY_TREES_NODES,
        count=4,
        requests={"cpu": 1000},
        required=BLOCK,
        want_levels=(HOST,),
        want=(
            (("x3",), 1),
            (("x5",), 1),
            (("x1",), 1),
            (("x6",), 1),
        ),
    ),
    Row(
        name="host required; single Pod fits in the host; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        want_levels=(HOST,),
        want=((("x3",), 1),),
    ),
    # gate TASProfileMixed=true equals today's default
    Row(
        name="host required; single Pod fits in the host; BestFit; TASProfileMixed",
        levels=(BLOCK, RACK, HOST),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        want_levels=(HOST,),
        want=((("x3",), 1),),
    ),
    # gate TASProfileMixed=true equals today's default
    # despite its name, Kueue's row sets Required (not Preferred) to the hostname level
    Row(
        name="host preferred; single Pod fits in the host; BestFit; TASProfileMixed",
        levels=(BLOCK, RACK, HOST),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        want_levels=(HOST,),
        want=((("x3",), 1),),
    ),
    Row(
        name="rack required; single Pod fits in a rack; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 1000},
        required=RACK,
        want_levels=(BLOCK, RACK),
        want=((("b1", "r1"), 1),),
    ),
    Row(
        name="rack required; multiple Pods fit in a rack; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=3,
        requests={"cpu": 1000},
        required=RACK,
        want_levels=(BLOCK, RACK),
        want=((("b1", "r2"), 3),),
    ),
    Row(
        name="block preferred; Pods fit in 2 blocks; BestFit",
        levels=(BLOCK,),
        nodes=(
            TNode("b1", {BLOCK: "b1"}, {"cpu": 2000, "pods": 20}),
            TNode("b2", {BLOCK: "b2"}, {"cpu": 1000, "pods": 10}),
            TNode("b3", {BLOCK: "b3"}, {"cpu": 4000, "pods": 40}),
        ),
        count=5,
        requests={"cpu": 1000},
        preferred=BLOCK,
        want_levels=(BLOCK,),
        want=(
            (("b2",), 1),
            (("b3",), 4),
        ),
    ),
    Row(
        name="rack required; multiple Pods fit in some racks; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=2,
        requests={"cpu": 1000},
        required=RACK,
        want_levels=(BLOCK, RACK),
        want=((("b2", "r2"), 2),),
    ),
    Row(
        name="rack required; too many pods to fit in any rack; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=4,
        requests={"cpu": 1000},
        required=RACK,
        want_reason='topology "default" allows to fit only 3 out of 4 pod(s)',
    ),
    Row(
        name="block required; single Pod fits in a block and a single rack; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 1000},
        required=BLOCK,
        want_levels=(BLOCK, RACK),
        want=((("b2", "r1"), 1),),
    ),
    Row(
        name="block required; single Pod fits in a block spread across two racks; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=4,
        requests={"cpu": 1000},
        required=BLOCK,
        want_levels=(BLOCK, RACK),
        want=(
            (("b1", "r1"), 1),
            (("b1", "r2"), 3),
        ),
    ),
    Row(
        name="block required; Pods fit in a block spread across two racks; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=4,
        requests={"cpu": 1000},
        required=BLOCK,
        want_levels=(BLOCK, RACK),
        want=(
            (("b1", "r1"), 1),
            (("b1", "r2"), 3),
        ),
    ),
    Row(
        name="block required; single Pod which cannot be split; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 4000},
        required=BLOCK,
        want_reason=(
            'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 4; '
            'excluded: resource "cpu": 4'
        ),
    ),
    Row(
        name="block required; too many Pods to fit requested; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=5,
        requests={"cpu": 1000},
        required=BLOCK,
        want_reason='topology "default" allows to fit only 4 out of 5 pod(s)',
    ),
    Row(
        name="rack required; single Pod requiring memory; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=4,
        requests={"memory": 1024},
        required=RACK,
        want_levels=(BLOCK, RACK),
        want=((("b1", "r1"), 4),),
    ),
    Row(
        name="rack preferred; but only block can accommodate the workload; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=4,
        requests={"cpu": 1000},
        preferred=RACK,
        want_levels=(BLOCK, RACK),
        want=(
            (("b1", "r1"), 1),
            (("b1", "r2"), 3),
        ),
    ),
    Row(
        name="rack preferred; but only multiple blocks can accommodate the workload; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=6,
        requests={"cpu": 1000},
        preferred=RACK,
        want_levels=(BLOCK, RACK),
        want=(
            (("b1", "r1"), 1),
            (("b1", "r2"), 3),
            (("b2", "r2"), 2),
        ),
    ),
    Row(
        name="block preferred; but only multiple blocks can accommodate the workload; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=6,
        requests={"cpu": 1000},
        preferred=BLOCK,
        want_levels=(BLOCK, RACK),
        want=(
            (("b1", "r1"), 1),
            (("b1", "r2"), 3),
            (("b2", "r2"), 2),
        ),
    ),
    Row(
        name="block preferred; but the workload cannot be accommodate in entire topology; BestFit",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=10,
        requests={"cpu": 1000},
        preferred=BLOCK,
        want_reason='topology "default" allows to fit only 7 out of 10 pod(s)',
    ),
    # the row's node also has no Ready condition (it is dropped for that too)
    Row(
        name="only nodes with matching labels are considered; no matching node; BestFit",
        levels=(HOST,),
        nodes=(
            TNode(
                "b1-r1-x3",
                {"zone": "zone-a", HOST: "x3"},
                {"cpu": 1000, "memory": 1073741824, "pods": 10},
                ready=False,
            ),
        ),
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        flavor_node_labels={"zone": "zone-b"},
        want_reason="no topology domains at level: kubernetes.io/hostname",
    ),
    Row(
        name="only nodes with matching labels are considered; matching node is found; BestFit",
        levels=(HOST,),
        nodes=(
            TNode(
                "b1-r1-x3",
                {"zone": "zone-a", HOST: "x3"},
                {"cpu": 1000, "memory": 1073741824, "pods": 10},
            ),
        ),
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        flavor_node_labels={"zone": "zone-a"},
        want_levels=(HOST,),
        want=((("x3",), 1),),
    ),
    Row(
        name="only nodes with matching levels are considered; no host label on node; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode(
                "b1-r1-x3",
                {BLOCK: "b1", RACK: "r1"},
                {"cpu": 1000, "memory": 1073741824, "pods": 10},
            ),
        ),
        count=1,
        requests={"cpu": 1000},
        required=RACK,
        want_reason="no topology domains at level: cloud.com/topology-rack",
    ),
    # a pod with phase "" has no status phase set in Kueue's row (not terminated)
    Row(
        name="don't consider unscheduled Pods when computing capacity; BestFit",
        levels=(HOST,),
        nodes=(TNode("x3", {HOST: "x3"}, {"cpu": 1000, "memory": 1073741824, "pods": 10}),),
        count=1,
        requests={"cpu": 600},
        required=HOST,
        pods=(TPod("", {"cpu": 600}, phase=""),),
        want_levels=(HOST,),
        want=((("x3",), 1),),
    ),
    Row(
        name="don't consider terminal pods when computing the capacity; BestFit",
        levels=(HOST,),
        nodes=(TNode("x3", {HOST: "x3"}, {"cpu": 1000, "memory": 1073741824, "pods": 10}),),
        count=1,
        requests={"cpu": 600},
        required=HOST,
        pods=(
            TPod("x3", {"cpu": 600}, phase="Failed"),
            TPod("x3", {"cpu": 600}, phase="Succeeded"),
        ),
        want_levels=(HOST,),
        want=((("x3",), 1),),
    ),
    Row(
        name="include usage from pending scheduled non-TAS pods, blocked assignment; BestFit",
        levels=(HOST,),
        nodes=(TNode("x3", {HOST: "x3"}, {"cpu": 1000, "memory": 1073741824, "pods": 10}),),
        count=1,
        requests={"cpu": 600},
        required=HOST,
        pods=(TPod("x3", {"cpu": 600}, phase="Pending"),),
        want_reason=(
            'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; '
            'excluded: resource "cpu": 1'
        ),
    ),
    Row(
        name="include usage from running non-TAS pods, blocked assignment; BestFit",
        levels=(HOST,),
        nodes=(TNode("x3", {HOST: "x3"}, {"cpu": 1000, "memory": 1073741824, "pods": 10}),),
        count=1,
        requests={"cpu": 600},
        required=HOST,
        pods=(TPod("x3", {"cpu": 600}),),
        want_reason=(
            'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; '
            'excluded: resource "cpu": 1'
        ),
    ),
    Row(
        name="node allocatable capacity completely used by non-TAS pod; empty remainingCapacity",
        levels=(HOST,),
        nodes=(TNode("x3", {HOST: "x3"}, {"cpu": 1000, "pods": 1}),),
        count=1,
        requests={"cpu": 100},
        required=HOST,
        pods=(TPod("x3", {"cpu": 1000}),),
        want_reason=(
            'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; '
            'excluded: resource "cpu": 1'
        ),
    ),
    Row(
        name="include usage from non-TAS pods; pod usage",
        levels=(HOST,),
        nodes=(TNode("x3", {HOST: "x3"}, {"pods": 10}),),
        count=9,
        requests={"cpu": 0},
        required=HOST,
        pods=(
            TPod("x3", {}),
            TPod("x3", {}),
        ),
        want_reason='topology "default" allows to fit only 8 out of 9 pod(s)',
    ),
    # a pod with phase "" has no status phase set in Kueue's row (not terminated)
    Row(
        name=(
            "include usage from running non-TAS pods, found free capacity on another node; BestFit"
        ),
        levels=(HOST,),
        nodes=(
            TNode("x3", {HOST: "x3"}, {"cpu": 1000, "memory": 1073741824, "pods": 10}),
            TNode("x5", {HOST: "x5"}, {"cpu": 1000, "memory": 1073741824, "pods": 10}),
        ),
        count=1,
        requests={"cpu": 600},
        required=HOST,
        pods=(TPod("x3", {"cpu": 600}, phase=""),),
        want_levels=(HOST,),
        want=((("x5",), 1),),
    ),
    Row(
        name="no assignment as node is not ready; BestFit",
        levels=(HOST,),
        nodes=(
            TNode(
                "b1-r1-x3",
                {"zone": "zone-a", HOST: "x3"},
                {"cpu": 1000, "memory": 1073741824, "pods": 10},
                ready=False,
            ),
        ),
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        flavor_node_labels={"zone": "zone-a"},
        want_reason="no topology domains at level: kubernetes.io/hostname",
    ),
    Row(
        name="no assignment as node is unschedulable; BestFit",
        levels=(HOST,),
        nodes=(
            TNode(
                "b1-r1-x3",
                {"zone": "zone-a", HOST: "x3"},
                {"cpu": 1000, "memory": 1073741824, "pods": 10},
                unschedulable=True,
            ),
        ),
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        flavor_node_labels={"zone": "zone-a"},
        want_reason="no topology domains at level: kubernetes.io/hostname",
    ),
    Row(
        name="skip node which has untolerated taint; BestFit",
        levels=(HOST,),
        nodes=(
            TNode(
                "x3",
                {"zone": "zone-a", HOST: "x3"},
                {"cpu": 1000, "memory": 1073741824, "pods": 10},
                taints=(("example.com/gpu", "present", "NoSchedule"),),
            ),
        ),
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        flavor_node_labels={"zone": "zone-a"},
        want_reason=(
            'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; '
            'excluded: taint "example.com/gpu=present:NoSchedule": 1'
        ),
    ),
    Row(
        name="detailed failure message with exclusion stats",
        levels=(HOST,),
        nodes=(
            TNode(
                "x1",
                {HOST: "x1"},
                {"cpu": 1000, "pods": 10},
                taints=(("key", "value", "NoSchedule"),),
            ),
            TNode("x2", {HOST: "x2", "zone": "zone-b"}, {"cpu": 1000, "pods": 10}),
            TNode("x3", {HOST: "x3", "zone": "zone-b"}, {"cpu": 2000, "pods": 10}),
            TNode("x4", {HOST: "x4", "zone": "zone-a"}, {"cpu": 100, "pods": 10}),
        ),
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        node_selector={"zone": "zone-a"},
        want_reason=(
            'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 4; '
            'excluded: nodeSelector: 2, resource "cpu": 1, taint "key=value:NoSchedule": 1'
        ),
    ),
    Row(
        name="resource exclusion picks most restrictive resource",
        levels=(HOST,),
        nodes=(
            TNode(
                "dual-shortage",
                {HOST: "dual-shortage"},
                {"cpu": 500, "pods": 10, "example.com/gpu": 0},
            ),
        ),
        count=1,
        requests={"cpu": 1000, "example.com/gpu": 1},
        required=HOST,
        want_reason=(
            'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; '
            'excluded: resource "cpu": 1'
        ),
    ),
    # toleration effect unset in Kueue's row (matches every effect)
    Row(
        name="allow to schedule on node with tolerated taint; BestFit",
        levels=(HOST,),
        nodes=(
            TNode(
                "b1-r1-x3",
                {"zone": "zone-a", HOST: "x3"},
                {"cpu": 1000, "memory": 1073741824, "pods": 10},
                taints=(("example.com/gpu", "present", "NoSchedule"),),
            ),
        ),
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        flavor_node_labels={"zone": "zone-a"},
        tolerations=(("example.com/gpu", "Equal", "present", ""),),
        want_levels=(HOST,),
        want=((("x3",), 1),),
    ),
    Row(
        name=(
            "no assignment as node does not have enough allocatable pods "
            "(.status.allocatable['pods']); BestFit"
        ),
        levels=(HOST,),
        nodes=(TNode("b1-r1-x3", {"zone": "zone-a", HOST: "x3"}, {"cpu": 1000, "pods": 1}),),
        count=1,
        requests={"cpu": 300},
        required=HOST,
        pods=(TPod("b1-r1-x3", {"cpu": 300}),),
        flavor_node_labels={"zone": "zone-a"},
        want_reason=(
            'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; '
            'excluded: resource "pods": 1'
        ),
    ),
    Row(
        name="skip node which doesn't match node selector, missing label; BestFit",
        levels=(HOST,),
        nodes=(
            TNode(
                "x3",
                {"zone": "zone-a", HOST: "x3"},
                {"cpu": 1000, "memory": 1073741824, "pods": 10},
            ),
        ),
        count=1,
        requests={"cpu": 300},
        required=HOST,
        flavor_node_labels={"zone": "zone-a"},
        node_selector={"custom-label-1": "custom-value-1"},
        want_reason=(
            'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; '
            "excluded: nodeSelector: 1"
        ),
    ),
    Row(
        name=(
            "skip node which doesn't match node selector, label exists, value doesn't match; "
            "BestFit"
        ),
        levels=(HOST,),
        nodes=(
            TNode(
                "x3",
                {"zone": "zone-a", HOST: "x3", "custom-label-1": "value-1"},
                {"cpu": 1000, "memory": 1073741824, "pods": 10},
            ),
        ),
        count=1,
        requests={"cpu": 300},
        required=HOST,
        flavor_node_labels={"zone": "zone-a"},
        node_selector={"custom-label-1": "value-2"},
        want_reason=(
            'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; '
            "excluded: nodeSelector: 1"
        ),
    ),
    Row(
        name="allow to schedule on node which matches node; BestFit",
        levels=(HOST,),
        nodes=(
            TNode(
                "b1-r1-x3",
                {"zone": "zone-a", HOST: "x3", "custom-label-1": "value-1"},
                {"cpu": 1000, "memory": 1073741824, "pods": 10},
            ),
            TNode(
                "b1-r1-x5",
                {"zone": "zone-a", HOST: "x5", "custom-label-1": "value-2"},
                {"cpu": 1000, "memory": 1073741824, "pods": 10},
            ),
        ),
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        flavor_node_labels={"zone": "zone-a"},
        node_selector={"custom-label-1": "value-2"},
        want_levels=(HOST,),
        want=((("x5",), 1),),
    ),
    Row(
        name="block required for podset; host required for slices; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 3000, "pods": 10}),
            TNode("b1-r1-x5", {BLOCK: "b1", RACK: "r1", HOST: "x5"}, {"cpu": 3000, "pods": 10}),
            TNode("b1-r1-x1", {BLOCK: "b1", RACK: "r1", HOST: "x1"}, {"cpu": 3000, "pods": 10}),
        ),
        count=6,
        requests={"cpu": 1000},
        required=BLOCK,
        slice_level=HOST,
        slice_size=2,
        want_levels=(HOST,),
        want=(
            (("x1",), 2),
            (("x3",), 2),
            (("x5",), 2),
        ),
    ),
    Row(
        name=(
            "block required for podset; host required for slices; "
            "prioritize more free slice capacity first and then tight fit; BestFit"
        ),
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 6000, "pods": 10}),
            TNode("b1-r1-x5", {BLOCK: "b1", RACK: "r1", HOST: "x5"}, {"cpu": 5000, "pods": 10}),
            TNode("b1-r1-x1", {BLOCK: "b1", RACK: "r1", HOST: "x1"}, {"cpu": 4000, "pods": 10}),
            TNode("b1-r1-x6", {BLOCK: "b1", RACK: "r1", HOST: "x6"}, {"cpu": 2000, "pods": 10}),
        ),
        count=12,
        requests={"cpu": 1000},
        required=BLOCK,
        slice_level=HOST,
        slice_size=2,
        want_levels=(HOST,),
        want=(
            (("x1",), 4),
            (("x3",), 6),
            (("x6",), 2),
        ),
    ),
    Row(
        name=(
            "block required for podset; host required for slices; select domains with tight fit; "
            "BestFit"
        ),
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 3000, "pods": 10}),
            TNode("b1-r1-x5", {BLOCK: "b1", RACK: "r1", HOST: "x5"}, {"cpu": 2000, "pods": 10}),
            TNode("b1-r1-x1", {BLOCK: "b1", RACK: "r1", HOST: "x1"}, {"cpu": 2000, "pods": 10}),
        ),
        count=4,
        requests={"cpu": 1000},
        required=BLOCK,
        slice_level=HOST,
        slice_size=2,
        want_levels=(HOST,),
        want=(
            (("x1",), 2),
            (("x5",), 2),
        ),
    ),
    Row(
        name="block required for podset; rack required for slices; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 1000, "pods": 10}),
            TNode("b1-r1-x5", {BLOCK: "b1", RACK: "r1", HOST: "x5"}, {"cpu": 1000, "pods": 10}),
            TNode("b1-r2-x1", {BLOCK: "b1", RACK: "r2", HOST: "x1"}, {"cpu": 1000, "pods": 10}),
            TNode("b1-r2-x6", {BLOCK: "b1", RACK: "r2", HOST: "x6"}, {"cpu": 1000, "pods": 10}),
            TNode("b1-r2-x2", {BLOCK: "b1", RACK: "r2", HOST: "x2"}, {"cpu": 1000, "pods": 10}),
            TNode("b2-r1-x4", {BLOCK: "b2", RACK: "r1", HOST: "x4"}, {"cpu": 1000, "pods": 10}),
            TNode("b2-r1-x7", {BLOCK: "b2", RACK: "r1", HOST: "x7"}, {"cpu": 1000, "pods": 10}),
        ),
        count=4,
        requests={"cpu": 1000},
        required=BLOCK,
        slice_level=RACK,
        slice_size=2,
        want_levels=(HOST,),
        want=(
            (("x3",), 1),
            (("x5",), 1),
            (("x1",), 1),
            (("x2",), 1),
        ),
    ),
    Row(
        name="block preferred for podset; rack required for slices; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=DEFAULT_NODES,
        count=4,
        requests={"cpu": 1000},
        preferred=BLOCK,
        slice_level=RACK,
        slice_size=2,
        want_levels=(HOST,),
        want=(
            (("x1",), 1),
            (("x5",), 1),
            (("x4",), 2),
        ),
    ),
    Row(
        name="block required for podset; host required for slices; optimize last domain; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 4000, "pods": 10}),
            TNode("b1-r1-x5", {BLOCK: "b1", RACK: "r1", HOST: "x5"}, {"cpu": 3000, "pods": 10}),
            TNode("b1-r1-x1", {BLOCK: "b1", RACK: "r1", HOST: "x1"}, {"cpu": 2000, "pods": 10}),
        ),
        count=6,
        requests={"cpu": 1000},
        required=BLOCK,
        slice_level=HOST,
        slice_size=2,
        want_levels=(HOST,),
        want=(
            (("x1",), 2),
            (("x3",), 4),
        ),
    ),
    Row(
        name=(
            "block preferred for podset; host required for slices; "
            "2 blocks with unbalanced subdomains; BestFit"
        ),
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 3000, "pods": 10}),
            TNode("b1-r1-x5", {BLOCK: "b1", RACK: "r1", HOST: "x5"}, {"cpu": 3000, "pods": 10}),
            TNode("b1-r1-x1", {BLOCK: "b1", RACK: "r1", HOST: "x1"}, {"cpu": 3000, "pods": 10}),
            TNode("b2-r1-x6", {BLOCK: "b2", RACK: "r1", HOST: "x6"}, {"cpu": 6000, "pods": 10}),
        ),
        count=12,
        requests={"cpu": 1000},
        preferred=BLOCK,
        slice_level=HOST,
        slice_size=3,
        want_levels=(HOST,),
        want=(
            (("x1",), 3),
            (("x3",), 3),
            (("x6",), 6),
        ),
    ),
    Row(
        name=(
            "block required for podset; rack required for slices; podset fits in a block, "
            "but slices do not fit in racks"
        ),
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 2000, "pods": 10}),
            TNode("b1-r2-x5", {BLOCK: "b1", RACK: "r2", HOST: "x5"}, {"cpu": 2000, "pods": 10}),
            TNode("b1-r3-x1", {BLOCK: "b1", RACK: "r3", HOST: "x1"}, {"cpu": 2000, "pods": 10}),
        ),
        count=6,
        requests={"cpu": 1000},
        required=BLOCK,
        slice_level=RACK,
        slice_size=3,
        want_reason='topology "default" doesn\'t allow to fit any of 2 slice(s)',
    ),
    Row(
        name=(
            "block required for podset; rack required for slices; "
            "only 1 out of 2 slices fit the topology"
        ),
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 3000, "pods": 10}),
            TNode("b1-r2-x5", {BLOCK: "b1", RACK: "r2", HOST: "x5"}, {"cpu": 1000, "pods": 10}),
            TNode("b1-r3-x1", {BLOCK: "b1", RACK: "r3", HOST: "x1"}, {"cpu": 1000, "pods": 10}),
            TNode("b1-r4-x6", {BLOCK: "b1", RACK: "r4", HOST: "x6"}, {"cpu": 1000, "pods": 10}),
        ),
        count=6,
        requests={"cpu": 1000},
        required=BLOCK,
        slice_level=RACK,
        slice_size=3,
        want_reason='topology "default" allows to fit only 1 out of 2 slice(s)',
    ),
    Row(
        name=(
            "block required for podset; rack required for slices; podset fits in both blocks, "
            "but slices fit in only one block"
        ),
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 2000, "pods": 10}),
            TNode("b1-r2-x5", {BLOCK: "b1", RACK: "r2", HOST: "x5"}, {"cpu": 2000, "pods": 10}),
            TNode("b1-r3-x1", {BLOCK: "b1", RACK: "r3", HOST: "x1"}, {"cpu": 2000, "pods": 10}),
            TNode("b2-r4-x6", {BLOCK: "b2", RACK: "r4", HOST: "x6"}, {"cpu": 3000, "pods": 10}),
            TNode("b2-r5-x2", {BLOCK: "b2", RACK: "r5", HOST: "x2"}, {"cpu": 3000, "pods": 10}),
        ),
        count=6,
        requests={"cpu": 1000},
        required=BLOCK,
        slice_level=RACK,
        slice_size=3,
        want_levels=(HOST,),
        want=(
            (("x6",), 3),
            (("x2",), 3),
        ),
    ),
    Row(
        name="slice required topology level cannot be above the main required topology level",
        levels=(BLOCK, RACK, HOST),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        slice_level=BLOCK,
        slice_size=1,
        want_reason=(
            "podset slice topology cloud.com/topology-block is above the podset topology "
            "kubernetes.io/hostname"
        ),
    ),
    Row(
        name="slice size is required when slice topology is requested",
        levels=(BLOCK, RACK, HOST),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 1000},
        required=BLOCK,
        slice_level=HOST,
        want_reason="slice topology requested, but slice size not provided",
    ),
    Row(
        name="cannot request not existing slice topology",
        levels=(BLOCK, RACK, HOST),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 1000},
        required=BLOCK,
        slice_level="not-existing-topology-level",
        slice_size=1,
        want_reason="no requested topology level for slices: not-existing-topology-level",
    ),
    Row(
        name="no topology for podset; host required for slices; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x3", {BLOCK: "b1", RACK: "r1", HOST: "x3"}, {"cpu": 3000, "pods": 10}),
            TNode("b1-r1-x5", {BLOCK: "b1", RACK: "r1", HOST: "x5"}, {"cpu": 3000, "pods": 10}),
            TNode("b1-r1-x1", {BLOCK: "b1", RACK: "r1", HOST: "x1"}, {"cpu": 3000, "pods": 10}),
        ),
        count=6,
        requests={"cpu": 1000},
        slice_level=HOST,
        slice_size=2,
        want_levels=(HOST,),
        want=(
            (("x1",), 2),
            (("x3",), 2),
            (("x5",), 2),
        ),
    ),
    Row(
        name="no topology for podset; host required for slices; multiple blocks; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=SCATTERED_NODES,
        count=6,
        requests={"cpu": 1000},
        slice_level=HOST,
        slice_size=2,
        want_levels=(HOST,),
        want=(
            (("x3",), 4),
            (("x6",), 2),
        ),
    ),
    Row(
        name="no topology for podset; rack required for slices; multiple blocks; BestFit",
        levels=(BLOCK, RACK, HOST),
        nodes=DEFAULT_NODES,
        count=4,
        requests={"cpu": 1000},
        slice_level=RACK,
        slice_size=2,
        want_levels=(HOST,),
        want=(
            (("x1",), 1),
            (("x5",), 1),
            (("x4",), 2),
        ),
    ),
    # only the single-layer slice fields are set (no PodsetSliceRequiredTopologyConstraints)
    Row(
        name="multi-layer topology: no feature gate; additional layers ignored",
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("b1-r1-x1", {BLOCK: "b1", RACK: "r1", HOST: "x1"}, {"cpu": 1000, "pods": 10}),
            TNode("b1-r1-x2", {BLOCK: "b1", RACK: "r1", HOST: "x2"}, {"cpu": 4000, "pods": 10}),
            TNode("b1-r2-x3", {BLOCK: "b1", RACK: "r2", HOST: "x3"}, {"cpu": 3000, "pods": 10}),
            TNode("b1-r2-x4", {BLOCK: "b1", RACK: "r2", HOST: "x4"}, {"cpu": 4000, "pods": 10}),
        ),
        count=8,
        requests={"cpu": 1000},
        required=BLOCK,
        slice_level=RACK,
        slice_size=4,
        want_levels=(HOST,),
        want=(
            (("x1",), 1),
            (("x2",), 3),
            (("x3",), 3),
            (("x4",), 1),
        ),
    ),
    Row(
        name="non-hostname-leaf topology: nil aggregatedDomainUsages preserves per-flavor behavior",
        levels=(BLOCK, RACK),
        nodes=DEFAULT_NODES,
        count=1,
        requests={"cpu": 1000},
        required=RACK,
        want_levels=(BLOCK, RACK),
        want=((("b1", "r1"), 1),),
    ),
    # gate TASBalancedPlacement=false equals today's default
    Row(
        name="stable tie break on identical nodes: TASBalancedPlacement disabled",
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("x2", {BLOCK: "b1", RACK: "r1", HOST: "x2"}, {"cpu": 1000, "pods": 10}),
            TNode("x1", {BLOCK: "b1", RACK: "r1", HOST: "x1"}, {"cpu": 1000, "pods": 10}),
        ),
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        want_levels=(HOST,),
        want=((("x1",), 1),),
    ),
    # gate TASBalancedPlacement=false equals today's default
    Row(
        name="stable tie break on identical nodes: reversed order, TASBalancedPlacement disabled",
        levels=(BLOCK, RACK, HOST),
        nodes=(
            TNode("x1", {BLOCK: "b1", RACK: "r1", HOST: "x1"}, {"cpu": 1000, "pods": 10}),
            TNode("x2", {BLOCK: "b1", RACK: "r1", HOST: "x2"}, {"cpu": 1000, "pods": 10}),
        ),
        count=1,
        requests={"cpu": 1000},
        required=HOST,
        want_levels=(HOST,),
        want=((("x1",), 1),),
    ),
)

LEFT_OUT: dict[str, str] = {
    "node replacement skipped for single-Pod-owned workload; gate on": (
        "workload with unhealthy node (node-failure replacement); "
        "gate SkipReassignmentForPodOwnedWorkloads=true equals today's default"
    ),
    "node replaced for Job-owned workload; gate on": (
        "workload with unhealthy node (node-failure replacement); "
        "gate SkipReassignmentForPodOwnedWorkloads=true equals today's default"
    ),
    "node replaced for pod-group workload with two Pod owners; gate on": (
        "workload with unhealthy node (node-failure replacement); "
        "gate SkipReassignmentForPodOwnedWorkloads=true equals today's default"
    ),
    "node replaced for size-1 pod-group workload (is-group-workload annotation); gate on": (
        "workload with unhealthy node (node-failure replacement); "
        "gate SkipReassignmentForPodOwnedWorkloads=true equals today's default"
    ),
    "node replaced for single-Pod-owned workload; gate off": (
        "gate SkipReassignmentForPodOwnedWorkloads=false (default true); "
        "workload with unhealthy node (node-failure replacement)"
    ),
    "multiple PodSets account assumed pod usage against allocatable pods; BestFit": "2 pod sets",
    "balanced placement; basic": "gate TASBalancedPlacement=true (default false)",
    "balanced placement; select optmial set of domains": (
        "gate TASBalancedPlacement=true (default false)"
    ),
    "balanced placement; select optmial set of domains; with slices": (
        "gate TASBalancedPlacement=true (default false)"
    ),
    "balanced placement; select correct block": "gate TASBalancedPlacement=true (default false)",
    "balanced placement; cannot chose domains from different blocks": (
        "gate TASBalancedPlacement=true (default false)"
    ),
    ("balanced placement; select correct block; prefer blocks with single rack; with slices"): (
        "gate TASBalancedPlacement=true (default false)"
    ),
    "balanced placement; four level topology; slice two levels below balanced level": (
        "gate TASBalancedPlacement=true (default false)"
    ),
    "balanced placement; four level topology; slice one level below balanced level": (
        "gate TASBalancedPlacement=true (default false)"
    ),
    (
        "balanced placement; four level topology; balance on rack level; "
        "slice not on the lowest level"
    ): ("gate TASBalancedPlacement=true (default false)"),
    "balanced placement; three level topology; balance on the same level as slice": (
        "gate TASBalancedPlacement=true (default false)"
    ),
    "balanced placement; three level topology; balance on the lowest level": (
        "gate TASBalancedPlacement=true (default false)"
    ),
    "balanced placement; leader worker set": (
        "gate TASBalancedPlacement=true (default false); 2 pod sets; "
        "podSetGroupName (leader/workers)"
    ),
    "balanced placement; prioritize (using entropy) balanced domains; second rack wins": (
        "gate TASBalancedPlacement=true (default false)"
    ),
    "balanced placement; prioritize (using entropy) balanced domains; first rack wins": (
        "gate TASBalancedPlacement=true (default false)"
    ),
    "balanced placement; two level topology; balance on the highest level": (
        "gate TASBalancedPlacement=true (default false)"
    ),
    "balanced placement; select correct block taking into account pruning": (
        "gate TASBalancedPlacement=true (default false)"
    ),
    "balanced placement; should not prune domain": (
        "gate TASBalancedPlacement=true (default false); 2 pod sets; "
        "podSetGroupName (leader/workers)"
    ),
    "balanced placement; leader worker set does not reserve leader space on every node": (
        "gate TASBalancedPlacement=true (default false); 2 pod sets; "
        "podSetGroupName (leader/workers)"
    ),
    "balanced placement; fallback to BestFit when leader worker set cannot meet threshold": (
        "gate TASBalancedPlacement=true (default false); 2 pod sets; "
        "podSetGroupName (leader/workers)"
    ),
    "find topology assignment for two podsets with overlapping domain": "2 pod sets",
    "find topology assignment for two podsets with the same group": (
        "2 pod sets; podSetGroupName (leader/workers)"
    ),
    (
        "find topology assignment for grouped podsets preserves worker capacity when placing leader"
    ): ("2 pod sets; podSetGroupName (leader/workers)"),
    (
        "find topology assignment for sliced grouped podsets preserves worker capacity when "
        "placing leader"
    ): ("2 pod sets; podSetGroupName (leader/workers)"),
    ("find topology assignment for preferred grouped podsets preserves capacity across domains"): (
        "2 pod sets; podSetGroupName (leader/workers)"
    ),
    (
        "find topology assignment for unconstrained grouped podsets spreads leader and "
        "worker across domains with TASProfileMixed"
    ): (
        "2 pod sets; podSetGroupName (leader/workers); "
        "gate TASProfileMixed=true equals today's default"
    ),
    "find topology assignment for grouped podsets preserves leader below the slice level": (
        "2 pod sets; podSetGroupName (leader/workers)"
    ),
    (
        "find topology assignment for two podsets with the same group with domains that can "
        "tightly fit leader and workers"
    ): ("2 pod sets; podSetGroupName (leader/workers)"),
    (
        "find topology assignment for grouped podsets skips domain where only workers fit "
        "without leader"
    ): ("2 pod sets; podSetGroupName (leader/workers)"),
    (
        "find topology assignment for grouped podsets skips domain where mixed-size workers "
        "only fit without leader"
    ): ("2 pod sets; podSetGroupName (leader/workers)"),
    (
        "find topology assignment for grouped podsets keeps tight domain when leader and "
        "workers fit together"
    ): ("2 pod sets; podSetGroupName (leader/workers)"),
    "find topology assignment for two podsets with the same group - no fit": (
        "2 pod sets; podSetGroupName (leader/workers)"
    ),
    (
        "find topology assignment for two podsets with the same group - optimizes domain for "
        "both leader and workers"
    ): ("2 pod sets; podSetGroupName (leader/workers)"),
    "BestFit: podset group workers spread across hosts": (
        "2 pod sets; podSetGroupName (leader/workers)"
    ),
    (
        "find topology assignment for two podsets with the same group - leader does not fit "
        "anywhere"
    ): ("2 pod sets; podSetGroupName (leader/workers)"),
    "find topology assignment for two podsets with the same group - multiple hosts": (
        "2 pod sets; podSetGroupName (leader/workers)"
    ),
    (
        "find topology assignment for two podsets with the same group requesting same "
        "resources and nodes in the same rack"
    ): ("2 pod sets; podSetGroupName (leader/workers)"),
    "multiple podsets: rack required for both, different resource requests; BestFit": "2 pod sets",
    "multiple podsets: block required for one, unconstrained for another; TASProfileMixed": (
        "2 pod sets; gate TASProfileMixed=true equals today's default"
    ),
    "temporary state cleanup prevents leakage across PodSets": "2 pod sets",
    "elastic workload scale up: delta-only placement preserves previous assignment": (
        "gate ElasticJobsViaWorkloadSlicesWithTAS=true (default false); "
        "previousAssignment (elastic workload); "
        "gate ElasticJobsViaWorkloadSlices=true equals today's default"
    ),
    "elastic workload scale up: spread across multiple nodes preserved": (
        "gate ElasticJobsViaWorkloadSlicesWithTAS=true (default false); "
        "previousAssignment (elastic workload); "
        "gate ElasticJobsViaWorkloadSlices=true equals today's default"
    ),
    "elastic workload scale down: truncates assignment": (
        "gate ElasticJobsViaWorkloadSlicesWithTAS=true (default false); "
        "previousAssignment (elastic workload); "
        "gate ElasticJobsViaWorkloadSlices=true equals today's default"
    ),
    "elastic workload same count: reuses previous assignment exactly": (
        "gate ElasticJobsViaWorkloadSlicesWithTAS=true (default false); "
        "previousAssignment (elastic workload); "
        "gate ElasticJobsViaWorkloadSlices=true equals today's default"
    ),
    "elastic workload scale down with leader: truncates workers, reuses leader": (
        "gate ElasticJobsViaWorkloadSlicesWithTAS=true (default false); 2 pod sets; "
        "podSetGroupName (leader/workers); previousAssignment (elastic workload); "
        "gate ElasticJobsViaWorkloadSlices=true equals today's default"
    ),
    "elastic workload same count with leader: reuses both assignments exactly": (
        "gate ElasticJobsViaWorkloadSlicesWithTAS=true (default false); 2 pod sets; "
        "podSetGroupName (leader/workers); previousAssignment (elastic workload); "
        "gate ElasticJobsViaWorkloadSlices=true equals today's default"
    ),
    ("elastic workload scale up with leader: places delta workers, preserves leader assignment"): (
        "gate ElasticJobsViaWorkloadSlicesWithTAS=true (default false); 2 pod sets; "
        "podSetGroupName (leader/workers); previousAssignment (elastic workload); "
        "gate ElasticJobsViaWorkloadSlices=true equals today's default"
    ),
    (
        "elastic workload scale up with leader: stale leader assignment falls back to fresh "
        "placement"
    ): (
        "gate ElasticJobsViaWorkloadSlicesWithTAS=true (default false); 2 pod sets; "
        "podSetGroupName (leader/workers); previousAssignment (elastic workload); "
        "gate ElasticJobsViaWorkloadSlices=true equals today's default"
    ),
    (
        "multi-layer topology: block required; rack slices of 4; host slices of 2; "
        "TASMultiLayerTopology"
    ): ("multi-layer slice constraints; gate TASMultiLayerTopology=true equals today's default"),
    (
        "multi-layer topology: mimic a real-world GB200 cluster, "
        "with NVL36 arch (2GPUs/node); dc required; aizone slices of 48; rack slices of 16; "
        "TASMultiLayerTopology"
    ): ("multi-layer slice constraints; gate TASMultiLayerTopology=true equals today's default"),
    "multi-layer topology: host slice rounding makes rack slice impossible": (
        "multi-layer slice constraints; gate TASMultiLayerTopology=true equals today's default"
    ),
    "multi-layer topology: small host kills rack slices despite enough total capacity": (
        "multi-layer slice constraints; gate TASMultiLayerTopology=true equals today's default"
    ),
    "multi-layer topology: enough hostname slices but not enough rack slices": (
        "multi-layer slice constraints; gate TASMultiLayerTopology=true equals today's default"
    ),
    "multi-layer topology: 3-layer negative case with small hosts cascading up": (
        "multi-layer slice constraints; gate TASMultiLayerTopology=true equals today's default"
    ),
    "with preferred affinity": (
        "gate TASRespectNodeAffinityPreferred=true (default false); node affinity"
    ),
    "with required and preferred affinity": (
        "gate TASRespectNodeAffinityPreferred=true (default false); node affinity"
    ),
    "with multiple preferred affinities": (
        "gate TASRespectNodeAffinityPreferred=true (default false); node affinity"
    ),
    "affinity takes precedence over best fit": (
        "gate TASRespectNodeAffinityPreferred=true (default false); node affinity"
    ),
    (
        "affinity ordering with required topology level chooses secondary domain if primary "
        "is too small"
    ): ("gate TASRespectNodeAffinityPreferred=true (default false); node affinity"),
    (
        "affinity ordering with preferred inner topology level bubbles up to parent level to "
        "avoid splitting across parent domains"
    ): ("gate TASRespectNodeAffinityPreferred=true (default false); node affinity"),
    "flat topology, preferred mode, size 5 pods x 1": (
        "gate TASRespectNodeAffinityPreferred=true (default false); node affinity"
    ),
    "flat topology, unconstrained mode, size 5 pods x 1": (
        "gate TASRespectNodeAffinityPreferred=true (default false); node affinity; "
        "gate TASProfileMixed=true equals today's default"
    ),
    "flat topology, preferred mode, size 2 pods x 2": (
        "gate TASRespectNodeAffinityPreferred=true (default false); node affinity"
    ),
    "flat topology, unconstrained mode, size 2 pods x 2": (
        "gate TASRespectNodeAffinityPreferred=true (default false); node affinity; "
        "gate TASProfileMixed=true equals today's default"
    ),
    (
        "LWS with leader and workers; preferred affinity on workers; "
        "leader cannot fit on preferred zone"
    ): (
        "gate TASRespectNodeAffinityPreferred=true (default false); 2 pod sets; "
        "podSetGroupName (leader/workers); node affinity"
    ),
    "optimize the last domain for LWS using BestFit": (
        "2 pod sets; podSetGroupName (leader/workers)"
    ),
    "sibling-flavor usage on the shared hostname reduces remaining capacity": "priorFlavorUsage",
    (
        "non-hostname-leaf topology: prior c.usage must be applied even when "
        "aggregatedDomainUsages is non-nil empty"
    ): ("priorOwnUsage"),
    "stable tie break on identical nodes: TASBalancedPlacement enabled": (
        "gate TASBalancedPlacement=true (default false); "
        "same expected answer as the 'TASBalancedPlacement disabled' row, which is in ROWS"
    ),
    "stable tie break on identical nodes: reversed order, TASBalancedPlacement enabled": (
        "gate TASBalancedPlacement=true (default false); "
        "same expected answer as the 'reversed order, TASBalancedPlacement disabled' row, "
        "which is in ROWS"
    ),
}
