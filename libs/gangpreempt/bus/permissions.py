"""Who may do what on the bus: one NATS user per service, each allowed to publish only
its own events (and its own dead letters) and to use only its own consumer and buckets,
plus an ``admin`` user that creates the streams, consumers and buckets beforehand.

The subjects follow from the topology (see ``topology``); the JetStream API subjects are
the ones each service's calls use (checked by the permission tests against a real
nats-server)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import bcrypt

from gangpreempt.bus.explainwire import explain_subject
from gangpreempt.bus.status import status_subject
from gangpreempt.bus.topology import SERVICES, Topology

ADMIN = "admin"


def inbox_prefix(service: str) -> str:
    """The reply-subject prefix a service's connection uses (its private inbox)."""
    return f"_INBOX_{service}"


def _consumer(stream: str, durable: str) -> list[str]:
    """Bind to one durable pull consumer an admin created, fetch from it and ack its
    messages (both ack subject formats: v1, and 2.14's v2 with domain and account hash).
    No CREATE: a service can neither create another consumer nor change the filter of
    its own."""
    return [
        f"$JS.API.CONSUMER.INFO.{stream}.{durable}",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}",
        f"$JS.ACK.{stream}.{durable}.>",
        f"$JS.ACK.*.*.{stream}.{durable}.>",
    ]


def _bucket_read(bucket: str) -> list[str]:
    stream = f"KV_{bucket}"
    return [
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}.>",
    ]


def _bucket(bucket: str) -> list[str]:
    """Read and write a bucket's keys."""
    return [f"$KV.{bucket}.>", *_bucket_read(bucket)]


def _follow(stream: str) -> list[str]:
    """Follow a stream with ordered consumers: ephemeral ones only (the server refuses a
    durable name on this subject), with flow control.

    Nothing else on the stream's consumers: no list of their names, no INFO, no DELETE,
    no PAUSE. The server names an ephemeral consumer at random and delivers it to the
    creator's private inbox, and refuses to change the delivery subject of one that is in
    use: a service that may create consumers can still not find, read or re-point
    another's (NATS permissions see subjects only, so the name a create request carries
    in its body cannot be limited; ``docs/kubernetes.md``, "NATS")."""
    return [
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}",
        f"$JS.FC.{stream}.>",
    ]


def service_permissions(topology: Topology, service: str) -> dict[str, object]:
    """``{"publish": {"allow": [...]}, "subscribe": {"allow": [...]}}`` for ``service``.

    ingest    STATE (and deletes its spent chunks); its consumer; reads and follows the
              leases (the sim checks tokens); its status
    quota     its events; its consumer; the plan records (read, write, follow); its status;
              its own lease (key ``quota``)
    victims   its events; its consumer; the plan records (read); answers explain requests
    actuator  its events; its consumer (quota's admission check decisions); the plan
              records (read, write, follow); the leases; the sim
    """
    if service not in SERVICES:
        raise ValueError(f"unknown service {service!r}")
    plans, leases = topology.plans_bucket, topology.leases_bucket
    publish = ["$JS.API.INFO", topology.dlq_subject(service), *_follow(topology.state_stream)]
    subscribe = [f"{inbox_prefix(service)}.>"]
    if service == "ingest":
        publish.append(f"{topology.prefix}.state.>")
        # the chunks no reader needs any more (``StateChunk``) are deleted from STATE
        publish.append(f"$JS.API.STREAM.MSG.DELETE.{topology.state_stream}")
        subscribe.append(f"{topology.prefix}.sim.*")  # the sim cluster answers requests
        subscribe.append(status_subject(topology, "ingest"))  # how far its timeline is
        publish += _bucket_read(leases) + _follow(f"KV_{leases}")
    else:
        publish.append(topology.service_wildcard(service))
    publish += _consumer(topology.decisions_stream, topology.durable(service))
    if service == "quota":  # no purge: it retires old records with expiring markers
        publish += _bucket(plans) + _follow(f"KV_{plans}")
        subscribe.append(status_subject(topology, "quota"))  # it answers status requests
        publish += [f"$KV.{leases}.quota", *_bucket_read(leases)]  # its own lease only
    if service == "victims":
        publish += _bucket_read(plans)
        subscribe.append(explain_subject(topology))  # it explains plans to the admin
    if service == "actuator":
        publish += [topology.sim_read, topology.sim_evict]
        publish += _bucket(plans) + _follow(f"KV_{plans}") + _bucket(leases)
    # Rights that two needs share (a bucket read and followed) are listed once.
    return {"publish": {"allow": list(dict.fromkeys(publish))}, "subscribe": {"allow": subscribe}}


def password_variable(user: str) -> str:
    """The environment variable (and key of the Secret ``nats-passwords``) that holds
    ``user``'s password where a client reads it: ``NATS_<USER>_PASSWORD``."""
    return f"NATS_{user.upper()}_PASSWORD"


def hash_variable(user: str) -> str:
    """The environment variable holding the bcrypt hash of ``user``'s password, where
    nats-server reads it (docker compose, Kubernetes): ``NATS_<USER>_PASSWORD_HASH``."""
    return f"{password_variable(user)}_HASH"


BCRYPT_COST = 11  # nats-server's own tool's default: about 0.1 s per login


def hash_password(password: str, cost: int = BCRYPT_COST) -> str:
    """The bcrypt hash of ``password`` (``$2b$...``), which nats-server accepts in place
    of the password itself."""
    if not password:
        raise ValueError("an empty password")
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


def hash_value(hashed: str) -> str:
    """How an environment variable holds ``hashed`` for nats-server: double-quoted, since
    nats-server reads a variable's value as configuration, where ``$2b...`` would be a
    reference to another variable."""
    return f'"{hashed}"'


def _users(topology: Topology, passwords: Mapping[str, str]) -> list[dict[str, object]]:
    users = []
    for user, password in sorted(passwords.items()):
        entry: dict[str, object] = {"user": user, "password": password}
        if user != ADMIN:
            perms = service_permissions(topology, user)
            if user in ("ingest", "quota", "victims"):
                # the sim cluster replies to the actuator; quota answers status requests;
                # victims answers the admin's explain requests
                perms["allow_responses"] = True
            entry["permissions"] = perms
        users.append(entry)
    return users


def _block(users: str) -> str:
    return "authorization {\n  users: " + users + "\n}\n"


def server_authorization(topology: Topology, passwords: dict[str, str]) -> str:
    """The ``authorization`` block of nats-server's configuration: ``admin`` with every
    right, each service with its own (``passwords`` maps user to password)."""
    # nats-server's configuration format accepts JSON values.
    return _block(json.dumps(_users(topology, passwords), indent=2))


def env_authorization(topology: Topology) -> str:
    """The same block for ``admin`` and every service, each password a reference to the
    environment variable ``hash_variable(user)`` that holds its bcrypt hash, which
    nats-server resolves when it reads its configuration (an unquoted ``$NAME``): the
    file holds no secret, and the server's environment no password either."""
    users = (ADMIN, *SERVICES)
    text = json.dumps(_users(topology, {u: f"${hash_variable(u)}" for u in users}), indent=2)
    for user in users:
        variable = hash_variable(user)
        text = text.replace(f'"password": "${variable}"', f'"password": ${variable}')
    return _block(text)


__all__ = [
    "ADMIN",
    "BCRYPT_COST",
    "env_authorization",
    "hash_password",
    "hash_value",
    "hash_variable",
    "inbox_prefix",
    "password_variable",
    "server_authorization",
    "service_permissions",
]
