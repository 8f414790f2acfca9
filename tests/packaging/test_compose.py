"""docker-compose.yml: valid against the Compose Specification schema, every command one
the CLI has, each service configured as the services read their settings, secrets only
from .env, and telemetry wired through the collector to Jaeger.

The schema is the Compose Specification's JSON schema as check-jsonschema ships it
(``--builtin-schema vendor.compose-spec``, Apache-2.0, see the package's
``builtin_schemas/vendor/licenses/LICENSE.compose-spec``)."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import click
import jsonschema
import pytest
from check_jsonschema.builtin_schemas import get_builtin_schema

from gangpreempt.bus import SERVICES
from gangpreempt.bus.permissions import ADMIN, hash_variable, password_variable
from gangpreempt.bus.serverconfig import CLIENT_PORT, MONITOR_PORT, STORE_DIR
from gangpreempt.cli import cli
from gangpreempt.config import Settings, load_settings
from tests.packaging.conftest import ROOT, load_yaml

pytestmark = pytest.mark.packaging

COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / "deploy" / "compose.env.example"
INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc: dict[str, Any] = load_yaml(COMPOSE)
    return doc


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}``, ``${NAME:?error}``."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op and op.endswith("-"):
            return arg
        if op and op.endswith("?"):
            raise AssertionError(f"compose stops: {name} is unset ({arg})")
        return ""

    return INTERPOLATION.sub(one, value)


def ours(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run the gangpreempt image."""
    return {
        name: svc
        for name, svc in compose["services"].items()
        if "gangpreempt" in svc.get("image", "") and "build" in svc
    }


def env_example() -> dict[str, str]:
    pairs = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def test_compose_file_validates_against_the_compose_specification(
    compose: dict[str, Any],
) -> None:
    schema = get_builtin_schema("vendor.compose-spec")
    validator = jsonschema.Draft202012Validator(schema)
    errors = [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(compose)
    ]
    assert not errors, "\n".join(errors)


def test_every_command_is_one_the_cli_has(compose: dict[str, Any]) -> None:
    services = ours(compose)
    assert set(services) == {"provision", *SERVICES}
    serve = cli.commands["serve"]
    (service_type,) = [p.type for p in serve.params if p.name == "service"]
    assert isinstance(service_type, click.Choice)
    choices = service_type.choices
    served = []
    ctx = click.Context(cli)
    for name, svc in services.items():
        command = svc["command"]
        assert isinstance(command, list), f"{name}: use the exec form"
        sub = cli.get_command(ctx, command[0])  # some are imported when named
        assert sub is not None, f"{name}: gangpreempt has no command {command[0]}"
        sub.make_context(command[0], list(command[1:]))  # parses, or raises a usage error
        if command[0] == "serve":
            assert command[1] in choices
            assert command[1] == name
            served.append(command[1])
    assert sorted(served) == sorted(SERVICES)
    assert services["provision"]["command"][0] == "provision"


def environment(compose: dict[str, Any], name: str) -> dict[str, str]:
    """A service's environment as compose gives it, with .env filled in from a complete
    example (every password set)."""
    dotenv = {k: v or f"p{k.lower()}" for k, v in env_example().items()}
    raw = compose["services"][name].get("environment", {})
    assert isinstance(raw, dict), f"{name}: environment as a mapping"
    return {k: interpolate(str(v), dotenv) for k, v in raw.items()}


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_is_configured_for_a_real_cluster(
    compose: dict[str, Any], service: str
) -> None:
    svc = compose["services"][service]
    raw = svc["environment"]
    assert raw["GANGPREEMPT_NATS_PASSWORD"].startswith(f"${{{password_variable(service)}:?")
    env = environment(compose, service)
    unknown = {
        k
        for k in env
        if k.startswith("GANGPREEMPT_") and k[12:].lower() not in Settings.__struct_fields__
    }
    assert not unknown, f"{service}: not settings of gangpreempt: {unknown}"
    settings = load_settings(environ=env)
    assert settings.nats_user == service
    assert settings.nats_password == f"p{password_variable(service).lower()}"
    assert settings.provision is False
    assert urlparse(settings.nats_url).hostname in compose["services"]
    assert urlparse(settings.nats_url).port == CLIENT_PORT
    assert settings.health_port == 8080
    assert svc["depends_on"]["provision"]["condition"] == "service_completed_successfully"
    assert "8080/readyz" in " ".join(svc["healthcheck"]["test"])
    if service in ("ingest", "actuator"):
        mounts = {}
        for volume in svc["volumes"]:
            source, target, mode = interpolate(volume, {}).split(":")
            mounts[target] = (source, mode)
        assert settings.kubeconfig in mounts, f"{service}: kubeconfig is not mounted"
        assert mounts[settings.kubeconfig][1] == "ro"
    else:
        assert settings.kubeconfig is None
        assert "volumes" not in svc
    if service == "ingest":
        assert (settings.source, settings.sim) == ("kubernetes", False)
    if service == "actuator":
        assert settings.sink == "kubernetes"


def test_provision_runs_as_admin_once_nats_is_healthy(compose: dict[str, Any]) -> None:
    svc = compose["services"]["provision"]
    assert svc["depends_on"]["nats"]["condition"] == "service_healthy"
    assert svc["restart"] == "no"
    settings = load_settings(environ=environment(compose, "provision"))
    assert settings.nats_user == ADMIN
    assert settings.nats_password == f"p{password_variable(ADMIN).lower()}"
    assert settings.stream_replicas == 1


def test_nats_runs_the_generated_config_with_every_password(compose: dict[str, Any]) -> None:
    nats = compose["services"]["nats"]
    config = nats["command"][nats["command"].index("--config") + 1]
    mounts = dict(reversed(v.split(":")[:2]) for v in nats["volumes"])
    assert (ROOT / mounts[config]).resolve() == ROOT / "deploy" / "nats" / "nats.conf"
    data = next(target for target, source in mounts.items() if source in compose["volumes"])
    assert PurePosixPath(STORE_DIR).is_relative_to(data), "the JetStream store is on the volume"
    # nats-server gets the passwords' hashes only, never a password
    variables = {hash_variable(u) for u in (ADMIN, *SERVICES)}
    assert set(nats["environment"]) == variables
    for name, value in nats["environment"].items():
        assert value.startswith(f"${{{name}:?"), name
    assert f"127.0.0.1:{MONITOR_PORT}/healthz" in " ".join(nats["healthcheck"]["test"])
    assert "ports" not in nats, "the NATS ports are for the compose network only"


def test_env_example_lists_every_required_variable(compose: dict[str, Any]) -> None:
    required = {
        m.group(1) for m in INTERPOLATION.finditer(COMPOSE.read_text()) if m.group(2) == ":?"
    }
    example = env_example()
    users = (ADMIN, *SERVICES)
    assert required == {password_variable(u) for u in users} | {hash_variable(u) for u in users}
    assert set(example) == required
    assert all(value == "" for value in example.values()), "the example holds no password"


def test_traces_go_through_the_collector_to_jaeger(compose: dict[str, Any]) -> None:
    collector = compose["services"]["otel-collector"]
    source = next(v.split(":")[0] for v in collector["volumes"])
    config = load_yaml(ROOT / source)
    pipeline = config["service"]["pipelines"]["traces"]
    http = config["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    for service in SERVICES:
        endpoint = urlparse(environment(compose, service)["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert endpoint.hostname == "otel-collector"
        assert str(endpoint.port) == http.rsplit(":", 1)[1]
    assert "otlp" in pipeline["receivers"]
    exporter = config["exporters"][pipeline["exporters"][0]]
    assert exporter["endpoint"].split(":")[0] == "jaeger"
    jaeger = compose["services"]["jaeger"]
    assert "127.0.0.1:16686:16686" in jaeger["ports"]


def test_the_paths_compose_mounts_exist(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for volume in svc.get("volumes", []):
            source = interpolate(volume, {}).split(":")[0]
            if source.startswith(".") and "/kubeconfig-" not in source:  # made by a script
                assert (ROOT / source).exists(), f"{name}: {source}"


def test_dotenv_and_kubeconfig_are_git_ignored() -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert ".env" in ignored
    assert "deploy/kubeconfig-ingest" in ignored
    assert "deploy/kubeconfig-actuator" in ignored


def test_ingest_and_the_actuator_mount_kubeconfigs_of_their_own(compose: dict[str, Any]) -> None:
    """Two identities, as on Kubernetes: ingest's read-only one is never the actuator's,
    and the script that makes them exists."""
    sources = {
        name: interpolate(compose["services"][name]["volumes"][0], {}).split(":")[0]
        for name in ("ingest", "actuator")
    }
    assert sources == {
        "ingest": "./deploy/kubeconfig-ingest",
        "actuator": "./deploy/kubeconfig-actuator",
    }
    script = (ROOT / "tools" / "compose-kubeconfigs.sh").read_text()
    assert "deploy/k8s/ingest-rbac.yaml" in script
    assert 'config unset "users.$yours"' in script  # no credential of the operator's
    assert Path(ENV_EXAMPLE).exists()
