from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gangpreempt.cli import cli

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def readme_plan_examples() -> list[tuple[list[str], dict]]:  # type: ignore[type-arg]
    """The README's ``gangpreempt plan`` commands and the JSON printed under each."""
    text = (ROOT / "README.md").read_text()
    found = re.findall(r"```console\n\$ (gangpreempt plan [^\n]+)\n(\{.*?\n\})\n```", text, re.S)
    assert found, "README has no console example of gangpreempt plan with its JSON output"
    return [(cmd.split()[1:], json.loads(out)) for cmd, out in found]


def test_readme_plan_examples_print_what_the_readme_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    examples = readme_plan_examples()
    assert len(examples) >= 2  # the quota level and the node level
    for args, expected in examples:
        code, out, _err = run(*args)
        assert code == 0, args
        assert json.loads(out) == expected, args


def test_json_has_exactly_the_documented_keys() -> None:
    code, out, _ = run(
        "plan",
        "-f",
        str(ROOT / "examples/quota-demo"),
        "--now",
        "2026-01-01T00:00:00Z",
        "-o",
        "json",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["now"] == "2026-01-01T00:00:00Z"
    d = doc["decisions"][0]
    for key in (
        "preemptor",
        "queue",
        "mode",
        "outcome",
        "flavors",
        "borrowing",
        "victims",
        "placement",
        "message",
    ):
        assert key in d
    for v in d["victims"]:
        assert {"object", "reason", "pods"} <= set(v)


def test_table_output_names_the_victims() -> None:
    code, out, _ = run(
        "plan", "-f", str(ROOT / "examples/quota-demo"), "--now", "2026-01-01T00:00:00Z"
    )
    assert code == 0
    assert "Workload/default/low (InClusterQueue)" in out
    assert "Preempt" in out


def test_invalid_manifest_exits_2_naming_file_document_object_field(tmp_path: Path) -> None:
    path = tmp_path / "workloads.yaml"
    path.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: train, namespace: default}\n"
        "spec:\n  podSets:\n  - name: main\n    count: three\n    template: {spec: {containers: []}}\n"
    )
    code, out, err = run("plan", "-f", str(path))
    assert code == 2
    assert out == ""
    assert (
        f"{path}: document 1 (Workload default/train): spec.podSets[0].count: expected a positive integer"
        in err
    )


def test_standard_input_is_read_with_dash_as_a_file_is() -> None:
    """``kubectl get -o yaml | gangpreempt plan -f -``: the same decisions as from the
    files; an error names ``<stdin>`` and its line (the input is read a second time for
    it, from what was read the first)."""
    folder = ROOT / "examples/quota-demo"
    text = "\n---\n".join(p.read_text() for p in sorted(folder.glob("*.yaml")))
    args = ["--now", "2026-01-01T00:00:00Z", "-o", "json"]
    from_files = CliRunner().invoke(cli, ["plan", "-f", str(folder), *args])
    from_stdin = CliRunner().invoke(cli, ["plan", "-f", "-", *args], input=text)
    assert from_stdin.exit_code == 0, from_stdin.stderr
    assert json.loads(from_stdin.stdout) == json.loads(from_files.stdout)
    broken = (
        text + "\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {priority: high}\n"
    )
    bad = CliRunner().invoke(cli, ["plan", "-f", "-"], input=broken)
    assert bad.exit_code == 2
    line = broken.count("\n")  # the last line
    assert "<stdin>: document" in bad.stderr
    assert f"spec.priority: expected an integer, got 'high' (line {line})" in bad.stderr


def test_a_quantity_beyond_the_arithmetic_exits_2_naming_it(tmp_path: Path) -> None:
    """A request the int64 arrays of the node-level search cannot hold is a manifest
    error with its place, not a traceback."""
    path = tmp_path / "pods.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n"
        "status: {allocatable: {cpu: '4', pods: '110'}}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: big, namespace: ml}\nspec:\n"
        "  containers:\n  - name: c\n    resources:\n      requests:\n"
        "        cpu: '10000000000000000'\n"
    )
    code, out, err = run("plan", "-f", str(path))
    assert code == 2
    assert out == ""
    assert f"{path}: document 2 (Pod ml/big): spec.containers[0].resources.requests.cpu" in err
    assert "beyond the largest quantity" in err
    assert "(line 14)" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "Workload/default"], "expected KIND/NAMESPACE/NAME"),
        (["--workload", "Workload/default/nope"], "Workload default/nope not found"),
        (["--workload", "Workload/default/low"], "is not pending"),
        (["--workload", "Deployment/default/low"], "kind 'Deployment' is not supported"),
        (["--workload", "Job/default/low"], "Job default/low not found in the manifests"),
        (["--now", "yesterday"], "--now: expected an RFC 3339 time"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], message: str) -> None:
    code, _out, err = run("plan", "-f", str(ROOT / "examples/quota-demo"), *args)
    assert code == 2
    assert message in err


def test_unknown_kinds_warn_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "deploy.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: j, namespace: default}\n"
        "---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: f}\n"
    )
    code, _out, err = run("plan", "-f", str(tmp_path), "-o", "json")
    assert code == 0
    assert err.count("warning:") == 1
    assert "unsupported kind Deployment" in err


def test_console_script_is_installed() -> None:
    exe = Path(sys.executable).parent / "gangpreempt"
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    assert "gangpreempt" in out.stdout


def test_narrow_output_is_one_block_per_decision_with_whole_words() -> None:
    """Piped with COLUMNS=80: no line is wider, and every word of every message is
    printed whole (the table would split them)."""
    args = ["plan", "-f", str(ROOT / "examples/saga-demo"), "--now", "2026-01-01T00:00:00Z"]
    narrow = CliRunner().invoke(cli, args, env={"COLUMNS": "80"})
    wide = CliRunner().invoke(cli, [*args, "-o", "json"])
    assert narrow.exit_code == 0
    lines = narrow.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    words = set(narrow.stdout.split())
    for d in json.loads(wide.stdout)["decisions"]:
        for word in d["message"].split():
            assert word in words, word
    assert lines[-1] == "3 decisions: 1 Pending, 2 Preempt"


def test_wide_output_is_a_table_and_honours_columns() -> None:
    args = ["plan", "-f", str(ROOT / "examples/quota-demo"), "--now", "2026-01-01T00:00:00Z"]
    result = CliRunner().invoke(cli, args, env={"COLUMNS": "160"})
    assert result.exit_code == 0
    assert "┃ Preemptor" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 160


def test_one_decision_is_singular_and_none_is_a_sentence(tmp_path: Path) -> None:
    code, out, _ = run(
        "plan",
        "-f",
        str(ROOT / "examples/quota-demo"),
        "--workload",
        "Workload/default/in",
        "--now",
        "2026-01-01T00:00:00Z",
    )
    assert code == 0
    assert out.splitlines()[-1].startswith("1 decision: ")
    queues = tmp_path / "queues.yaml"
    queues.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: f}\n"
    )
    code, out, err = run("plan", "-f", str(queues))
    assert (code, err) == (0, "")
    assert out.startswith("Nothing is pending")
    assert "┃" not in out


def test_an_empty_input_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    code, _out, err = run("plan", "-f", str(empty))
    assert code == 0
    assert f"warning: no objects gangpreempt reads in {empty}" in err


def test_pods_without_nodes_say_what_is_missing(tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\n"
        "spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}\n"
    )
    code, out, _ = run("plan", "-f", str(pod), "-o", "json")
    assert code == 0
    [d] = json.loads(out)["decisions"]
    assert d["outcome"] == "Pending"
    assert d["message"].startswith("no Nodes in the input")


@pytest.mark.parametrize("command", ["plan", "serve", "up", "provision", "nats-config", None])
def test_help_ends_with_examples(command: str | None) -> None:
    result = CliRunner().invoke(cli, [command, "--help"] if command else ["--help"])
    assert result.exit_code == 0
    tail = result.stdout.rstrip().split("Examples:")[-1]
    assert "Examples:" in result.stdout
    assert tail.count("gangpreempt") >= 2 or "make demo" in tail


def test_gang_reprieve_chooses_kube_scheduler_1_37_or_1_36() -> None:
    """One gang pod of 1 cpu, two full nodes, one group member on each: 1.37 (the
    default) places the pod on the first node by name and takes the member there; 1.36
    (``rescheduling``) keeps the more important member wherever it runs."""
    folder = ROOT / "tests/scenarios/podgroup_preemption"
    folder /= "v136-shared-group-preempt-separately-nodes-reversed"
    args = [
        "plan",
        "-f",
        str(folder / "cluster.yaml"),
        "--workload",
        "PodGroup/default/preemptor-pg",
    ]
    args += ["--now", "2025-01-01T12:00:00Z", "-o", "json"]
    victims = {}
    for mode in ("fixed-placement", "rescheduling"):
        code, out, err = run(*args, "--gang-reprieve", mode)
        assert code == 0, err
        (decision,) = json.loads(out)["decisions"]
        victims[mode] = [v["object"] for v in decision["victims"]]
    assert victims == {
        "fixed-placement": ["Pod/default/p2"],  # p2 runs on node1
        "rescheduling": ["Pod/default/p1"],  # p1 started later: the less important
    }
    code, _, err = run(*args[:3], "--gang-reprieve", "sometimes")
    assert code == 2
    assert "--gang-reprieve" in err
