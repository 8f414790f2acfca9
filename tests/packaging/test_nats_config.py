"""The nats-server configurations of the deployments: generated from the per-service
permissions (never edited by hand, never drifting), accepted by a real nats-server, no
secret in them, and working: an admin provisions with ``gangpreempt provision``, each
service logs in with the password whose bcrypt hash nats-server has from its environment
(as ``gangpreempt nats-config hash`` writes them)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import trustme
from click.testing import CliRunner

from gangpreempt.bus import SERVICES, NatsServer, Topology, connected, free_port
from gangpreempt.bus.permissions import (
    ADMIN,
    env_authorization,
    hash_password,
    hash_value,
    hash_variable,
    password_variable,
)
from gangpreempt.bus.provisioning import LIMITS, reserved_bytes
from gangpreempt.bus.server import nats_server_binary
from gangpreempt.bus.serverconfig import (
    ADVERTISE_VARIABLE,
    CLIENT_PORT,
    CLUSTER_PORT,
    COMPOSE_MAX_FILE_STORE,
    KUBERNETES_MAX_FILE_STORE,
    KUBERNETES_TLS,
    MONITOR_HOST,
    MONITOR_PORT,
    ROUTE_HASH_VARIABLE,
    ROUTE_USER,
    STORE_DIR,
    TLS_DIR,
    compose_config,
    kubernetes_config,
    kubernetes_routes,
    route_url,
    route_variable,
)
from gangpreempt.cli import cli
from gangpreempt.cli.natsconfig import hash_lines
from gangpreempt.cli.provision import run_provision
from gangpreempt.config import load_settings
from tests.packaging.conftest import K8S, ROOT, generated, named

pytestmark = pytest.mark.packaging

COMPOSE_CONF = ROOT / "deploy" / "nats" / "nats.conf"
K8S_CONF = K8S / "nats.conf"
TOPOLOGY = Topology("gp")  # the prefix both deployments run with
USERS = (ADMIN, *SERVICES)


def passwords() -> dict[str, str]:
    return {user: "p" + secrets.token_hex(16) for user in (*USERS, ROUTE_USER)}


def hash_env(values: dict[str, str]) -> dict[str, str]:
    """What nats-server gets: each user's bcrypt hash, as an environment variable holds it
    (the lowest cost: these tests log in often)."""
    users = [u for u in (*USERS, ROUTE_USER) if u in values]
    return {hash_variable(u): hash_value(hash_password(values[u], cost=4)) for u in users}


def authorization(conf: str) -> str:
    """The users' block (at the top level; the cluster block has the route user's)."""
    return conf[conf.index("\nauthorization {") + 1 :]


def test_committed_configs_are_the_generated_ones() -> None:
    assert COMPOSE_CONF.read_text() == compose_config(TOPOLOGY), (
        "deploy/nats/nats.conf is stale: gangpreempt nats-config compose -o deploy/nats/nats.conf"
    )
    assert K8S_CONF.read_text() == kubernetes_config(TOPOLOGY, 3), (
        "deploy/k8s/nats.conf is stale: gangpreempt nats-config kubernetes -o deploy/k8s/nats.conf"
    )


def test_the_cli_prints_the_committed_configs() -> None:
    runner = CliRunner()
    for target, path in (("compose", COMPOSE_CONF), ("kubernetes", K8S_CONF)):
        result = runner.invoke(cli, ["nats-config", target], env={"GANGPREEMPT_PREFIX": ""})
        assert result.exit_code == 0, result.output
        assert result.stdout == path.read_text()


def test_kubernetes_configmap_holds_the_same_users_and_permissions(
    rendered: list[dict[str, Any]],
) -> None:
    config = generated(rendered, "ConfigMap", "nats-config")["data"]["nats.conf"]
    assert config == kubernetes_config(TOPOLOGY, 3)
    assert authorization(config) == authorization(COMPOSE_CONF.read_text())
    assert authorization(config) == env_authorization(TOPOLOGY)
    common = generated(rendered, "ConfigMap", "gangpreempt")["data"]
    assert load_settings(environ=common).prefix == TOPOLOGY.prefix


def test_kubernetes_config_matches_the_statefulset(rendered: list[dict[str, Any]]) -> None:
    sts = named(rendered, "StatefulSet", "nats")
    headless = named(rendered, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    replicas = sts["spec"]["replicas"]
    conf = K8S_CONF.read_text()
    # One route per pod, each an environment variable the StatefulSet composes from the
    # route password (Secret nats-passwords) and the pod's name through the headless
    # Service; the server checks peers against the password's hash (route authorization).
    routes = re.findall(r"^    \$(NATS_ROUTE_\d+)$", conf, re.M)
    assert routes == [route_variable(i) for i in range(replicas)]
    cluster = conf[conf.index("cluster {") : conf.index("\nauthorization {")]
    assert f"user: {ROUTE_USER}" in cluster
    assert f"password: ${ROUTE_HASH_VARIABLE}" in cluster
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NATS_ROUTE_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "nats-passwords",
        "key": password_variable(ROUTE_USER),
    }
    for i, name in enumerate(routes):
        host = f"{sts['metadata']['name']}-{i}.{headless['metadata']['name']}:{CLUSTER_PORT}"
        assert env[name]["value"] == route_url(f"nats://{host}", "$(NATS_ROUTE_PASSWORD)")
    # defined after the password: Kubernetes expands $(VAR) from the variables above it
    names = list(env)
    assert all(names.index("NATS_ROUTE_PASSWORD") < names.index(r) for r in routes)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    # The monitoring port is on the pod's loopback address only: no port, no Service for
    # it; the probes ask it from inside the container.
    assert ports == {"client": CLIENT_PORT, "cluster": CLUSTER_PORT}
    assert f'http: "{MONITOR_HOST}:{MONITOR_PORT}"' in K8S_CONF.read_text()
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = " ".join(c[probe]["exec"]["command"])
        assert f"http://{MONITOR_HOST}:{MONITOR_PORT}/healthz" in command, probe
    for service in (headless, named(rendered, "Service", "nats")):
        assert MONITOR_PORT not in {p["port"] for p in service["spec"]["ports"]}
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in c[
        "env"
    ]
    # Each pod gives its peers its name through the headless Service: a name the routes
    # use, so the certificate that names the routes names it too.
    advertise = {e["name"]: e.get("value") for e in c["env"]}[ADVERTISE_VARIABLE]
    assert advertise == f"$(POD_NAME).{headless['metadata']['name']}:{CLUSTER_PORT}"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    tls = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert tls["secret"]["secretName"] == "nats-tls"
    assert mounts["tls"] == TLS_DIR
    for path in (KUBERNETES_TLS.cert, KUBERNETES_TLS.key, KUBERNETES_TLS.ca):
        assert path.startswith(TLS_DIR + "/")
        assert f'"{path}"' in K8S_CONF.read_text()
    config_volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert config_volume["configMap"]["name"].startswith("nats-config-")
    assert c["args"] == ["--config", f"{mounts['config']}/nats.conf"]
    claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    assert STORE_DIR.startswith(mounts[claim] + "/"), "the JetStream store is on the volume"
    client = named(rendered, "Service", "nats")
    assert client["spec"]["ports"][0]["port"] == CLIENT_PORT


def nats_test(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``nats-server -t``: parse the configuration, resolve its variables, and exit."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
    return subprocess.run(
        [nats_server_binary(), "-t", "-c", str(path)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def with_certificates(path: Path, where: Path) -> Path:
    """The configuration at ``path``, its certificate files made in ``where`` (nats-server
    reads them when it checks the configuration)."""
    ca = trustme.CA()
    issued = ca.issue_cert("nats", "*.nats-headless")
    where.mkdir(parents=True, exist_ok=True)
    issued.cert_chain_pems[0].write_to_path(str(where / "tls.crt"))
    issued.private_key_pem.write_to_path(str(where / "tls.key"))
    ca.cert_pem.write_to_path(str(where / "ca.crt"))
    moved = where / path.name
    moved.write_text(path.read_text().replace(TLS_DIR, str(where)))
    return moved


@pytest.mark.parametrize("path", [COMPOSE_CONF, K8S_CONF], ids=["compose", "kubernetes"])
def test_nats_server_accepts_the_config(path: Path, tmp_path: Path) -> None:
    values = passwords()
    env = {
        **hash_env(values),
        "POD_NAME": "nats-0",
        ADVERTISE_VARIABLE: f"nats-0.nats-headless:{CLUSTER_PORT}",
        **{
            route_variable(i): route_url(url, values[ROUTE_USER])
            for i, url in enumerate(kubernetes_routes(3))
        },
    }
    result = nats_test(with_certificates(path, tmp_path), env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is valid" in result.stdout + result.stderr


def test_nats_server_refuses_the_config_without_a_password_hash() -> None:
    for user in USERS:
        env = hash_env(passwords())
        del env[hash_variable(user)]
        result = nats_test(COMPOSE_CONF, env)
        assert result.returncode != 0, user
        assert hash_variable(user) in result.stdout + result.stderr


def test_the_reserved_streams_fit_in_the_stores(rendered: list[dict[str, Any]]) -> None:
    """Every stream's max_bytes is reserved in max_file_store (a stream that fills up
    takes no room from the others): the sum fits, and the Kubernetes store fits in the
    pod's volume."""
    assert reserved_bytes(LIMITS) <= COMPOSE_MAX_FILE_STORE <= KUBERNETES_MAX_FILE_STORE
    assert f"max_file_store: {COMPOSE_MAX_FILE_STORE}" in COMPOSE_CONF.read_text()
    assert f"max_file_store: {KUBERNETES_MAX_FILE_STORE}" in K8S_CONF.read_text()
    claim = named(rendered, "StatefulSet", "nats")["spec"]["volumeClaimTemplates"][0]
    size = claim["spec"]["resources"]["requests"]["storage"]
    assert size.endswith("Gi")
    assert int(size[:-2]) << 30 > KUBERNETES_MAX_FILE_STORE


PASSWORD_LINE = re.compile(r"""(?i)password["']?\s*[:=]\s*(.*)$""")


def deploy_files() -> Iterator[Path]:
    yield ROOT / "docker-compose.yml"
    for path in sorted((ROOT / "deploy").rglob("*")):
        if path.is_file():
            yield path


def test_no_password_is_written_in_the_deployment_files() -> None:
    """Every password setting is a reference (``$NAME``, ``${NAME...}``) or empty (the
    examples), and no Secret with data is committed."""
    reference = re.compile(r"^(\$[A-Z_][A-Z0-9_]*|\$\{[A-Z_][A-Z0-9_]*(:?[-?][^}]*)?\})?,?$")
    checked = 0
    for path in deploy_files():
        if path.name in ("kubeconfig", "nats-passwords.env", ".env"):
            pytest.fail(f"{path} holds secrets: it must not be committed")
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            m = PASSWORD_LINE.search(line)
            if m:
                value = m.group(1).split(" #")[0].strip()
                assert reference.match(value), f"{path.relative_to(ROOT)}:{number}: {line}"
                checked += 1
        if path.suffix == ".yaml":
            text = path.read_text()
            assert not re.search(r"(?m)^kind:\s*Secret\s*$", text), path
    assert checked >= 2 * len(USERS)  # nats.conf twice, compose, the examples


def test_generated_passwords_fit_the_config_format() -> None:
    """The password recipe in the examples gives values nats-server reads as strings."""
    for path in (ROOT / "deploy" / "compose.env.example", K8S / "nats-passwords.env.example"):
        assert "print('p' + secrets.token_hex(24))" in path.read_text(), path


class ConfiguredServer(NatsServer):
    """A nats-server child process on a given configuration text."""

    def __init__(self, store: Path, port: int, text: str) -> None:
        super().__init__(str(store), port=port)
        self.text = text

    def config_text(self) -> str:
        return self.text


def compose_dotenv(line: str) -> tuple[str, str]:
    """One line of docker compose's .env as compose reads it: a single-quoted value is
    taken literally, without its quotes."""
    name, value = line.split("=", 1)
    assert value[0] == value[-1] == "'", line
    return name, value[1:-1]


@pytest.fixture
def compose_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, dict[str, str]]]:
    """nats-server on the compose configuration (store and ports moved to this test),
    the password hashes in its environment as compose gives them from the .env lines of
    ``gangpreempt nats-config hash --for compose``."""
    values = passwords()
    lines = hash_lines({password_variable(u): values[u] for u in USERS}, "compose")
    for line in lines.splitlines():
        monkeypatch.setenv(*compose_dotenv(line))
    port = free_port()
    conf = (
        compose_config(TOPOLOGY)
        .replace(STORE_DIR, str(tmp_path / "jetstream"))
        .replace(f"\nport: {CLIENT_PORT}\n", f"\nport: {port}\n")
        .replace(f'http: "{MONITOR_HOST}:{MONITOR_PORT}"', f'http: "127.0.0.1:{free_port()}"')
    )
    server = ConfiguredServer(tmp_path, port, conf).start()
    try:
        yield server.url, values
    finally:
        server.stop()


async def test_admin_provisions_and_services_log_in(
    compose_server: tuple[str, dict[str, str]],
) -> None:
    url, values = compose_server
    admin = load_settings(
        {"nats_url": url, "lease_ttl": 2},
        environ={"GANGPREEMPT_NATS_USER": ADMIN, "GANGPREEMPT_NATS_PASSWORD": values[ADMIN]},
    )
    assert await run_provision(admin, timeout=20)
    async with connected(url, "check", user=ADMIN, password=values[ADMIN]) as nc:
        info = await nc.jetstream().stream_info(TOPOLOGY.decisions_stream)
        assert info.config.num_replicas == 1
    async with asyncio.timeout(20):
        for service in SERVICES:
            async with connected(url, service, user=service, password=values[service]) as nc:
                assert nc.is_connected

    assert not await refused(url, "quota", values["quota"])
    assert await refused(url, "quota", values["victims"])  # another service's password


async def refused(url: str, user: str, password: str) -> bool:
    """Whether nats-server refuses this login (the protocol by hand: a refused nats-py
    connect leaves its socket open)."""
    parsed = urlparse(url)
    reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port)
    try:
        await reader.readline()  # INFO
        connect = json.dumps({"user": user, "pass": password, "verbose": False})
        writer.write(f"CONNECT {connect}\r\nPING\r\n".encode())
        await writer.drain()
        answer = await asyncio.wait_for(reader.readline(), 5)
        return answer.startswith(b"-ERR 'Authorization Violation'")
    finally:
        writer.close()
        await writer.wait_closed()


async def test_provision_gives_up_when_nats_never_comes() -> None:
    settings = load_settings({"nats_url": f"nats://127.0.0.1:{free_port()}"}, environ={})
    assert await run_provision(settings, timeout=0.5) is False


def test_the_hash_command_fills_in_an_env_file(tmp_path: Path) -> None:
    """``nats-config hash --in-place``: the .env of docker compose gets a hash line per
    user beside the passwords (replaced when it runs again), the rest kept; without a
    password for every user it refuses."""
    values = passwords()
    dotenv = tmp_path / ".env"
    plain = "".join(f"{password_variable(u)}={values[u]}\n" for u in USERS)
    dotenv.write_text(f"# mine\n{plain}{hash_variable(ADMIN)}=\nGANGPREEMPT_LOG_LEVEL=debug\n")
    runner = CliRunner()
    args = ["nats-config", "hash", "--for", "compose", "--from-env-file", str(dotenv)]
    for _ in range(2):
        result = runner.invoke(cli, [*args, "--in-place"])
        assert result.exit_code == 0, result.output
        lines = dotenv.read_text().splitlines()
        assert lines[0] == "# mine"
        assert "GANGPREEMPT_LOG_LEVEL=debug" in lines
        hashes = dict(compose_dotenv(x) for x in lines if "_PASSWORD_HASH=" in x)
        assert set(hashes) == {hash_variable(u) for u in USERS}  # each once
        for user in USERS:
            assert hashes[hash_variable(user)].startswith('"$2b$'), user
    # Kubernetes: kubectl takes the value as written, double quotes included; the route
    # user's password is needed there too (the NATS pods log in to each other with it).
    result = runner.invoke(cli, ["nats-config", "hash", "--from-env-file", str(dotenv)])
    assert result.exit_code == 2
    assert password_variable(ROUTE_USER) in result.output
    with dotenv.open("a") as f:
        f.write(f"{password_variable(ROUTE_USER)}={values[ROUTE_USER]}\n")
    result = runner.invoke(cli, ["nats-config", "hash", "--from-env-file", str(dotenv)])
    assert result.exit_code == 0, result.output
    assert all(re.match(r'^NATS_[A-Z]+_PASSWORD_HASH="\$2b\$', x) for x in result.stdout.split())
    assert f"{hash_variable(ROUTE_USER)}=" in result.stdout
    # One password from standard input.
    result = runner.invoke(cli, ["nats-config", "hash"], input="secret\n")
    assert result.exit_code == 0, result.output
    assert re.fullmatch(r'"\$2b\$\d\d\$[./A-Za-z0-9]{53}"\n', result.stdout)
    missing = tmp_path / "missing.env"
    missing.write_text(plain.replace(f"{password_variable('quota')}={values['quota']}", ""))
    result = runner.invoke(cli, ["nats-config", "hash", "--from-env-file", str(missing)])
    assert result.exit_code == 2
    assert password_variable("quota") in result.output
