"""Edges that do not fall over (issue 25): ingest as an OS process on a real nats-server,
fed quantities that parse but do not fit (``20Ei``, ``9e25``, 5,000 digits), a pod with
a megabyte of labels and an object too large for NATS, from the Kubernetes API and from
files. Each is refused or dead-lettered with its reason; ingest keeps running and still
publishes the next ordinary object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats.js.errors
import pytest
import yaml
from nats.aio.client import Client
from nats.aio.msg import Msg

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.model import kinds
from tests.e2e.harness import Services, read_stream, state_has
from tests.kube.apiserver import ApiServer
from tests.waiting import eventually, until

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.timeout(120)]

QUOTA_FIELD = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
BAD_QUOTAS = {"exbi": "20Ei", "exponent": "9e25", "digits": "9" * 5000}
MEGABYTE = 2**20


def flavor(version: str = "v1beta1") -> dict[str, Any]:
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "ResourceFlavor",
        "metadata": {"name": "default"},
    }


def cluster_queue(name: str, nominal: str, version: str = "v1beta1") -> dict[str, Any]:
    resource = {"name": "cpu", "nominalQuota": nominal}
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "default", "resources": [resource]}],
                }
            ],
        },
    }


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels or {}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def labelled() -> dict[str, Any]:
    """A pod with a megabyte of labels (one label: the API server's validation would
    refuse it; a file, or a server that does not validate, holds it)."""
    return pod("labelled", {"app": "train", "huge": "x" * MEGABYTE})


def oversized() -> dict[str, Any]:
    """A pod whose model is larger than NATS's max_payload (1 MB): a node selector
    with a value of more than a megabyte (selectors are kept whole)."""
    return pod("oversized", {"app": "big"}, nodeSelector={"zone": "z" * (MEGABYTE + 4096)})


async def in_state(nc: Client, topology: Topology, kind: str, key: str) -> bool:
    try:
        await nc.jetstream().get_last_msg(topology.state_stream, topology.state_subject(kind, key))
    except nats.js.errors.NotFoundError:
        return False
    return True


async def state_object(nc: Client, topology: Topology, kind: str, key: str) -> Any:
    msg = await nc.jetstream().get_last_msg(
        topology.state_stream, topology.state_subject(kind, key)
    )
    assert msg.data is not None
    event = events.decode(msg.data)
    assert isinstance(event, events.ObjectUpserted)
    return kinds.decode_object(kind, event.body)


async def dead_letter_of(nc: Client, topology: Topology, ref: str) -> Msg:
    """The dead letter ingest sent for ``ref`` (Kind/key), once it is there."""

    async def look() -> Msg | None:
        letters = await read_stream(nc, topology.dlq_stream, topology.dlq_subject("ingest"))
        return next(
            (m for m in letters if (m.headers or {}).get("gp-dlq-id", "").startswith(f"{ref}@")),
            None,
        )

    letter: Msg = await eventually(look, 30, f"the dead letter of {ref}")
    return letter


def assert_oversized_letter(letter: Msg, topology: Topology, kind: str, key: str) -> None:
    headers = letter.headers or {}
    reason = headers["gp-dlq-reason"]
    assert reason.startswith("oversized: ")
    assert "exceed the server's max_payload" in reason
    assert headers["gp-dlq-type"] == "ObjectUpserted"
    assert headers["gp-dlq-subject"] == topology.state_subject(kind, key)
    assert headers["gp-service"] == "ingest"
    assert 0 < len(letter.data) <= MEGABYTE  # the body, cut to fit


async def test_ingest_of_the_api_goes_on_past_objects_that_do_not_fit(
    nc: Client,
    topology: Topology,
    services: Services,
    apiserver: ApiServer,
    tmp_path: Path,
) -> None:
    apiserver.put(flavor())
    for name, nominal in BAD_QUOTAS.items():
        apiserver.put(cluster_queue(name, nominal))
    apiserver.put(cluster_queue("before", "8"))
    apiserver.put(labelled())
    apiserver.put(oversized())
    services.start(
        "ingest",
        extra={
            "GANGPREEMPT_SOURCE": "kubernetes",
            "GANGPREEMPT_KUBECONFIG": apiserver.kubeconfig(str(tmp_path / "kubeconfig")),
            "GANGPREEMPT_RELIST_INTERVAL": "300",
        },
    )
    services.wait_started()
    await state_has(nc, topology, "ClusterQueue", "before")

    # The quotas that do not fit: each refused by name, none on STATE.
    refused = [f"kubernetes: ClusterQueue {name}: {QUOTA_FIELD}: " for name in BAD_QUOTAS]
    await until(lambda: all(r in services.log("ingest") for r in refused), 30, "the quotas refused")
    log = services.log("ingest")
    assert "beyond the largest quantity gangpreempt computes with" in log
    assert "a number of 5000 digits is out of range" in log
    for name in BAD_QUOTAS:
        assert not await in_state(nc, topology, "ClusterQueue", name)

    # The megabyte of labels: left out, the pod published with the others.
    await state_has(nc, topology, "Pod", "team-a/labelled")
    published = await state_object(nc, topology, "Pod", "team-a/labelled")
    assert published.labels == {"app": "train"}
    await until(
        lambda: "longer than Kubernetes allows left out" in services.log("ingest"),
        30,
        "the labels left out said in the log",
    )

    # The object too large for NATS: dead-lettered with its reason, not on STATE.
    letter = await dead_letter_of(nc, topology, "Pod/team-a/oversized")
    assert_oversized_letter(letter, topology, "Pod", "team-a/oversized")
    assert not await in_state(nc, topology, "Pod", "team-a/oversized")

    # ... and ingest goes on: the next ordinary objects are published.
    apiserver.put(cluster_queue("after", "8"))
    apiserver.put(pod("after"))
    await state_has(nc, topology, "ClusterQueue", "after")
    await state_has(nc, topology, "Pod", "team-a/after")
    assert services.alive()["ingest"]
    assert "Traceback" not in services.log("ingest")


def write(path: Path, *docs: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


async def test_ingest_of_files_goes_on_past_objects_that_do_not_fit(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    """The sim cluster (the default): it publishes the scenario, dead-letters what is
    too large to send; a file changed later with a quota that does not fit is refused
    (the previous state kept), and published once it is fixed."""
    v2 = "v1beta2"
    write(scenario_dir / "cluster.yaml", flavor(v2), cluster_queue("before", "8", v2))
    write(scenario_dir / "pods.yaml", labelled(), oversized(), pod("ordinary"))
    services.start("ingest")
    services.wait_started()
    await state_has(nc, topology, "ClusterQueue", "before")
    await state_has(nc, topology, "Pod", "team-a/ordinary")
    published = await state_object(nc, topology, "Pod", "team-a/labelled")
    assert published.labels == {"app": "train"}

    letter = await dead_letter_of(nc, topology, "Pod/team-a/oversized")
    assert_oversized_letter(letter, topology, "Pod", "team-a/oversized")
    assert not await in_state(nc, topology, "Pod", "team-a/oversized")
    await until(
        lambda: "starting state complete" in services.log("ingest"),
        30,
        "the starting state marked complete past the dead letter",
    )

    for name, nominal in BAD_QUOTAS.items():
        late = scenario_dir / f"late-{name}.yaml"
        write(late, cluster_queue(name, nominal, v2))
        refused = f"{late}: document 1 (ClusterQueue {name}): {QUOTA_FIELD}: "
        await until(
            lambda: refused in services.log("ingest"),  # noqa: B023 (awaited here)
            30,
            f"ingest to refuse {late.name}",
        )
        log = services.log("ingest")
        assert "manifests rejected; keeping the previous state" in log
        lines = late.read_text().splitlines()
        line = next(i for i, text in enumerate(lines, 1) if "nominalQuota" in text)
        assert f"(line {line})" in log
        assert services.alive()["ingest"]
        # Fixed, it is published.
        write(late, cluster_queue(name, "8", v2))
        await state_has(nc, topology, "ClusterQueue", name)
    assert "Traceback" not in services.log("ingest")
