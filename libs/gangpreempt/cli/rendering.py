"""Decisions for people: a table when the terminal is wide enough for one, else one
block per decision, words wrapped whole; piped output as wide as ``COLUMNS`` says (200
when unset)."""

from __future__ import annotations

import os
import textwrap

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gangpreempt.planning.decisions import ADMIT, PREEMPT, Decision, Plan, plural

_STYLE = {ADMIT: "green", PREEMPT: "yellow"}
# Below this width the table's columns get too narrow for words: blocks instead.
TABLE_MIN_WIDTH = 140
PIPED_WIDTH = 200


def console_for_output() -> Console:
    """A console on standard output: the terminal's width, ``COLUMNS`` when piped (rich
    reads it), else ``PIPED_WIDTH``."""
    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(width=PIPED_WIDTH)
    return console


def _flavors(d: Decision) -> str:
    return "; ".join(
        f"{ps}: " + ", ".join(f"{r}={f}" for r, f in res.items())
        for ps, res in d.flavors.items()
        if res
    )


def _victims(d: Decision) -> list[str]:
    return [
        f"{v.object} ({v.reason}{', evicting' if v.evicting else ''}"
        f"{f', {len(v.pods)} pods' if len(v.pods) > 1 else ''})"
        for v in d.victims
    ]


def _placement(d: Decision) -> list[str]:
    return [f"{p.removeprefix('Pod/')} -> {n}" for p, n in d.placement.items()]


def _outcome(d: Decision) -> str:
    style = _STYLE.get(d.outcome, "red")
    return f"[{style}]{d.outcome}[/{style}]"


def _preemptor(d: Decision) -> str:
    return f"{d.preemptor} (for {d.owner})" if d.owner else d.preemptor


def summary(plan: Plan) -> str:
    counts: dict[str, int] = {}
    for d in plan.decisions:
        counts[d.outcome] = counts.get(d.outcome, 0) + 1
    parts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    return f"{plural(len(plan.decisions), 'decision')}: {parts}"


def _table(plan: Plan, console: Console) -> None:
    table = Table(title=f"gangpreempt plan at {plan.now}", show_lines=True)
    nodes = any(d.placement for d in plan.decisions)
    columns = ["Preemptor", "Queue", "Mode", "Outcome", "Flavors", "Borrow", "Victims", "Why"]
    if nodes:
        columns.insert(7, "Placement")
    for column in columns:
        table.add_column(column, overflow="fold")
    for d in plan.decisions:
        row = [
            escape(_preemptor(d)),
            escape(d.queue.removeprefix("ClusterQueue/")),
            d.mode,
            _outcome(d),
            escape(_flavors(d)),
            str(d.borrowing),
            escape("\n".join(_victims(d))),
            escape(d.message),
        ]
        if nodes:
            row.insert(7, escape("\n".join(_placement(d))))
        table.add_row(*row)
    console.print(table)


def _blocks(plan: Plan, console: Console) -> None:
    """One block per decision: a heading line, then labelled lines wrapped at word
    boundaries under their label."""
    width = max(40, console.width)
    console.print(f"gangpreempt plan at {plan.now}", highlight=False)
    for d in plan.decisions:
        console.print()
        head = f"{_outcome(d)}  {escape(_preemptor(d))}"
        console.print(head, highlight=False, soft_wrap=True)
        fields = [
            ("queue", d.queue.removeprefix("ClusterQueue/") or "-"),
            ("mode", d.mode),
            ("flavors", _flavors(d)),
            ("borrow", str(d.borrowing) if d.borrowing else ""),
        ]
        lines = [(label, value) for label, value in fields if value]
        lines += [("victim", v) for v in _victims(d)]
        lines += [("placed", p) for p in _placement(d)]
        lines.append(("why", d.message))
        for label, value in lines:
            text = textwrap.fill(
                value,
                width=width,
                initial_indent=f"  {label + ':':<9}",
                subsequent_indent=" " * 11,
                break_long_words=False,
                break_on_hyphens=False,
            )
            console.print(escape(text), highlight=False, soft_wrap=True)


def print_table(plan: Plan, console: Console | None = None) -> None:
    """The decisions, or a sentence when there are none, then the counts."""
    if console is None:
        console = console_for_output()
    if not plan.decisions:
        console.print(
            "Nothing is pending: no workload, gang or pod in the input waits for room.",
            highlight=False,
        )
        return
    if console.width >= TABLE_MIN_WIDTH:
        _table(plan, console)
    else:
        _blocks(plan, console)
        console.print()
    console.print(summary(plan), highlight=False)


__all__ = ["PIPED_WIDTH", "TABLE_MIN_WIDTH", "console_for_output", "print_table", "summary"]
