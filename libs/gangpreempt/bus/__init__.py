"""The bus: NATS JetStream streams, publishing, consuming, leases and the server."""

from gangpreempt.bus.connecting import connected, connected_with, wait_for_port
from gangpreempt.bus.consuming import HOLD, Consumer, DeadLetters, Delivery
from gangpreempt.bus.following import follow
from gangpreempt.bus.leasing import Lease
from gangpreempt.bus.provisioning import leases_bucket, plans_bucket, provision, provision_with
from gangpreempt.bus.publishing import Oversized, Publisher
from gangpreempt.bus.server import NatsServer, free_port, nats_server_binary
from gangpreempt.bus.topology import SERVICES, Topology, encode_token

__all__ = [
    "HOLD",
    "SERVICES",
    "Consumer",
    "DeadLetters",
    "Delivery",
    "Lease",
    "NatsServer",
    "Oversized",
    "Publisher",
    "Topology",
    "connected",
    "connected_with",
    "encode_token",
    "follow",
    "free_port",
    "leases_bucket",
    "nats_server_binary",
    "plans_bucket",
    "provision",
    "provision_with",
    "wait_for_port",
]
