"""``gangpreempt provision``: create (or update) the streams, consumers' streams and
buckets once, as an admin user, before the services start with
``GANGPREEMPT_PROVISION=false`` (the one-shot ``provision`` service of docker compose,
the provision Job in Kubernetes).

It keeps trying while NATS comes up (a JetStream cluster answers only once it has a
meta leader) and gives up after ``--timeout`` seconds with exit status 1."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click
import nats.errors
import structlog

from gangpreempt.bus import connected_with, provision_with
from gangpreempt.config import Settings, load_settings
from gangpreempt.errors import InvalidInput, Transient
from gangpreempt.telemetry import setup_logging

log = structlog.get_logger("gangpreempt.provision")
RETRY_DELAY = 2.0
EXIT_INVALID = 2


async def provision_once(settings: Settings, force: bool = False) -> None:
    async with connected_with(settings, "gangpreempt-provision") as nc:
        await provision_with(nc.jetstream(), settings, force=force)


async def run_provision(settings: Settings, timeout: float, force: bool = False) -> bool:
    """Provision, retrying until it succeeds (True) or ``timeout`` seconds pass (False).
    ``InvalidInput`` at once when it would lower a stream's replicas and ``force`` is not
    set (retrying cannot mend that)."""
    attempt = 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                attempt += 1
                try:
                    await provision_once(settings, force)
                except (Transient, OSError, nats.errors.Error) as exc:
                    log.warning(
                        "not provisioned yet, retrying",
                        attempt=attempt,
                        error=str(exc) or type(exc).__name__,
                        error_type=type(exc).__name__,
                    )
                    await asyncio.sleep(RETRY_DELAY)
                    continue
                log.info(
                    "provisioned",
                    prefix=settings.prefix,
                    nats=settings.nats_url,
                    replicas=settings.stream_replicas,
                    attempts=attempt,
                )
                return True
    except TimeoutError:
        log.error("gave up provisioning", nats=settings.nats_url, seconds=timeout)
        return False


@click.command(
    "provision",
    epilog="\b\nExamples:\n"
    "  GANGPREEMPT_NATS_USER=admin GANGPREEMPT_NATS_PASSWORD=... \\\n"
    "    gangpreempt provision --nats-url nats://nats:4222\n"
    "  gangpreempt provision --stream-replicas 3 --timeout 300\n"
    "  gangpreempt provision --stream-replicas 1 --force   # lower R3 streams to R1",
)
@click.option("--nats-url", help="NATS server URL [GANGPREEMPT_NATS_URL].")
@click.option("--prefix", help="Subject and stream prefix [GANGPREEMPT_PREFIX].")
@click.option(
    "--stream-replicas",
    help="Copies of each stream and bucket: 1, or 3 on a 3-node JetStream cluster "
    "[GANGPREEMPT_STREAM_REPLICAS].",
)
@click.option(
    "--lease-ttl", help="Lease length in seconds of the leases bucket [GANGPREEMPT_LEASE_TTL]."
)
@click.option("--log-level", help="debug, info, warning, error [GANGPREEMPT_LOG_LEVEL].")
@click.option(
    "--timeout",
    type=float,
    default=120.0,
    show_default=True,
    help="Keep retrying while NATS comes up, at most this many seconds.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Lower the replicas of streams that have more than --stream-replicas (without "
    "it, provision refuses and changes nothing).",
)
def provision_command(timeout: float, force: bool, **kwargs: Any) -> None:
    """Create the streams and buckets as an admin (GANGPREEMPT_NATS_USER / _PASSWORD),
    then exit: run it once before services that run with GANGPREEMPT_PROVISION=false."""
    try:
        settings = load_settings({k: v for k, v in kwargs.items() if v is not None})
    except InvalidInput as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    setup_logging("provision", settings.log_level)
    try:
        done = asyncio.run(run_provision(settings, timeout, force))
    except InvalidInput as exc:
        log.error("not provisioned", error=str(exc))
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    sys.exit(0 if done else 1)


__all__ = ["provision_command", "run_provision"]
