"""Settings of the services: one frozen Struct, from ``GANGPREEMPT_*`` variables and
command-line flags (flags win). A bad value stops start-up, naming the variable."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from gangpreempt.errors import InvalidInput

if TYPE_CHECKING:
    from gangpreempt.planning.budget import Budget

SERVICES = ("ingest", "quota", "victims", "actuator")

ENV_PREFIX = "GANGPREEMPT_"


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str = "nats://127.0.0.1:4222"
    nats_user: str | None = None
    nats_password: str | None = None
    # A CA certificate (PEM file) the NATS server's certificate must be signed by: the
    # connection is then TLS from its first byte (the server's tls block has
    # handshake_first). None: no TLS.
    nats_ca: str | None = None
    prefix: str = "gp"
    log_level: str = "info"
    # Create the streams, consumers and buckets at start (needs a user allowed to; with
    # per-service users an admin provisions beforehand and services run with false).
    provision: bool = True
    # NATS stream replicas when provisioning (1 locally, 3 on a 3-node JetStream cluster)
    stream_replicas: int = 1
    # Port of the /healthz and /readyz HTTP endpoints (0: none)
    health_port: int = 0
    # ingest
    source: str = "manifests"  # manifests | kubernetes
    scenario: str | None = None  # a manifests file or folder (with an optional timeline.yaml)
    # kubernetes (ingest source and actuator sink): a kubeconfig file, else in-cluster
    kubeconfig: str | None = None
    kube_context: str | None = None
    relist_interval: float = 300.0  # seconds between full relists that republish the state
    sim: bool = True  # ingest keeps a simulated cluster that applies admissions and evictions
    termination_delay: float = 2.0  # seconds a victim keeps its quota after it is actuated
    # A file where the sim keeps what it must not forget across an ingest restart (start
    # time, timeline steps fired, evictions); when it exists, ingest rebuilds the sim's
    # world from STATE instead of publishing the scenario again. None: no journal.
    sim_journal: str | None = None
    poll_interval: float = 1.0  # seconds between re-reads of the manifests
    # ingest: a publish of at least this many STATE changes (a starting state, a relist,
    # a burst of the sim's) goes in chunks of this many, one message each; 0: one message
    # per change always
    state_chunk: int = 256
    # quota
    cycle_delay: float = 0.05  # seconds to gather state changes before an admission cycle
    # Which pending workloads gangpreempt decides for: all of them (it is the only
    # scheduler, as in the sim), or only those of ClusterQueues that list one of its
    # AdmissionChecks (a real cluster, where Kueue decides the others).
    authority: str = "all"  # all | admission-check
    # act: gangpreempt preempts (through the saga) and places; shadow: it writes nothing
    # to the cluster, and compares each preemption Kueue or kube-scheduler makes with
    # what it would have done (gp.quota.shadow-compared, gangpreempt_shadow_* metrics).
    mode: str = "act"  # act | shadow
    # shadow: seconds after a peer's last victim before its preemption is compared (a
    # peer marks its victims one by one)
    shadow_settle: float = 2.0
    # The first Retry of gangpreempt's admission check asks Kueue to wait this long; it
    # doubles with Kueue's retryCount, up to 300 s.
    check_backoff: float = 10.0
    # The room a Kueue preemptor's victims freed stays its own this many seconds at most,
    # waiting for Kueue to reserve it (reservations Kueue makes for others there are sent
    # back at once); then others may take it.
    hold_timeout: float = 120.0
    # quota and victims: the victims the rules allow in the peers' order, or the set
    # losing least work, at quota level and on the nodes (``plan --victim-cost``)
    victim_cost: str = "kueue-order"  # kueue-order | lost-gpu-hours
    # quota: namespaces no victim is ever taken from, whatever a proposal says
    # (comma-separated; planning/legitimacy.py)
    protected_namespaces: str = "kube-system,gangpreempt"
    # actuator: a pod gated by gangpreempt that nothing placed within this many seconds
    # is released unchanged (fail: open), or kept gated and reported (fail: closed).
    gate_timeout: float = 600.0
    gate_fail: str = "open"  # open | closed
    # actuator
    sink: str = "sim"  # sim | log | kubernetes
    # How a victim pod goes: through the Eviction API, PodDisruptionBudgets honoured (the
    # default: the actuator then needs no pod delete or patch); deleted as kube-scheduler
    # does; or labelled scheduling.koordinator.sh/soft-eviction for an operator that cleans
    # up and deletes it. Kueue Workloads are always evicted the Kueue way. (The sim deletes
    # for eviction and delete alike: it has no PodDisruptionBudget.)
    pod_eviction: str = "eviction"  # eviction | delete | soft-eviction
    # kubernetes sink: victim pod writes in flight at once (a gang's pods concurrently)
    eviction_concurrency: int = 16
    # Seconds a preemption request waits for its proposal (quota then gives it up and
    # retries), and a confirmed plan for a live read that works (the actuator then drops it).
    plan_timeout: float = 10.0
    lease_ttl: float = 10.0  # quota's and the actuator's leases
    # quota: seconds an ended plan's record is kept (then deleted, and its delete marker
    # purged as long again later: the bucket holds what is recent, not every plan ever)
    record_retention: float = 3600.0
    # quota: a cluster-wide disruption budget (planning/budget.py): "<N> victims/<window>"
    # or "<N> gpu-hours/<window>" (lost work), e.g. "10 victims/1h"; empty: none. Its
    # scope: the whole cluster, or each cohort tree; preemptors above the bypass priority
    # are never held back by it.
    disruption_budget: str = ""
    disruption_budget_scope: str = "cluster"  # cluster | cohort
    disruption_budget_bypass: str = ""  # a priority; empty: none

    def budget(self) -> Budget | None:
        """The disruption budget these settings give, or None (``InvalidInput`` naming
        the variable when it does not parse)."""
        from gangpreempt.planning.budget import parse_budget

        return parse_budget(
            self.disruption_budget,
            self.disruption_budget_scope,
            self.disruption_budget_bypass,
            what=env_name("disruption_budget"),
        )


_FIELDS = {f.name: f for f in msgspec.structs.fields(Settings)}
_POSITIVE = {
    "termination_delay",
    "poll_interval",
    "cycle_delay",
    "plan_timeout",
    "lease_ttl",
    "relist_interval",
    "record_retention",
    "check_backoff",
    "hold_timeout",
    "gate_timeout",
    "shadow_settle",
}
_INTEGERS = {
    "stream_replicas": (1, 5),
    "health_port": (0, 65535),
    "eviction_concurrency": (1, 256),
    "state_chunk": (0, 4096),
}
_CHOICES = {
    "sink": ("sim", "log", "kubernetes"),
    "authority": ("all", "admission-check"),
    "mode": ("act", "shadow"),
    "gate_fail": ("open", "closed"),
    "source": ("manifests", "kubernetes"),
    "pod_eviction": ("eviction", "delete", "soft-eviction"),
    "log_level": ("debug", "info", "warning", "error"),
    "victim_cost": ("kueue-order", "lost-gpu-hours"),
    "disruption_budget_scope": ("cluster", "cohort"),
}


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def _convert(field: str, raw: Any, source: str) -> Any:
    try:
        if _FIELDS[field].type is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true or false")
        if field in _INTEGERS:
            low, high = _INTEGERS[field]
            if isinstance(raw, bool) or not str(raw).strip().lstrip("-").isdigit():
                raise ValueError(f"expected a whole number from {low} to {high}")
            number = int(str(raw).strip())
            if not low <= number <= high:
                raise ValueError(f"expected a whole number from {low} to {high}")
            return number
        if field in _POSITIVE:
            value = float(raw)
            if value < 0:
                raise ValueError("expected a non-negative number of seconds")
            return value
        text = str(raw)
        if field in _CHOICES and text not in _CHOICES[field]:
            raise ValueError(f"expected one of {', '.join(_CHOICES[field])}")
        return text
    except ValueError as exc:
        reason = str(exc)
        if "could not convert" in reason:
            reason = "expected a number of seconds"
        raise InvalidInput(f"{source}: {reason}, got {raw!r}") from None


def load_settings(
    flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in msgspec.structs.fields(Settings):
        name = env_name(f.name)
        if name in env and env[name] != "":
            values[f.name] = _convert(f.name, env[name], name)
    for key, value in (flags or {}).items():
        if value is not None:
            values[key] = _convert(key, value, f"--{key.replace('_', '-')}")
    settings = Settings(**values)
    settings.budget()  # a budget that does not parse fails here, naming its setting
    return settings


__all__ = ["ENV_PREFIX", "SERVICES", "Settings", "env_name", "load_settings"]
