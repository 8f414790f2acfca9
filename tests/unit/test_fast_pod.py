"""The fast Pod decoder gives the general decoder's pod, or leaves the pod to it: on
generated pods, valid and not (odd types, bad quantities and times, init containers,
constraints), whenever ``fast_pod`` answers, ``nodes.pod`` answers the same and raises
nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.errors import ManifestError
from gangpreempt.manifests import nodes
from gangpreempt.manifests.fastpod import fast_pod
from gangpreempt.manifests.fields import Fields, Where

pytestmark = pytest.mark.unit
SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])

odd = st.sampled_from([None, True, 3, -1, 2.5, "", "x", [], {}, ["a"], {"a": 1}])
quantity = st.one_of(
    st.sampled_from(["1", "500m", "2Gi", "1e3", "0", "-1", "lots", "1.5", "", "0x10"]),
    st.integers(-2, 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    odd,
)
resource = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods", "example.com/x"])
amounts = st.one_of(st.dictionaries(resource, quantity, max_size=3), odd)
time_value = st.one_of(
    st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:00:00+02:00", "yesterday", ""]),
    st.just(datetime(2026, 1, 1, tzinfo=UTC)),
    odd,
)
texts = st.one_of(
    st.dictionaries(
        st.sampled_from(["app", "scheduling.x-k8s.io/pod-group", "kueue.x-k8s.io/workload"]),
        st.one_of(st.sampled_from(["a", "g1", ""]), odd),
        max_size=3,
    ),
    odd,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


@st.composite
def pods(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    container = st.fixed_dictionaries(
        {},
        optional={
            "name": st.just("c"),
            "resources": st.one_of(
                st.fixed_dictionaries({}, optional={"requests": amounts, "limits": amounts}),
                odd,
            ),
        },
    )
    meta = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "uid": maybe(st.one_of(st.just("u1"), odd)),
                "resourceVersion": st.one_of(st.just("7"), st.just(7), odd),
                "labels": texts,
                "annotations": texts,
                "deletionTimestamp": time_value,
            },
        )
    )
    spec = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "containers": st.one_of(st.lists(st.one_of(container, odd), max_size=3), odd),
                "initContainers": st.one_of(st.lists(container, max_size=1), odd),
                "overhead": amounts,
                "nodeName": st.one_of(st.sampled_from(["n1", ""]), odd),
                "priority": st.one_of(st.integers(-(2**32), 2**32), st.just("5"), odd),
                "priorityClassName": st.one_of(st.just("high"), odd),
                "preemptionPolicy": st.one_of(st.sampled_from(["Never", ""]), odd),
                "nodeSelector": texts,
                "tolerations": st.one_of(
                    st.lists(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "key": st.one_of(st.just("k"), odd),
                                "operator": st.sampled_from(["Equal", "Exists", "Bad", ""]),
                                "effect": st.sampled_from(["NoSchedule", ""]),
                                "tolerationSeconds": st.one_of(st.just(30), odd),
                            },
                        ),
                        max_size=2,
                    ),
                    odd,
                ),
            },
        )
    )
    status = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "phase": st.one_of(st.sampled_from(["Running", "Succeeded", "Pending"]), odd),
                "startTime": time_value,
                "nominatedNodeName": st.one_of(st.just("n2"), odd),
                "conditions": st.one_of(
                    st.lists(
                        st.one_of(
                            st.fixed_dictionaries(
                                {
                                    "type": st.sampled_from(["PodScheduled", "Ready"]),
                                    "status": st.sampled_from(["True", "False"]),
                                },
                                optional={"lastTransitionTime": time_value},
                            ),
                            odd,
                        ),
                        max_size=2,
                    ),
                    odd,
                ),
            },
        )
    )
    return meta, spec, status


@st.composite
def plausible_pods(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Pods as clusters hold them, now and then with one thing wrong."""
    good = st.sampled_from(["1", "250m", "2Gi", "1e3", "3", "0"])
    values = st.one_of(good, good, good, st.integers(0, 64), st.sampled_from(["-1", "lots"]))
    plain = st.dictionaries(resource, values, max_size=3)
    containers = st.lists(
        st.fixed_dictionaries(
            {"name": st.just("c")},
            optional={
                "resources": st.fixed_dictionaries(
                    {}, optional={"requests": plain, "limits": plain}
                )
            },
        ),
        min_size=1,
        max_size=3,
    )
    when = st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-02T03:04:05+01:00", "soon"])
    meta = {
        "uid": "u1",
        "resourceVersion": draw(st.sampled_from(["7", 7])),
        "labels": draw(
            st.dictionaries(
                st.sampled_from(["app", "scheduling.x-k8s.io/pod-group"]),
                st.sampled_from(["a", "g1"]),
                max_size=2,
            )
        ),
    }
    if draw(st.integers(0, 5)) == 0:
        meta["deletionTimestamp"] = draw(when)
    spec: dict[str, Any] = {
        "containers": draw(containers),
        "priority": draw(st.sampled_from([0, 100, 2**31, True])),
    }
    if draw(st.booleans()):
        spec["nodeName"] = "n1"
    status: dict[str, Any] = {
        "phase": draw(st.sampled_from(["Running", "Pending", "Failed"])),
        "startTime": draw(when),
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": draw(when)}
        ],
    }
    if draw(st.booleans()):  # kube-scheduler's mark on a victim (or a malformed one)
        status["conditions"].insert(
            draw(st.integers(0, 1)),
            {
                "type": "DisruptionTarget",
                "status": draw(st.sampled_from(["True", "False"])),
                "reason": draw(st.sampled_from(["PreemptionByScheduler", "", 5])),
            },
        )
    return meta, spec, status


def general(meta: dict[str, Any], spec: dict[str, Any], status: dict[str, Any]) -> Any:
    where = Where("pods.yaml", 1)
    return nodes.pod(
        "ns",
        "p",
        Fields(where, meta, "metadata"),
        Fields(where, spec, "spec"),
        Fields(where, status, "status"),
    )


@SETTINGS
@given(st.one_of(pods(), plausible_pods()))
def test_the_fast_decoder_gives_the_general_decoders_pod(
    case: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
) -> None:
    meta, spec, status = case
    fast = fast_pod("ns", "p", meta, spec, status)
    if fast is None:
        return
    try:
        expected = general(meta, spec, status)
    except ManifestError as exc:
        raise AssertionError(f"the fast decoder read a pod the general one rejects: {exc}") from exc
    assert fast == expected


def test_the_fast_decoder_reads_the_common_pod() -> None:
    """The comparison above means something only if the fast path answers for the pods
    clusters are made of."""
    meta = {"uid": "u", "resourceVersion": "9", "labels": {"scheduling.x-k8s.io/pod-group": "g"}}
    spec = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
        "nodeName": "n1",
        "priority": 100,
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
    }
    status = {
        "phase": "Running",
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ],
    }
    fast = fast_pod("ns", "p", meta, spec, status)
    assert fast is not None
    assert fast == general(meta, spec, status)
    assert fast.requests == {"cpu": 2000, "memory": 2**30}
    assert fast.group == "ns/g"
