"""tools/compose-kubeconfigs.sh against the real kube-apiserver (v1.37): the two
kubeconfigs docker compose mounts hold each only its own ServiceAccount token (none of
the operator's credentials); ingest's can list and watch and write nothing, the
actuator's can evict a pod (its RBAC) and nothing in kube-system (its admission policy)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tests.peers.control_plane import ControlPlane

pytestmark = [pytest.mark.peers, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # kubectl comes with the dev extra


def kubectl(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "kubectl"), "--kubeconfig", str(config), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_compose_gets_a_read_only_ingest_and_a_narrow_actuator(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "k8s").symlink_to(ROOT / "deploy" / "k8s")
    env = {
        **os.environ,
        "KUBECONFIG": str(control_plane.kubeconfig),
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "DURATION": "1h",
    }
    run = subprocess.run(
        ["sh", str(ROOT / "tools" / "compose-kubeconfigs.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    ingest = tmp_path / "deploy" / "kubeconfig-ingest"
    actuator = tmp_path / "deploy" / "kubeconfig-actuator"
    for path, account in ((ingest, "gangpreempt-ingest"), (actuator, "gangpreempt-actuator")):
        config = yaml.safe_load(path.read_text())
        assert [u["name"] for u in config["users"]] == [account]
        assert set(config["users"][0]["user"]) == {"token"}
        assert oct(path.stat().st_mode & 0o777) == "0o600"
    ns = f"compose-{uuid.uuid4().hex[:6]}"
    admin = control_plane.kubeconfig
    assert kubectl(admin, "create", "namespace", ns).returncode == 0
    try:
        # Each token is its ServiceAccount's; ingest's reads (a list: nothing in the audit
        # log but reads, which tests/peers/test_kube_live.py checks of ingest's identity).
        for path, account in ((ingest, "gangpreempt-ingest"), (actuator, "gangpreempt-actuator")):
            token = yaml.safe_load(path.read_text())["users"][0]["user"]["token"]
            claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
            assert claims["sub"] == f"system:serviceaccount:gangpreempt:{account}"
        assert kubectl(ingest, "get", "pods", "-n", ns).returncode == 0

        def can(account: str, *what: str) -> str:
            """The API server's answer for the account, asked by the admin (so that
            ingest's identity makes no call but reads)."""
            user = f"system:serviceaccount:gangpreempt:{account}"
            answer = kubectl(admin, "auth", "can-i", *what, "-n", ns, f"--as={user}")
            return answer.stdout.strip()

        assert can("gangpreempt-ingest", "watch", "pods") == "yes"
        for what in (
            ("create", "pods"),
            ("delete", "pods"),
            ("patch", "pods"),
            ("create", "pods", "--subresource=eviction"),
            ("patch", "workloads.kueue.x-k8s.io"),
        ):
            assert can("gangpreempt-ingest", *what) == "no", what
        assert can("gangpreempt-actuator", "create", "pods", "--subresource=eviction") == "yes"
        assert can("gangpreempt-actuator", "create", "pods") == "no"
        # the policy on top: nothing in kube-system, even what RBAC grants
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "critical", "namespace": "kube-system"},
            "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "busybox"}]},
        }
        name = f"critical-{uuid.uuid4().hex[:6]}"
        pod["metadata"]["name"] = name
        assert kubectl(admin, "apply", "-f", "-", stdin=yaml.safe_dump(pod)).returncode == 0
        try:
            label = kubectl(
                actuator,
                "-n",
                "kube-system",
                "label",
                "pod",
                name,
                "scheduling.koordinator.sh/soft-eviction=plan-x",
            )
            assert label.returncode != 0
            assert "gangpreempt-actuator-pods" in label.stderr
        finally:
            kubectl(
                admin,
                "-n",
                "kube-system",
                "delete",
                "pod",
                name,
                "--grace-period=0",
                "--force",
                "--wait=false",
            )
    finally:
        kubectl(admin, "delete", "namespace", ns, "--wait=false")
