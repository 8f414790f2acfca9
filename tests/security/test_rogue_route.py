"""The hardened NATS of the Kubernetes deployment, against real nats-servers: a cluster
of two, each on a configuration made by the same functions as ``deploy/k8s/nats.conf``
(``serverconfig``; only the ports, paths and certificates are this test's), with the
users' bcrypt hashes in its environment as ``gangpreempt nats-config hash`` writes them.

- routes are mutual TLS, and a peer must show a certificate of the cluster's CA naming
  one of the routes: a rogue server without one (no TLS, another CA, the right CA for
  another name) never joins, and what its anonymous clients publish reaches nobody;
- clients must speak TLS from the first byte; the services connect with the CA file of
  ``GANGPREEMPT_NATS_CA``;
- ``gangpreempt provision`` never lowers a stream's replicas without ``--force``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nats
import nats.errors
import pytest
import trustme
from nats.aio.msg import Msg

from gangpreempt.bus import SERVICES, Topology, connected, free_port, provision
from gangpreempt.bus.connecting import tls_options
from gangpreempt.bus.permissions import ADMIN, env_authorization, password_variable
from gangpreempt.bus.server import nats_server_binary
from gangpreempt.bus.serverconfig import (
    ADVERTISE_VARIABLE,
    ROUTE_USER,
    TlsFiles,
    client_tls_block,
    cluster_block,
    route_url,
    route_variable,
    server_block,
)
from gangpreempt.cli.natsconfig import hash_lines
from tests.waiting import until

pytestmark = pytest.mark.integration
TOPOLOGY = Topology("gp")  # the prefix of the deployments
USERS = (ADMIN, *SERVICES)
PASSWORDS = {user: f"p{user}{os.getpid()}" for user in (*USERS, ROUTE_USER)}


class Process:
    """A nats-server child process on a configuration text and environment."""

    def __init__(self, workdir: Path, name: str, text: str, env: dict[str, str]) -> None:
        self.name = name
        self.log = workdir / f"{name}.log"
        conf = workdir / f"{name}.conf"
        conf.write_text(text)
        clean = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [nats_server_binary(), "-c", str(conf)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**clean, **env},
            )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def wait_healthy(monitor: int, process: Process, timeout: float = 30.0) -> None:
    """Until the server says JetStream is up (a cluster: it has a meta leader)."""
    url = f"http://127.0.0.1:{monitor}/healthz"
    deadline = time.monotonic() + timeout
    while True:
        if process.proc.poll() is not None:
            raise AssertionError(f"{process.name} exited:\n{process.text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{process.name} not healthy:\n{process.text()[-3000:]}")
        time.sleep(0.05)


def certificate(ca: trustme.CA, name: str, where: Path) -> TlsFiles:
    """A certificate for ``name`` (and its key) signed by ``ca``, and ``ca`` itself."""
    where.mkdir(parents=True, exist_ok=True)
    issued = ca.issue_cert(name)
    issued.cert_chain_pems[0].write_to_path(str(where / "tls.crt"))
    issued.private_key_pem.write_to_path(str(where / "tls.key"))
    ca.cert_pem.write_to_path(str(where / "ca.crt"))
    return TlsFiles(str(where / "tls.crt"), str(where / "tls.key"), str(where / "ca.crt"))


def hashes_as_kubectl_reads_them() -> dict[str, str]:
    """The environment ``kubectl create secret --from-env-file`` makes of the lines of
    ``gangpreempt nats-config hash``: each value verbatim, quotes included."""
    lines = hash_lines({password_variable(u): p for u, p in PASSWORDS.items()}, "kubernetes")
    return dict(line.split("=", 1) for line in lines.splitlines())


@dataclass
class Cluster:
    workdir: Path
    ca: trustme.CA
    tls: TlsFiles
    route_ports: list[int]
    client_ports: list[int]
    monitors: list[int]
    members: list[Process] = field(default_factory=list)

    @property
    def routes(self) -> list[str]:
        return [f"nats://localhost:{p}" for p in self.route_ports]

    def route_env(self) -> dict[str, str]:
        """Each route's URL with the route user's credentials, as the StatefulSet makes
        them (``NATS_ROUTE_<i>``)."""
        return {
            route_variable(i): route_url(url, PASSWORDS[ROUTE_USER])
            for i, url in enumerate(self.routes)
        }

    def url(self, i: int) -> str:
        return f"tls://localhost:{self.client_ports[i]}"

    def routez(self, i: int) -> dict[str, object]:
        url = f"http://127.0.0.1:{self.monitors[i]}/routez"
        with urllib.request.urlopen(url, timeout=5) as answer:
            found: dict[str, object] = json.load(answer)
            return found

    def peers(self, i: int) -> set[str]:
        routes = self.routez(i).get("routes") or []
        assert isinstance(routes, list)
        return {str(r.get("remote_name")) for r in routes}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("nats-cluster")
    ca = trustme.CA()
    found = Cluster(
        workdir,
        ca,
        certificate(ca, "localhost", workdir / "tls"),
        [free_port(), free_port()],
        [free_port(), free_port()],
        [free_port(), free_port()],
    )
    hashes = hashes_as_kubectl_reads_them()
    try:
        for i in range(2):
            text = (
                server_block(
                    f"n{i}",
                    port=found.client_ports[i],
                    monitor=f"127.0.0.1:{found.monitors[i]}",
                    store_dir=str(workdir / f"n{i}"),
                    max_file_store=1 << 40,
                )
                + client_tls_block(found.tls)
                + cluster_block(
                    [f"${name}" for name in found.route_env()],
                    found.tls,
                    port=found.route_ports[i],
                )
                + env_authorization(TOPOLOGY)
            )
            env = {
                **hashes,
                **found.route_env(),
                ADVERTISE_VARIABLE: f"localhost:{found.route_ports[i]}",
            }
            found.members.append(Process(workdir, f"n{i}", text, env))
        for i, member in enumerate(found.members):
            wait_healthy(found.monitors[i], member)
        yield found
    finally:
        for member in found.members:
            member.stop()


def admin(url: str, tls: TlsFiles) -> object:
    return connected(url, "admin", user=ADMIN, password=PASSWORDS[ADMIN], **tls_options(tls.ca))


async def test_the_cluster_forms_over_tls_and_clients_must_speak_tls(cluster: Cluster) -> None:
    assert cluster.peers(0) == {"n1"}
    assert cluster.peers(1) == {"n0"}
    async with admin(cluster.url(1), cluster.tls) as nc:  # type: ignore[attr-defined]
        assert nc.is_connected
    # Without TLS: the server says nothing (no INFO) and takes nothing (no CONNECT).
    reader, writer = await asyncio.open_connection("127.0.0.1", cluster.client_ports[0])
    try:
        connect = json.dumps({"user": ADMIN, "pass": PASSWORDS[ADMIN], "verbose": False})
        writer.write(f"CONNECT {connect}\r\nPING\r\n".encode())
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 15) == b""  # closed, nothing said
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


ROGUES = ["without-tls", "another-ca", "our-ca-another-name", "our-certificate-no-password"]


def rogue_config(kind: str, cluster: Cluster, port: int) -> str:
    """An anonymous server (no users) that tries to route to the cluster: without TLS,
    with a certificate the cluster does not take, or with the cluster's own certificate
    (its key stolen) or one the cluster's CA signed for another name, but without the
    route password (route authorization: it needs both)."""
    route_port = free_port()
    if kind == "without-tls":  # with the password
        routes = ", ".join(f'"{route_url(r, PASSWORDS[ROUTE_USER])}"' for r in cluster.routes)
        return (
            f"port: {port}\n"
            f"cluster {{\n  name: gangpreempt\n  port: {route_port}\n  routes: [{routes}]\n}}\n"
        )
    where = cluster.workdir / f"rogue-{kind}"
    if kind == "our-certificate-no-password":
        return f"port: {port}\n" + cluster_block(
            cluster.routes,
            cluster.tls,
            port=route_port,
            advertise=f"localhost:{route_port}",
            authorization=None,
        )
    if kind == "another-ca":
        tls = certificate(trustme.CA(), "localhost", where)
    else:  # signed by the cluster's CA (a stolen signing), for a name off the routes
        tls = certificate(cluster.ca, "rogue.example", where)
        # it trusts the cluster's certificate, so its own TLS handshake succeeds
    # another CA: even with the password; the cluster's CA: without it
    routes = (
        [route_url(u, PASSWORDS[ROUTE_USER]) for u in cluster.routes]
        if kind == "another-ca"
        else cluster.routes
    )
    return f"port: {port}\n" + cluster_block(
        routes, tls, port=route_port, advertise=f"localhost:{route_port}", authorization=None
    )


@pytest.mark.parametrize("kind", ROGUES)
async def test_a_rogue_server_without_the_route_certificate_never_joins(
    cluster: Cluster, kind: str
) -> None:
    """The review's attack: a server routes to the cluster and its anonymous client
    writes a plan record, the actuator's lease and a quota event. None gets in."""
    async with admin(cluster.url(0), cluster.tls) as nc:  # type: ignore[attr-defined]
        await provision(nc.jetstream(), TOPOLOGY, lease_ttl=5.0)
    client_port = free_port()
    rogue = Process(cluster.workdir, f"rogue-{kind}", rogue_config(kind, cluster, client_port), {})
    try:
        # It tried every route, and was turned away each time.
        def refused_by_both() -> bool:
            closed = [line for line in rogue.text().splitlines() if "connection closed" in line]
            return all(any(f":{p} " in line for line in closed) for p in cluster.route_ports)

        await until(refused_by_both, 20.0, f"the rogue ({kind}) turned away by both members")
        async with admin(cluster.url(0), cluster.tls) as watcher:  # type: ignore[attr-defined]
            js = watcher.jetstream()
            stored = (await js.stream_info(f"KV_{TOPOLOGY.plans_bucket}")).state.messages
            arrived: asyncio.Queue[Msg] = asyncio.Queue()
            written = [
                f"$KV.{TOPOLOGY.plans_bucket}.forged",
                f"$KV.{TOPOLOGY.leases_bucket}.actuator",
                f"{TOPOLOGY.prefix}.quota.plan-confirmed",
            ]
            subs = [
                await watcher.subscribe(subject, cb=arrived.put)
                for subject in (*written, f"{TOPOLOGY.prefix}.quota.pending")
            ]
            await watcher.flush()
            intruder = await nats.connect(f"nats://127.0.0.1:{client_port}")
            try:
                for subject in written:
                    await intruder.publish(subject, b"forged")
                await intruder.flush()
            finally:
                await intruder.close()
            # A control through the other member of the cluster: it does arrive.
            async with connected(
                cluster.url(1),
                "quota",
                user="quota",
                password=PASSWORDS["quota"],
                **tls_options(cluster.tls.ca),
            ) as quota:
                await quota.publish(f"{TOPOLOGY.prefix}.quota.pending", b"control")
                await quota.flush()
            seen = await asyncio.wait_for(arrived.get(), 10)
            assert (seen.subject, seen.data) == (f"{TOPOLOGY.prefix}.quota.pending", b"control")
            with pytest.raises(TimeoutError):  # and nothing of the rogue's
                await asyncio.wait_for(arrived.get(), 1.0)
            after = (await js.stream_info(f"KV_{TOPOLOGY.plans_bucket}")).state.messages
            assert after == stored  # nothing stored in the plans bucket
            for sub in subs:
                await sub.unsubscribe()
        assert cluster.peers(0) == {"n1"}
        assert cluster.peers(1) == {"n0"}
    finally:
        rogue.stop()


def provision_cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GANGPREEMPT_NATS_URL": cluster.url(0),
        "GANGPREEMPT_NATS_USER": ADMIN,
        "GANGPREEMPT_NATS_PASSWORD": PASSWORDS[ADMIN],
        "GANGPREEMPT_NATS_CA": cluster.tls.ca,
        "GANGPREEMPT_PREFIX": "rep",
        "GANGPREEMPT_LEASE_TTL": "5",
    }
    env.pop("GANGPREEMPT_STREAM_REPLICAS", None)
    return subprocess.run(
        [sys.executable, "-m", "gangpreempt.cli", "provision", "--timeout", "60", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def replicas_of(cluster: Cluster, topology: Topology) -> dict[str, int]:
    async def read() -> dict[str, int]:
        async with admin(cluster.url(1), cluster.tls) as nc:  # type: ignore[attr-defined]
            js = nc.jetstream()
            names = [topology.state_stream, topology.decisions_stream, topology.dlq_stream]
            names += [f"KV_{topology.plans_bucket}", f"KV_{topology.leases_bucket}"]
            return {n: (await js.stream_info(n)).config.num_replicas or 1 for n in names}

    return asyncio.run(read())


def test_provision_never_lowers_replicas_without_force(cluster: Cluster) -> None:
    """Over TLS with the CA of GANGPREEMPT_NATS_CA, as the provision Job runs it."""
    topology = Topology("rep")
    done = provision_cli(cluster, "--stream-replicas", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(replicas_of(cluster, topology).values()) == {2}
    # Without the variable (the default is 1), or with 1: refused, nothing changed.
    refused = provision_cli(cluster)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "would lower them" in refused.stderr
    assert "--force" in refused.stderr
    assert set(replicas_of(cluster, topology).values()) == {2}
    again = provision_cli(cluster, "--stream-replicas", "2")  # the same: fine
    assert again.returncode == 0, again.stdout + again.stderr
    lowered = provision_cli(cluster, "--stream-replicas", "1", "--force")
    assert lowered.returncode == 0, lowered.stdout + lowered.stderr
    assert set(replicas_of(cluster, topology).values()) == {1}


async def test_a_client_with_the_ca_speaks_tls_first(cluster: Cluster) -> None:
    """What ``GANGPREEMPT_NATS_CA`` does: TLS from the first byte, the server's
    certificate checked against the CA (a client that trusts another CA is refused)."""
    options = tls_options(cluster.tls.ca)
    assert options["tls_handshake_first"] is True
    other = cluster.workdir / "other-ca.crt"
    trustme.CA().cert_pem.write_to_path(str(other))
    with pytest.raises(ssl.SSLCertVerificationError):
        await asyncio.open_connection(
            "localhost", cluster.client_ports[0], ssl=tls_options(str(other))["tls"]
        )
    _reader, writer = await asyncio.open_connection(
        "localhost", cluster.client_ports[0], ssl=options["tls"]
    )
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
