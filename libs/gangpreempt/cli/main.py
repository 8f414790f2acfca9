"""``gangpreempt``: the command group and its commands."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click
import msgspec

from gangpreempt import __version__
from gangpreempt.cli.rendering import print_table
from gangpreempt.errors import InvalidInput
from gangpreempt.manifests import load, parse_time
from gangpreempt.planning import plan as make_plan
from gangpreempt.planning import state_warnings

EXIT_INVALID = 2


def _now(value: str | None) -> datetime:
    if value is None:
        return datetime.now(UTC).replace(microsecond=0)
    try:
        return parse_time(value)
    except ValueError:
        raise InvalidInput(f"--now: expected an RFC 3339 time, got {value!r}") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gangpreempt")
def cli() -> None:
    """Decide which running workloads to preempt so a pending gang can start."""


@cli.command()
@click.option(
    "-f",
    "--filename",
    "paths",
    multiple=True,
    required=True,
    metavar="PATH",
    help="A YAML file or folder (kubectl get -o yaml output works). Repeatable.",
)
@click.option(
    "--workload",
    metavar="KIND/NAMESPACE/NAME",
    help="Evaluate this pending object alone, as the head of its queue.",
)
@click.option("--now", metavar="RFC3339", help="Fix the clock (default: the current time).")
@click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for machines.",
)
def plan(paths: tuple[str, ...], workload: str | None, now: str | None, output: str) -> None:
    """Compute preemption decisions offline from manifests; no cluster, no bus.

    Without --workload, runs one admission pass over every pending workload in
    Kueue's order and prints a decision for each.
    """
    try:
        clock = _now(now)
        loaded = load(list(paths))
        for warning in [*loaded.warnings, *state_warnings(loaded.state)]:
            click.echo(f"warning: {warning}", err=True)
        result = make_plan(loaded.state, clock, workload)
    except InvalidInput as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    if output == "json":
        click.echo(msgspec.json.format(msgspec.json.encode(result), indent=2).decode())
    else:
        print_table(result)


def main() -> None:
    cli()


__all__ = ["cli", "main"]
