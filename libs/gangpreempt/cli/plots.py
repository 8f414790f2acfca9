"""The replay's PNG plots: GPU utilization over time per policy, the wait-time CDF per
priority class, evictions per day, and each ClusterQueue's use of its quota over time
(where fair sharing's loops would show as queues trading places)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from gangpreempt.simulation.report import Series


def write_plots(directory: str, series: Mapping[str, Series]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    written = []

    fig, ax = plt.subplots(figsize=(10, 4))
    for policy, s in series.items():
        ax.plot(
            [h / 24 for h in range(len(s.utilization))],
            [u * 100 for u in s.utilization],
            label=policy,
            linewidth=1,
        )
    ax.set_xlabel("day of the window")
    ax.set_ylabel("GPUs busy (%)")
    ax.set_ylim(0, 105)
    ax.set_title("GPU utilization per hour")
    ax.legend(loc="lower right", fontsize="small")
    written.append(_save(fig, directory, "utilization.png"))

    priorities = sorted({p for s in series.values() for p in s.waits}, key=int, reverse=True)
    fig, axes = plt.subplots(
        1, max(1, len(priorities)), figsize=(5 * max(1, len(priorities)), 4), squeeze=False
    )
    for ax, priority in zip(axes[0], priorities, strict=False):
        for policy, s in series.items():
            waits = s.waits.get(priority, [])
            if not waits:
                continue
            xs = [max(w, 1.0) for w in waits]
            ys = [(i + 1) / len(waits) for i in range(len(waits))]
            ax.step(xs, ys, where="post", label=policy, linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("wait from arrival to start (s, log)")
        ax.set_ylabel("share of jobs")
        ax.set_title(f"wait CDF, priority {priority}")
        ax.legend(loc="lower right", fontsize="small")
    written.append(_save(fig, directory, "wait_cdf.png"))

    fig, ax = plt.subplots(figsize=(10, 4))
    names = list(series)
    width = 0.8 / max(1, len(names))
    for i, policy in enumerate(names):
        days = series[policy].evictions_per_day
        ax.bar([d + i * width for d in range(len(days))], days, width=width, label=policy)
    ax.set_xlabel("day of the window")
    ax.set_ylabel("evictions")
    ax.set_title("evictions per day")
    ax.legend(fontsize="small")
    written.append(_save(fig, directory, "evictions_per_day.png"))

    shared = {policy: s.queue_share for policy, s in series.items() if s.queue_share}
    if shared:
        fig, axes = plt.subplots(
            len(shared), 1, figsize=(10, 3 * len(shared)), squeeze=False, sharex=True
        )
        for ax, (policy, share) in zip(axes[:, 0], shared.items(), strict=True):
            for queue, values in share.items():
                ax.plot([h / 24 for h in range(len(values))], values, label=queue, linewidth=1)
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
            ax.set_ylabel("GPUs busy / nominal")
            ax.set_title(f"each ClusterQueue's use of its quota per hour, {policy}")
        axes[-1, 0].set_xlabel("day of the window")
        axes[0, 0].legend(loc="upper right", fontsize="x-small", ncol=4)
        written.append(_save(fig, directory, "queue_share.png"))
    return written


def _save(fig: object, directory: str, name: str) -> str:
    import matplotlib.pyplot as plt

    path = os.path.join(directory, name)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return path


__all__ = ["write_plots"]
