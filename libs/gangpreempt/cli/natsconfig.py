"""``gangpreempt nats-config compose|kubernetes``: print (or write) the nats-server
configuration of a deployment, with a user per service and the permissions the services
need, passwords read from the environment. The committed ``deploy/nats/nats.conf`` and
``deploy/k8s/nats.conf`` are its output (a test checks they are up to date)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gangpreempt.bus import Topology
from gangpreempt.bus.serverconfig import compose_config, kubernetes_config
from gangpreempt.config import load_settings
from gangpreempt.errors import InvalidInput

EXIT_INVALID = 2


@click.command(
    "nats-config",
    epilog="\b\nExamples:\n"
    "  gangpreempt nats-config compose -o deploy/nats/nats.conf\n"
    "  gangpreempt nats-config kubernetes --replicas 3 -o deploy/k8s/nats.conf",
)
@click.argument("target", type=click.Choice(["compose", "kubernetes"]))
@click.option("--prefix", help="Subject and stream prefix [GANGPREEMPT_PREFIX].")
@click.option(
    "--replicas",
    type=click.IntRange(1, 5),
    default=3,
    show_default=True,
    help="kubernetes: pods of the NATS StatefulSet.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this file instead of printing.",
)
def nats_config_command(
    target: str, prefix: str | None, replicas: int, output: Path | None
) -> None:
    """Print the nats-server configuration for docker compose or Kubernetes
    (deploy/nats/nats.conf, deploy/k8s/nats.conf)."""
    try:
        settings = load_settings({"prefix": prefix} if prefix else {})
        topology = Topology(settings.prefix)
    except (InvalidInput, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    if target == "compose":
        text = compose_config(topology)
    else:
        text = kubernetes_config(topology, replicas)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)


__all__ = ["nats_config_command"]
