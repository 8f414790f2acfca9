"""``gangpreempt``: the command group and its commands."""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, ClassVar

import click
import msgspec

from gangpreempt import __version__
from gangpreempt.collecting import paused
from gangpreempt.config import SERVICES, env_name, load_settings
from gangpreempt.errors import EXIT_INVALID, InvalidInput, Transient
from gangpreempt.manifests import load, parse_time
from gangpreempt.model.cluster import ClusterState
from gangpreempt.planning import plan as make_plan
from gangpreempt.planning import state_warnings
from gangpreempt.preemption.candidates import KUEUE_ORDER, LOST_GPU_HOURS, core_victim_cost


def _now(value: str | None) -> datetime:
    if value is None:
        return datetime.now(UTC).replace(microsecond=0)
    try:
        return parse_time(value)
    except ValueError:
        raise InvalidInput(f"--now: expected an RFC 3339 time, got {value!r}") from None


class _Commands(click.Group):
    """Commands that talk to NATS are imported when they are named: ``plan`` does not
    load the NATS client (a third of its start)."""

    LAZY: ClassVar[dict[str, tuple[str, str]]] = {
        "provision": ("gangpreempt.cli.provision", "provision_command"),
        "nats-config": ("gangpreempt.cli.natsconfig", "nats_config_command"),
        "rbac": ("gangpreempt.cli.rbac", "rbac_command"),
        "simulate": ("gangpreempt.cli.simulate", "simulate_command"),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.LAZY:
            module, attr = self.LAZY[cmd_name]
            command: click.Command = getattr(importlib.import_module(module), attr)
            return command
        return super().get_command(ctx, cmd_name)


def examples(*lines: str) -> str:
    """A command's ``--help`` ending: its examples, as written (click leaves a
    paragraph that starts with \\b unwrapped)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


_FILES = click.option(
    "-f",
    "--filename",
    "paths",
    multiple=True,
    metavar="PATH",
    help="A YAML or JSON file or folder, or - for standard input (kubectl get -o yaml|json "
    "output works). Repeatable.",
)


def _deciding_options(f: Any) -> Any:
    """The options ``plan`` and ``explain`` share: the clock, the output, how gangs are
    searched, and the input's other sources and strictness."""
    for option in reversed(_DECIDING):
        f = option(f)
    return f


victim_cost_option = click.option(
    "--victim-cost",
    type=click.Choice([KUEUE_ORDER, LOST_GPU_HOURS]),
    default=KUEUE_ORDER,
    show_default=True,
    help="Which of the victims the rules allow: in Kueue's and kube-scheduler's order, "
    "or the set that loses least work, at quota level and on the nodes together "
    "(GPUs x time since the last checkpoint: the gangpreempt.io/last-checkpoint or "
    "checkpoint-interval-seconds annotation, else the whole run).",
)


_DECIDING = [
    click.option("--now", metavar="RFC3339", help="Fix the clock (default: the current time)."),
    click.option(
        "--output",
        "-o",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="table for people, json for machines.",
    ),
    click.option(
        "--priority-search/--no-priority-search",
        default=True,
        show_default=True,
        help="Gangs: binary search for the lowest victim priority that lets the gang fit "
        "(KEP-5710); off: every lower-priority candidate, then reprieve.",
    ),
    click.option(
        "--gang-reprieve",
        type=click.Choice(["fixed-placement", "rescheduling"]),
        default="fixed-placement",
        show_default=True,
        help="Gangs: reprieve victims against the one placement found with every candidate "
        "gone (kube-scheduler 1.37), or schedule the gang again at each reprieve (1.36).",
    ),
    click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False),
        help="Read the live cluster once (discovery and list, no watch) with this kubeconfig, "
        "beside or instead of -f.",
    ),
    click.option("--context", "kube_context", metavar="NAME", help="The kubeconfig's context."),
    click.option(
        "--strict",
        is_flag=True,
        help="Warnings are errors: exit 2 after printing them, deciding nothing (unknown "
        "fields, skipped kinds, values read as not set).",
    ),
]


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=examples(
        "gangpreempt plan -f examples/quota-demo",
        "make demo            # gangpreempt up --scenario examples/saga-demo --until-settled",
        "gangpreempt serve quota --nats-url nats://localhost:4222",
    ),
)
@click.version_option(__version__, prog_name="gangpreempt")
def cli() -> None:
    """Decide which running workloads to preempt so a pending gang can start."""


@cli.command(
    epilog=examples(
        "gangpreempt plan -f examples/quota-demo",
        "gangpreempt plan -f cluster/ -f my-job.yaml --workload Job/ml/my-job",
        "kubectl get clusterqueues,localqueues,workloads,nodes,pods -A -o yaml \\",
        "  | gangpreempt plan -f - -o json",
    )
)
@_FILES
@click.option(
    "--workload",
    metavar="KIND/NAMESPACE/NAME",
    help="Evaluate this pending object alone, as the head of its queue.",
)
@_deciding_options
@victim_cost_option
def plan(
    paths: tuple[str, ...],
    workload: str | None,
    now: str | None,
    output: str,
    priority_search: bool,
    gang_reprieve: str,
    strict: bool,
    kubeconfig: str | None,
    kube_context: str | None,
    victim_cost: str,
) -> None:
    """Compute preemption decisions offline from manifests; no cluster, no bus.

    Without --workload, runs one admission pass over every pending Kueue workload in
    Kueue's order, then decides every pending pod and gang on nodes, highest priority
    first, and prints a decision for each. --workload takes Workload/, PodGroup/ or
    Pod/ NAMESPACE/NAME.
    """
    # No cyclic collection from reading to printing: the objects read live until the
    # end, and a collection once reading is done (the collector's counts grown by every
    # object read) would scan all of them, 1-2 s at 20,000 nodes. Nor when it is over
    # (``_settled``).
    with _settled():
        try:
            clock = _now(now)
            loaded = _read_input(paths, kubeconfig, kube_context, output, strict)
            with _progress(output, "deciding"):
                result = make_plan(
                    loaded.state,
                    clock,
                    workload,
                    priority_search=priority_search,
                    rescheduling=gang_reprieve == "rescheduling",
                    victim_cost=core_victim_cost(victim_cost),
                )
        except InvalidInput as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_INVALID)
        if output == "json":
            click.echo(msgspec.json.format(msgspec.json.encode(result), indent=2).decode())
        else:
            from gangpreempt.cli.rendering import print_table  # rich: only for people

            print_table(result)
    _QUICK_EXIT.append(True)
    if loaded.rejected:
        # The rest was decided; the exit status says that something was left out.
        left = len(loaded.rejected)
        click.echo(f"error: {left} object{'' if left == 1 else 's'} left out (see above)", err=True)
        sys.exit(EXIT_INVALID)


@cli.command(
    epilog=examples(
        "gangpreempt explain -f examples/quota-demo --workload Workload/team-a/train",
        "gangpreempt explain -f examples/gang-demo -o json",
        "GANGPREEMPT_NATS_USER=admin GANGPREEMPT_NATS_PASSWORD=... \\",
        "  gangpreempt explain --plan plan-3f9c... --nats-url nats://nats:4222",
        "gangpreempt explain --shadow --kubeconfig ~/.kube/config",
        "gangpreempt explain --shadow --nats-url nats://nats:4222",
    )
)
@_FILES
@click.option(
    "--workload",
    metavar="KIND/NAMESPACE/NAME",
    help="The pending object to explain (default: every pending one, each alone).",
)
@_deciding_options
@click.option(
    "--plan",
    "plan_id",
    metavar="PLAN_ID",
    help="Live: ask the running victims service to explain this plan (as the admin "
    "user: GANGPREEMPT_NATS_USER / _PASSWORD); no -f needed.",
)
@click.option(
    "--shadow",
    is_flag=True,
    help="Shadow mode: each preemption Kueue or kube-scheduler made, beside what "
    "gangpreempt would have done. With -f or --kubeconfig: the preemptions the snapshot "
    "shows (victims still marked); without: those the running services recorded.",
)
@click.option("--nats-url", help="With --plan or --shadow: NATS server URL [GANGPREEMPT_NATS_URL].")
@click.option("--prefix", help="With --plan or --shadow: subject prefix [GANGPREEMPT_PREFIX].")
@victim_cost_option
def explain(
    paths: tuple[str, ...],
    workload: str | None,
    now: str | None,
    output: str,
    priority_search: bool,
    gang_reprieve: str,
    kubeconfig: str | None,
    kube_context: str | None,
    strict: bool,
    plan_id: str | None,
    shadow: bool,
    nats_url: str | None,
    prefix: str | None,
    victim_cost: str,
) -> None:
    """Why a decision is what it is: every running workload, victim or not, with the rule
    that decided it; and for a pending one, what it waits for.

    Each pending object is evaluated alone, as the head of its queue (as plan
    --workload does). With --plan, the running services answer for one of their plans.
    With --shadow, the peers' preemptions beside gangpreempt's decisions.
    """
    from gangpreempt.planning.explaining import explain as explain_one
    from gangpreempt.planning.explaining import explanation_lines

    if plan_id:
        _explain_live(plan_id, workload, nats_url, prefix, output)
        return
    if shadow:
        if paths or kubeconfig:
            _explain_shadow(paths, now, output, kubeconfig, kube_context, strict)
        else:
            _explain_shadow_live(nats_url, prefix, output)
        return
    try:
        clock = _now(now)
        # as in plan: no collection scans what was read, while deciding or after
        with _settled():
            loaded = _read_input(paths, kubeconfig, kube_context, output, strict)
        with paused(), _progress(output, "deciding"):
            cost = core_victim_cost(victim_cost)
            refs = (
                [workload]
                if workload
                else [
                    d.preemptor for d in make_plan(loaded.state, clock, victim_cost=cost).decisions
                ]
            )
            found = [
                explain_one(
                    loaded.state,
                    clock,
                    ref,
                    priority_search=priority_search,
                    rescheduling=gang_reprieve == "rescheduling",
                    victim_cost=cost,
                )
                for ref in refs
            ]
    except InvalidInput as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    if output == "json":
        doc = {"now": clock.isoformat(), "explanations": found}
        click.echo(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode())
    else:
        for e in found:
            for line in explanation_lines(e):
                click.echo(line)
            click.echo("")
    _QUICK_EXIT.append(True)
    if loaded.rejected:
        left = len(loaded.rejected)
        click.echo(f"error: {left} object{'' if left == 1 else 's'} left out (see above)", err=True)
        sys.exit(EXIT_INVALID)


def _shadow_output(now: str, comparisons: list[Any], output: str) -> None:
    from gangpreempt.planning.shadow import comparison_lines

    if output == "json":
        doc = {"now": now, "comparisons": comparisons}
        click.echo(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode())
        return
    if not comparisons:
        click.echo("no preemption by Kueue or kube-scheduler found")
    for c in comparisons:
        for line in comparison_lines(c):
            click.echo(line)
        click.echo("")


def _explain_shadow(
    paths: tuple[str, ...],
    now: str | None,
    output: str,
    kubeconfig: str | None,
    kube_context: str | None,
    strict: bool,
) -> None:
    from gangpreempt.planning.shadow import snapshot_comparisons

    try:
        clock = _now(now)
        loaded = _read_input(paths, kubeconfig, kube_context, output, strict)
        with paused(), _progress(output, "comparing"):
            found = snapshot_comparisons(loaded.state, clock)
    except InvalidInput as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    _shadow_output(clock.isoformat(), found, output)
    _QUICK_EXIT.append(True)


def _explain_shadow_live(nats_url: str | None, prefix: str | None, output: str) -> None:
    import asyncio
    from datetime import UTC, datetime

    from gangpreempt import events
    from gangpreempt.bus import Topology, connected_with
    from gangpreempt.bus.reading import read_subject
    from gangpreempt.config import load_settings
    from gangpreempt.telemetry import setup_logging

    overrides = {"nats_url": nats_url, "prefix": prefix}
    try:
        settings = load_settings({k: v for k, v in overrides.items() if v is not None})
        setup_logging("explain", "warning")
        topology = Topology(settings.prefix)
        subject = topology.event_subject(events.ShadowCompared)

        async def read() -> list[Any]:
            async with connected_with(settings, "gangpreempt-explain", patience=5.0) as nc:
                msgs = await read_subject(nc.jetstream(), topology.decisions_stream, subject)
            return [e for m in msgs for e in events.decode_all(m.data)]

        found = asyncio.run(read())
    except (InvalidInput, Transient, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    _shadow_output(datetime.now(UTC).isoformat(), found, output)


def _explain_live(
    plan_id: str, workload: str | None, nats_url: str | None, prefix: str | None, output: str
) -> None:
    import asyncio

    from gangpreempt.bus import Topology, connected_with
    from gangpreempt.bus.explainwire import ExplainRequest, ask_explain
    from gangpreempt.config import load_settings
    from gangpreempt.planning.explaining import explanation_lines
    from gangpreempt.telemetry import setup_logging

    overrides = {"nats_url": nats_url, "prefix": prefix}
    try:
        settings = load_settings({k: v for k, v in overrides.items() if v is not None})
        setup_logging("explain", "warning")  # connection notes on stderr, not the output

        async def ask() -> Any:
            async with connected_with(settings, "gangpreempt-explain", patience=5.0) as nc:
                request = ExplainRequest(plan_id=plan_id, workload=workload or "")
                return await ask_explain(nc, Topology(settings.prefix), request)

        reply = asyncio.run(ask())
    except (InvalidInput, Transient, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    if output == "json":
        click.echo(msgspec.json.format(msgspec.json.encode(reply), indent=2).decode())
    else:
        if reply.plan_state:
            victims = ", ".join(reply.plan_victims) or "none"
            ended = f" ({reply.plan_reason})" if reply.plan_reason else ""
            click.echo(f"plan {plan_id}: {reply.plan_state}{ended}; its victims: {victims}")
        if reply.explanation is not None:
            click.echo("explained on the state the victims service holds now:")
            for line in explanation_lines(reply.explanation):
                click.echo(line)
    if reply.error:
        click.echo(f"error: {reply.error}", err=True)
        sys.exit(EXIT_INVALID)


def _read_input(
    paths: tuple[str, ...],
    kubeconfig: str | None,
    kube_context: str | None,
    output: str,
    strict: bool,
) -> Any:
    """Read ``-f`` and ``--kubeconfig`` as ``plan`` and ``explain`` do: notes, warnings
    and objects left out on standard error; with ``strict``, exit 2 on any of them."""
    if not paths and not kubeconfig:
        raise InvalidInput("give the input: -f PATH (or - for standard input), or --kubeconfig")
    live: list[Any] = []
    origin = ""
    if kubeconfig:
        with _progress(output, "reading the cluster"):
            live, origin = _live_cluster(kubeconfig, kube_context)
    with _progress(output, "reading the manifests"):
        loaded = load(list(paths), live, origin)
    if not _has_objects(loaded.state):
        loaded.warnings.append(
            f"no objects gangpreempt reads in {', '.join(paths)} (ClusterQueues, "
            "Workloads, Jobs, Nodes, Pods, ...): nothing to decide"
        )
    for note in loaded.notes:
        click.echo(f"note: {note}", err=True)
    warnings = [*loaded.warnings, *state_warnings(loaded.state)]
    for warning in warnings:
        click.echo(f"{'error' if strict else 'warning'}: {warning}", err=True)
    for error in loaded.rejected:
        click.echo(f"error: {error}", err=True)
    if strict and (warnings or loaded.rejected):
        problems = len(warnings) + len(loaded.rejected)
        click.echo(
            f"error: --strict: {problems} problem{'' if problems == 1 else 's'} in the "
            "input; nothing decided",
            err=True,
        )
        sys.exit(EXIT_INVALID)
    return loaded


def _live_cluster(kubeconfig: str, context: str | None) -> tuple[list[Any], str]:
    """The live cluster's objects, read once, and how errors name them."""
    import asyncio

    from gangpreempt.config import Settings
    from services.kube.listing import list_cluster

    settings = Settings(kubeconfig=kubeconfig, kube_context=context)
    objects = asyncio.run(list_cluster(settings))
    return objects, f"kubernetes ({context or 'current context'} of {kubeconfig})"


def _has_objects(state: ClusterState) -> bool:
    return any(getattr(state, f.name) for f in msgspec.structs.fields(state))


@contextmanager
def _settled() -> Iterator[None]:
    """``paused``, and what was made inside is then old to the collector: it goes to the
    oldest generation instead of the youngest, whose count it has grown so far that the
    first object made once the collector runs again would start a collection scanning
    every object read (a second at 20,000 nodes, after the output)."""
    try:
        with paused():
            try:
                yield
            finally:
                gc.freeze()  # out of the young generations, and their counts at 0 ...
    finally:
        gc.unfreeze()  # ... then in the oldest, collected when it is its turn


@contextmanager
def _progress(output: str, what: str) -> Iterator[None]:
    """A spinner on standard error while a long step runs, on a terminal only and not
    with ``-o json`` (whose reader wants nothing but the document)."""
    if output == "json" or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(f"{what}...", spinner="dots"):
        yield


def _service_options(f: Any) -> Any:
    options = [
        click.option("--nats-url", help="NATS server URL [GANGPREEMPT_NATS_URL]."),
        click.option("--prefix", help="Subject and stream prefix [GANGPREEMPT_PREFIX]."),
        click.option(
            "--scenario",
            type=click.Path(exists=True),
            help="ingest: manifests file or folder [GANGPREEMPT_SCENARIO].",
        ),
        click.option(
            "--sim/--no-sim", default=None, help="ingest: run the sim cluster [GANGPREEMPT_SIM]."
        ),
        click.option(
            "--termination-delay",
            help="sim: seconds a victim keeps its quota [GANGPREEMPT_TERMINATION_DELAY].",
        ),
        click.option(
            "--sim-journal",
            help="sim: journal file; if it exists the sim resumes [GANGPREEMPT_SIM_JOURNAL].",
        ),
        click.option(
            "--poll-interval",
            help="ingest: seconds between checks of the manifests [GANGPREEMPT_POLL_INTERVAL].",
        ),
        click.option(
            "--cycle-delay",
            help="quota: seconds to gather changes before a cycle [GANGPREEMPT_CYCLE_DELAY].",
        ),
        click.option("--sink", help="actuator: sim, log or kubernetes [GANGPREEMPT_SINK]."),
        click.option(
            "--pod-eviction",
            help="actuator: eviction, delete or soft-eviction [GANGPREEMPT_POD_EVICTION].",
        ),
        click.option("--source", help="ingest: manifests or kubernetes [GANGPREEMPT_SOURCE]."),
        click.option(
            "--kubeconfig",
            help="kubernetes: kubeconfig file, else in-cluster [GANGPREEMPT_KUBECONFIG].",
        ),
        click.option(
            "--kube-context", help="kubernetes: kubeconfig context [GANGPREEMPT_KUBE_CONTEXT]."
        ),
        click.option(
            "--relist-interval",
            help="kubernetes source: seconds between full relists [GANGPREEMPT_RELIST_INTERVAL].",
        ),
        click.option(
            "--stream-replicas",
            help="NATS stream replicas when provisioning [GANGPREEMPT_STREAM_REPLICAS].",
        ),
        click.option(
            "--health-port",
            help="port of /healthz and /readyz, 0 for none [GANGPREEMPT_HEALTH_PORT].",
        ),
        click.option(
            "--provision/--no-provision",
            default=None,
            help="create streams, consumers, buckets at start [GANGPREEMPT_PROVISION].",
        ),
        click.option(
            "--plan-timeout",
            help="quota, actuator: seconds a plan may wait [GANGPREEMPT_PLAN_TIMEOUT].",
        ),
        click.option(
            "--lease-ttl",
            help="quota, actuator: lease length in seconds [GANGPREEMPT_LEASE_TTL].",
        ),
        click.option(
            "--record-retention",
            help="quota: seconds an ended plan's record is kept [GANGPREEMPT_RECORD_RETENTION].",
        ),
        click.option("--log-level", help="debug, info, warning, error [GANGPREEMPT_LOG_LEVEL]."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _flags(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}


@cli.command(
    epilog=examples(
        "gangpreempt serve quota --nats-url nats://localhost:4222",
        "GANGPREEMPT_SOURCE=kubernetes gangpreempt serve ingest --kubeconfig ~/.kube/config",
        "gangpreempt serve actuator --sink kubernetes --pod-eviction eviction",
    )
)
@click.argument("service", type=click.Choice(SERVICES))
@_service_options
def serve(service: str, **kwargs: Any) -> None:
    """Run one service (what docker compose and the Kubernetes Deployments call)."""
    try:
        from gangpreempt.cli.serve import serve as run_service

        run_service(service, _flags(**kwargs))
    except InvalidInput as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)


@cli.command(
    epilog=examples(
        "gangpreempt up --scenario examples/saga-demo",
        "gangpreempt up --scenario examples/saga-demo --until-settled --timeout 60",
        "gangpreempt up --source kubernetes --kubeconfig ~/.kube/config --sink log",
    )
)
@_service_options
@click.option(
    "--store", type=click.Path(), help="JetStream store folder (default: a temporary one)."
)
@click.option(
    "--until-settled",
    is_flag=True,
    help="Stop once the scenario's timeline has played and nothing moves any more, then summarize.",
)
@click.option(
    "--timeout",
    default=120.0,
    show_default=True,
    help="With --until-settled: give up after this many seconds.",
)
def up(store: str | None, until_settled: bool, timeout: float, **kwargs: Any) -> None:
    """Start nats-server (unless --nats-url), the four services as processes, and a live
    view of the decisions. Ctrl-C stops everything."""
    flags = _flags(**kwargs)
    try:
        settings = load_settings(flags)
    except InvalidInput as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    external = "nats_url" in flags or bool(os.environ.get(env_name("nats_url")))
    import asyncio  # the commands that need it import it (``plan`` starts faster)

    from gangpreempt.cli.up import run_up

    sys.exit(asyncio.run(run_up(settings, external, store, until_settled, timeout)))


# Set by a command whose process may end without tearing its objects down (``plan``:
# freeing what it read of a large cluster took a tenth of its run).
_QUICK_EXIT: list[bool] = []


def main() -> None:
    """The console script: ``cli``, then for ``plan`` an exit that skips freeing every
    object one by one (the output is flushed first; nothing else is pending)."""
    try:
        cli()
    except SystemExit as exc:
        if not _QUICK_EXIT:
            raise
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:  # the reader went away (| head): nothing left to say
            pass
        os._exit(code)


__all__ = ["cli", "main"]
