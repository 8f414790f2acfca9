"""A real Kubernetes control plane for tests, from the binaries tools/peers/build.sh makes:
etcd, kube-apiserver, kube-scheduler and Kueue's controller manager, each an OS process on
free loopback ports, its logs in the work directory.

- Certificates: one throwaway CA (``openssl`` CLI) signs a serving certificate for
  127.0.0.1/localhost, used by the API server, the scheduler's secure port and Kueue's
  webhook server; an RSA key pair signs service-account tokens.
- Identities: static bearer tokens (``--token-auth-file``). The admin is in
  ``system:masters``; the scheduler is ``system:kube-scheduler`` (bound by the bootstrap
  RBAC policy); Kueue runs as its own user in ``system:masters``; extra users (no groups
  beyond ``system:authenticated`` unless given) can be asked for, so a test can grant them
  a role and check what they did.
- Audit: every request at Metadata level, as JSON lines (``audit_events``).
- No kubelet and no kube-controller-manager: the tests create Node objects and play the
  kubelet. Hence the admission plugins ``ServiceAccount`` (needs the token controller's
  default service account) and ``TaintNodesByCondition`` (its not-ready taint is lifted by
  the node lifecycle controller) are disabled.
- Kueue: CRDs from the cache directory, their conversion webhooks and Kueue's admission
  webhooks pointed at ``https://127.0.0.1:<port>`` with our CA (Kueue's internal cert
  management off), the patches of Kueue's kustomizations applied (conversion per CRD,
  namespace selectors of the pod/deployment/statefulset webhooks).

Synchronous on purpose (subprocess + urllib): a session-scoped fixture may then serve
tests running in any event loop. Every wait has a deadline; nothing sleeps blindly.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]

ADMIN = "gangpreempt-admin"
SCHEDULER = "system:kube-scheduler"
KUEUE = "system:serviceaccount:kueue-system:kueue-controller-manager"
KUEUE_NAMESPACE = "kueue-system"
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "peers" / "build.sh"
# Kueue (cmd/kueue) loads the metrics serving certificate from this fixed path whenever
# its internal certificate management is off, and exits if the files are missing.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")


class ControlPlaneError(RuntimeError):
    """A peer failed to start or to become ready; the message ends with its log tail."""


def default_cache_dir() -> Path:
    """$GANGPREEMPT_PEERS_DIR, else the directory tools/peers/build.sh builds into for the
    versions pinned in this checkout; FileNotFoundError when that one is not complete."""
    env = os.environ.get("GANGPREEMPT_PEERS_DIR")
    if env:
        return Path(env)
    printed = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-dir"], capture_output=True, text=True, check=True
    )
    path = Path(printed.stdout.strip())
    if not (path / ".complete").exists():
        raise FileNotFoundError(f"{path} is not built: run {BUILD_SCRIPT}")
    return path


def free_ports(count: int) -> list[int]:
    """Ports the kernel handed out on 127.0.0.1, all held open until all are chosen."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Pki:
    """Files of the throwaway CA, the loopback serving pair and the service-account pair."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def serving_cert(self) -> Path:
        return self.dir / "tls.crt"

    @property
    def serving_key(self) -> Path:
        return self.dir / "tls.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.read_bytes()).decode()

    @classmethod
    def create(cls, directory: Path) -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        _openssl(
            "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "7",
            "-subj", "/CN=gangpreempt-test-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=directory,
        )  # fmt: skip
        _openssl(
            "req", "-new", *ec, "-keyout", "tls.key", "-out", "tls.csr",
            "-subj", "/CN=127.0.0.1", cwd=directory,
        )  # fmt: skip
        (directory / "tls.ext").write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        )
        _openssl(
            "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "7", "-extfile", "tls.ext", "-out", "tls.crt",
            cwd=directory,
        )  # fmt: skip
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                 "-out", "sa.key", cwd=directory)  # fmt: skip
        _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
        return cls(directory)


@dataclass
class Peer:
    """One running binary: its process and its log (stdout and stderr together)."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise ControlPlaneError(f"{self.name} exited with {code}:\n{self.tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def wait_until(
    what: str, probe: Callable[[], bool], deadline: float, peer: Peer | None = None
) -> None:
    """Call ``probe`` (short back-off between calls) until it is true; raise with the log
    tail of ``peer`` when it exits or when the monotonic ``deadline`` passes."""
    delay = 0.02
    while True:
        if peer is not None:
            peer.check_alive()
        if probe():
            return
        if time.monotonic() > deadline:
            tail = f":\n{peer.tail()}" if peer else ""
            raise ControlPlaneError(f"{what}: not ready in time{tail}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


@dataclass
class ControlPlane:
    """Start with ``start()``, stop with ``stop()`` (or use it as a context manager)."""

    cache_dir: Path = field(default_factory=default_cache_dir)
    work_dir: Path | None = None
    users: Mapping[str, Sequence[str]] = field(default_factory=dict)
    kueue_frameworks: Sequence[str] = ("batch/job",)
    kueue_feature_gates: Mapping[str, bool] = field(
        default_factory=lambda: {"VisibilityOnDemand": False}
    )
    start_timeout: float = 120.0
    scheduler: bool = True
    kueue: bool = True

    def __post_init__(self) -> None:
        self.cache_dir = Path(self.cache_dir)
        needed = ["etcd", "kube-apiserver"]
        needed += ["kube-scheduler"] if self.scheduler else []
        needed += ["kueue", "kueue-config"] if self.kueue else []
        missing = [b for b in needed if not (self.cache_dir / b).exists()]
        if missing:
            raise FileNotFoundError(
                f"{self.cache_dir}: missing {missing}; run tools/peers/build.sh"
            )
        self._own_work_dir = self.work_dir is None
        self.dir = Path(self.work_dir or tempfile.mkdtemp(prefix="gangpreempt-cp-"))
        self.peers: list[Peer] = []
        self.tokens: dict[str, str] = {}
        self.startup_seconds: dict[str, float] = {}
        (
            self.etcd_port,
            self.etcd_peer_port,
            self.apiserver_port,
            self.scheduler_port,
            self.kueue_webhook_port,
            self.kueue_health_port,
        ) = free_ports(6)
        self.pki = Pki(self.dir / "pki")
        self.audit_log = self.dir / "audit.jsonl"

    # ---- what tests use -------------------------------------------------------------

    @property
    def host(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def token(self) -> str:
        return self.tokens[ADMIN]

    @property
    def ca_file(self) -> Path:
        return self.pki.ca

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (system:masters)."""
        return self.kubeconfig_for(ADMIN)

    def kubeconfig_for(self, user: str) -> Path:
        path = self.dir / "kubeconfigs" / f"{user.replace(':', '_')}.yaml"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(self._kubeconfig(user)))
        return path

    def audit_events(self, user: str | None = None) -> list[JSON]:
        """The audit events so far, one per request (its last stage: ResponseComplete, or
        ResponseStarted for a watch still open), optionally only those of ``user``."""
        latest: dict[str, JSON] = {}
        with contextlib.suppress(FileNotFoundError), self.audit_log.open() as f:
            for line in f:
                if not line.endswith("\n"):
                    break  # being written
                event = json.loads(line)
                if user is None or event.get("user", {}).get("username") == user:
                    latest[event["auditID"]] = event
        return list(latest.values())

    def wait_for_audit(self, predicate: Callable[[JSON], bool], timeout: float = 10.0) -> JSON:
        """The first audit event matching ``predicate``, waiting for the log to catch up."""
        found: list[JSON] = []

        def probe() -> bool:
            found.extend(e for e in self.audit_events() if predicate(e))
            return bool(found)

        wait_until("audit event", probe, time.monotonic() + timeout)
        return found[0]

    async def audit_event(self, predicate: Callable[[JSON], bool], timeout: float = 10.0) -> JSON:
        """``wait_for_audit`` for a coroutine: polls without blocking the event loop."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.audit_events():
                if predicate(event):
                    return event
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"no matching audit event in {timeout}s")
            await asyncio.sleep(0.05)

    def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        content_type: str = "application/json",
        user: str = ADMIN,
    ) -> JSON:
        """One call to the API server as ``user``; HTTPError on a non-2xx answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.host + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.tokens[user]}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, context=self._tls(), timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else {}

    def apply(self, obj: JSON, path: str) -> JSON:
        """Server-side apply of ``obj`` at ``path`` (the object's URL), forced."""
        return self.request(
            "PATCH",
            f"{path}?fieldManager=gangpreempt-tests&force=true",
            obj,
            "application/apply-patch+yaml",
        )

    # ---- lifecycle ----------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        begin = time.monotonic()
        deadline = begin + self.start_timeout
        try:
            self._timed("pki", lambda: Pki.create(self.pki.dir))
            self._write_tokens()
            self._timed("etcd", lambda: self._start_etcd(deadline))
            self._timed("kube-apiserver", lambda: self._start_apiserver(deadline))
            if self.scheduler:
                self._timed("kube-scheduler", lambda: self._start_scheduler(deadline))
            if self.kueue:
                self._timed("kueue", lambda: self._start_kueue(deadline))
        except BaseException:
            self.stop()
            raise
        self.startup_seconds["total"] = time.monotonic() - begin

    def stop(self) -> None:
        for peer in reversed(self.peers):
            peer.stop()
        self.peers.clear()

    def cleanup(self) -> None:
        """Stop, then remove the work directory if this object made it."""
        self.stop()
        if self._own_work_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- internals ---------------------------------------------------------------

    def _timed(self, name: str, step: Callable[[], object]) -> None:
        begin = time.monotonic()
        step()
        self.startup_seconds[name] = time.monotonic() - begin

    def _tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.pki.ca))

    def _spawn(self, name: str, args: Sequence[str], env: Mapping[str, str] | None = None) -> Peer:
        log = self.dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(self.cache_dir / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        peer = Peer(name, process, log)
        self.peers.append(peer)
        return peer

    def _get_ok(self, url: str, token: str | None = None) -> bool:
        req = urllib.request.Request(url)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        context = self._tls() if url.startswith("https") else None
        try:
            with urllib.request.urlopen(req, context=context, timeout=5) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _write_tokens(self) -> None:
        users: dict[str, Sequence[str]] = {
            ADMIN: ["system:masters"],
            SCHEDULER: [],
            KUEUE: ["system:masters", "system:serviceaccounts"],
            **self.users,
        }
        rows = []
        for i, (user, groups) in enumerate(users.items()):
            self.tokens[user] = secrets.token_hex(16)
            rows.append(f'{self.tokens[user]},{user},uid-{i},"{",".join(groups)}"')
        (self.pki.dir / "tokens.csv").write_text("\n".join(rows) + "\n")

    def _kubeconfig(self, user: str) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "peers",
                    "cluster": {
                        "server": self.host,
                        "certificate-authority-data": self.pki.ca_bundle(),
                    },
                }
            ],
            "users": [{"name": user, "user": {"token": self.tokens[user]}}],
            "contexts": [{"name": "peers", "context": {"cluster": "peers", "user": user}}],
            "current-context": "peers",
        }

    def _start_etcd(self, deadline: float) -> None:
        peer = self._spawn(
            "etcd",
            [
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-url=http://127.0.0.1:{self.etcd_port}",
                f"--listen-peer-url=http://127.0.0.1:{self.etcd_peer_port}",
                "--name=peers",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        wait_until(
            "etcd",
            lambda: "etcd ready " in peer.log.read_text(errors="replace"),
            deadline,
            peer,
        )

    def _start_apiserver(self, deadline: float) -> None:
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [{"level": "Metadata"}],
                }
            )
        )
        pki = self.pki
        peer = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.apiserver_port}",
                f"--cert-dir={self.dir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca}",
                f"--token-auth-file={pki.dir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--anonymous-auth=false",
                f"--service-account-issuer={self.host}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                "--audit-log-maxbackup=0",
                "--profiling=false",
                "--v=1",
            ],
        )
        wait_until(
            "kube-apiserver /readyz",
            lambda: self._get_ok(f"{self.host}/readyz", self.token),
            deadline,
            peer,
        )

    def _start_scheduler(self, deadline: float) -> None:
        kubeconfig = self.kubeconfig_for(SCHEDULER)
        peer = self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.scheduler_port}",
                f"--tls-cert-file={self.pki.serving_cert}",
                f"--tls-private-key-file={self.pki.serving_key}",
                "--profiling=false",
                "--v=1",
            ],
        )
        wait_until(
            "kube-scheduler /readyz",
            lambda: self._get_ok(f"https://127.0.0.1:{self.scheduler_port}/readyz"),
            deadline,
            peer,
        )

    # -- Kueue

    def _kueue_config_dir(self) -> Path:
        return self.cache_dir / "kueue-config"

    def _kueue_url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.kueue_webhook_port}{path}"

    def _kueue_crds(self) -> Iterator[JSON]:
        """Kueue's CRDs, each conversion webhook patch of its kustomization applied with
        the URL of our webhook server."""
        crd_dir = self._kueue_config_dir() / "crd"
        kustomization = yaml.safe_load((crd_dir / "kustomization.yaml").read_text())
        conversions: dict[str, JSON] = {}
        for patch in kustomization.get("patches") or []:
            doc = yaml.safe_load((crd_dir / patch["path"]).read_text())
            conversion = doc["spec"]["conversion"]
            config = conversion["webhook"]["clientConfig"]
            path = config.pop("service")["path"]
            config.update(url=self._kueue_url(path), caBundle=self.pki.ca_bundle())
            conversions[doc["metadata"]["name"]] = conversion
        for resource in kustomization["resources"]:
            crd = yaml.safe_load((crd_dir / resource).read_text())
            name = crd["metadata"]["name"]
            if name in conversions:
                crd["spec"]["conversion"] = conversions[name]
            yield crd

    def _kueue_webhooks(self) -> Iterator[JSON]:
        """Kueue's webhook configurations, with the patches of its kustomization (merged
        by webhook name), named as an install names them, calling our server."""
        hook_dir = self._kueue_config_dir() / "webhook"
        kustomization = yaml.safe_load((hook_dir / "kustomization.yaml").read_text())
        patches: dict[tuple[str, str], JSON] = {}
        for item in kustomization.get("patches") or []:
            doc = yaml.safe_load(item["patch"])
            for hook in doc.get("webhooks") or []:
                patches[(doc["kind"], hook["name"])] = hook
        for doc in yaml.safe_load_all((hook_dir / "manifests.yaml").read_text()):
            if not doc:
                continue
            doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
            for hook in doc["webhooks"]:
                hook.update(patches.get((doc["kind"], hook["name"]), {}))
                path = hook["clientConfig"].pop("service")["path"]
                hook["clientConfig"] = {
                    "url": self._kueue_url(path),
                    "caBundle": self.pki.ca_bundle(),
                }
            yield doc

    def _kueue_configuration(self, cert_dir: Path) -> JSON:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.kueue_health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {
                "host": "127.0.0.1",
                "port": self.kueue_webhook_port,
                "certDir": str(cert_dir),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": list(self.kueue_frameworks)},
            "featureGates": dict(self.kueue_feature_gates),
        }

    def _ensure_kueue_metrics_certs(self) -> None:
        if (KUEUE_METRICS_CERTS / "tls.crt").exists() and (
            KUEUE_METRICS_CERTS / "tls.key"
        ).exists():
            return
        try:
            KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
            for name in ("tls.crt", "tls.key"):
                target = KUEUE_METRICS_CERTS / name
                tmp = target.with_suffix(".tmp")
                shutil.copyfile(self.pki.dir / name, tmp)
                tmp.chmod(0o600 if name == "tls.key" else 0o644)
                tmp.replace(target)
        except OSError as exc:
            raise ControlPlaneError(
                f"Kueue needs a certificate pair in {KUEUE_METRICS_CERTS} when its internal "
                f"cert management is off (cmd/kueue reads that fixed path): {exc}"
            ) from exc

    def _wait_established(self, names: Iterable[str], deadline: float) -> None:
        pending = set(names)

        def probe() -> bool:
            for name in sorted(pending):
                crd = self.request(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
                conditions = crd.get("status", {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    pending.discard(name)
            return not pending

        wait_until("Kueue CRDs established", probe, deadline)

    def _start_kueue(self, deadline: float) -> None:
        begin = time.monotonic()
        self._ensure_kueue_metrics_certs()
        self.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}},
            f"/api/v1/namespaces/{KUEUE_NAMESPACE}",
        )
        crd_names = []
        for crd in self._kueue_crds():
            name = crd["metadata"]["name"]
            self.apply(crd, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            crd_names.append(name)
        self._wait_established(crd_names, deadline)
        self.startup_seconds["kueue-crds"] = time.monotonic() - begin

        cert_dir = self.dir / "kueue-certs"
        cert_dir.mkdir(exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copyfile(self.pki.dir / name, cert_dir / name)
        config = self.dir / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(self._kueue_configuration(cert_dir)))
        peer = self._spawn(
            "kueue",
            [
                f"--config={config}",
                f"--zap-log-level={os.environ.get('GANGPREEMPT_PEERS_KUEUE_LOG', 'info')}",
            ],
            env={"KUBECONFIG": str(self.kubeconfig_for(KUEUE))},
        )
        wait_until(
            "kueue /readyz",
            lambda: self._get_ok(f"http://127.0.0.1:{self.kueue_health_port}/readyz"),
            deadline,
            peer,
        )
        self.startup_seconds["kueue-readyz"] = time.monotonic() - begin
        for doc in self._kueue_webhooks():
            plural = doc["kind"].lower() + "s"
            self.apply(
                doc,
                f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}",
            )
        self._wait_kueue_reconciles(deadline)

    def _wait_kueue_reconciles(self, deadline: float) -> None:
        """/readyz only says the webhook server listens; the controllers may still be
        syncing their caches. A throwaway ClusterQueue turning Active (through the
        webhooks, then the reconciler) and then going away proves both work."""
        path = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
        name = "gangpreempt-readiness-probe"
        self.request(
            "POST",
            path,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {"namespaceSelector": {}},
            },
        )

        def active() -> bool:
            conditions = self.request("GET", f"{path}/{name}").get("status", {}).get("conditions")
            return any(c["type"] == "Active" and c["status"] == "True" for c in conditions or [])

        kueue = next(p for p in self.peers if p.name == "kueue")
        wait_until("Kueue reconciling (ClusterQueue Active)", active, deadline, kueue)
        self.request("DELETE", f"{path}/{name}")

        def gone() -> bool:
            try:
                self.request("GET", f"{path}/{name}")
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return True
                raise
            return False

        wait_until("readiness ClusterQueue deleted", gone, deadline, kueue)
