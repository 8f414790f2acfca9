"""Tables for people (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from gangpreempt.planning.decisions import ADMIT, PREEMPT, Plan

_STYLE = {ADMIT: "green", PREEMPT: "yellow"}


def print_table(plan: Plan, console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=200)
    table = Table(title=f"gangpreempt plan at {plan.now}", show_lines=True)
    nodes = any(d.placement for d in plan.decisions)
    columns = ["Preemptor", "Queue", "Mode", "Outcome", "Flavors", "Borrow", "Victims", "Why"]
    if nodes:
        columns.insert(7, "Placement")
    for column in columns:
        table.add_column(column, overflow="fold")
    for d in plan.decisions:
        flavors = "; ".join(
            f"{ps}: " + ", ".join(f"{r}={f}" for r, f in res.items())
            for ps, res in d.flavors.items()
            if res
        )
        victims = "\n".join(
            f"{v.object} ({v.reason}{', evicting' if v.evicting else ''}"
            f"{f', {len(v.pods)} pods' if len(v.pods) > 1 else ''})"
            for v in d.victims
        )
        style = _STYLE.get(d.outcome, "red")
        row = [
            d.preemptor,
            d.queue.removeprefix("ClusterQueue/"),
            d.mode,
            f"[{style}]{d.outcome}[/{style}]",
            flavors,
            str(d.borrowing),
            victims,
            d.message,
        ]
        if nodes:
            row.insert(
                7, "\n".join(f"{p.removeprefix('Pod/')} -> {n}" for p, n in d.placement.items())
            )
        table.add_row(*row)
    console.print(table)
    counts: dict[str, int] = {}
    for d in plan.decisions:
        counts[d.outcome] = counts.get(d.outcome, 0) + 1
    summary = (
        ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
        or "no pending workloads"
    )
    console.print(f"{len(plan.decisions)} decisions: {summary}")


__all__ = ["print_table"]
