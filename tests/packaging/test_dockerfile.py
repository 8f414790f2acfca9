"""The Dockerfile, read as instructions (no engine needed): a slim multi-stage build, an
unprivileged numeric user, the package's console script as entrypoint, a default command
the CLI accepts, and a build context that holds what the build needs and no secret."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

import pytest

from gangpreempt.cli import cli
from tests.packaging.conftest import ROOT, generated, named

pytestmark = pytest.mark.packaging

Instruction = tuple[str, str]  # (KEYWORD, arguments)
SECRET_NAMES = (".env", "kubeconfig", "nats-passwords.env", ".git")


def instructions() -> list[Instruction]:
    text = (ROOT / "Dockerfile").read_text()
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    out = []
    for line in logical:
        keyword, _, args = line.strip().partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def stages() -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for keyword, args in instructions():
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, args))
    return result


def args_default(name: str) -> str:
    for keyword, args in instructions():
        if keyword == "ARG" and args.startswith(f"{name}="):
            return args.split("=", 1)[1]
    raise AssertionError(f"no ARG {name}")


def base_image(from_args: str) -> str:
    image = from_args.split()[0]
    return re.sub(r"\$\{(\w+)\}", lambda m: args_default(m.group(1)), image)


def exec_form(stage: list[Instruction], keyword: str) -> list[str]:
    values = [args for k, args in stage if k == keyword]
    assert values, f"no {keyword} in the final stage"
    parsed = json.loads(values[-1])
    assert isinstance(parsed, list), f"{keyword} in exec form"
    return parsed


def test_two_slim_stages_and_only_the_venv_is_copied_over() -> None:
    build, final = stages()
    assert all(base_image(s[0][1]) == "python:3.11.7-slim" for s in (build, final))
    assert " AS build" in build[0][1]
    copies = [args for k, args in final if k == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"]
    assert any(k == "ENV" and "/opt/venv/bin" in args for k, args in final)


def test_runs_as_an_unprivileged_numeric_user(rendered: list[dict[str, Any]]) -> None:
    final = stages()[-1]
    users = [args for k, args in final if k == "USER"]
    assert users, "the image must not run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit(), "a numeric UID, so runAsNonRoot can check it"
    assert gid.isdigit()
    assert int(uid) >= 1000
    assert int(gid) >= 1000
    deployments = [named(rendered, "Deployment", f"gangpreempt-{s}") for s in ("ingest", "quota")]
    for dep in deployments:
        assert dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_entrypoint_is_the_console_script_and_the_default_command_parses() -> None:
    final = stages()[-1]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    entrypoint = exec_form(final, "ENTRYPOINT")
    assert entrypoint == ["gangpreempt"]
    assert entrypoint[0] in scripts
    command = exec_form(final, "CMD")
    assert command == ["serve", "ingest"]
    cli.commands[command[0]].make_context(command[0], command[1:])


def test_exposes_the_health_port(rendered: list[dict[str, Any]]) -> None:
    final = stages()[-1]
    exposed = {args for k, args in final if k == "EXPOSE"}
    port = generated(rendered, "ConfigMap", "gangpreempt")["data"]["GANGPREEMPT_HEALTH_PORT"]
    assert exposed == {port}


def test_no_secret_in_the_image() -> None:
    for keyword, args in instructions():
        if keyword in ("ENV", "ARG"):
            assert not re.search(r"(?i)password|secret|token", args), f"{keyword} {args}"
        if keyword in ("COPY", "ADD") and "--from=" not in args:
            *sources, _target = args.split()
            for source in sources:
                assert source not in (".", "./", "*"), "copy what the build needs, not the tree"
                assert not any(name in source for name in SECRET_NAMES), source


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def docker_pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Docker reads it: from the context root, ``*`` and ``?``
    within one path element, ``**`` across any number of them."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out += pattern[i : end + 1]
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps ``path`` (relative, with /) out of the build context;
    an ignored folder ignores everything under it (no ``!`` exceptions used here)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        assert not pattern.startswith("!"), "exceptions are not modelled here"
        regex = docker_pattern(pattern.strip("/"))
        if any(regex.match(prefix) for prefix in prefixes):
            return True
    return False


def test_build_context_holds_what_the_build_copies_and_no_secret() -> None:
    patterns = dockerignore()
    for name in (
        ".env",
        ".git/config",
        ".venv/bin/python",
        "deploy/kubeconfig",
        "deploy/kubeconfig-actuator",
        "deploy/k8s/nats-passwords.env",
        "some/where/kubeconfig",
        "local.env",
        "libs/gangpreempt.egg-info/PKG-INFO",
        "services/__pycache__/runtime.cpython-311.pyc",
    ):
        assert ignored(name, patterns), f"{name} would be sent to the docker daemon"
    sources_in_tree = [
        path.relative_to(ROOT).as_posix()
        for folder in ("libs", "services")
        for path in (ROOT / folder).rglob("*")
        if path.is_file()
        and not any(part == "__pycache__" or part.endswith(".egg-info") for part in path.parts)
    ]
    assert sources_in_tree
    for path in sources_in_tree:
        assert not ignored(path, patterns), f"{path} is left out of the image"
    build = stages()[0]
    copied = [args.split()[:-1] for k, args in build if k == "COPY"]
    sources = [s for group in copied for s in group]
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not ignored(source, patterns), f"COPY {source}, but .dockerignore drops it"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {"pyproject.toml", project["project"]["readme"]}
    needed |= {d for d in project["tool"]["setuptools"]["packages"]["find"]["where"] if d != "."}
    needed.add("services")  # found from "." by the services* pattern
    assert needed <= {s.rstrip("/") for s in sources}


def test_the_image_installs_pinned_dependencies() -> None:
    """requirements.lock pins every distribution gangpreempt needs at run time (its
    dependencies' closure, by name; ``tools/lock_runtime.py`` writes it) and nothing
    else, and the build installs with it as constraints; the base images are pinned to
    a patch release."""
    from tools.lock_runtime import runtime_closure

    lock = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), line
            lock[name] = version
    assert set(lock) == set(runtime_closure()), "requirements.lock is stale: run " + (
        "`.venv/bin/python tools/lock_runtime.py > requirements.lock`"
    )
    build = stages()[0]
    assert any(k == "RUN" and "--constraint requirements.lock" in a for k, a in build)
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:\d+\.\d+\.\d+-slim$", text, re.M)
