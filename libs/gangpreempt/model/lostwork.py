"""The work a victim loses if evicted, in GPU-seconds (``--victim-cost lost-gpu-hours``).

A victim loses its run since its last checkpoint, times its GPUs (a victim without GPUs
counts as one). The last checkpoint is the later of the Workload's
``gangpreempt.io/last-checkpoint`` annotation and the last multiple of its
``gangpreempt.io/checkpoint-interval-seconds`` since it started; without either, its
whole run is lost."""

from __future__ import annotations

from collections.abc import Mapping

from gangpreempt.model.workloads import Workload

GPU_SUFFIX = "gpu"  # nvidia.com/gpu, amd.com/gpu, ...


def gpus_of(requests: Mapping[str, int]) -> int:
    """The GPUs among ``requests`` (every resource named ``*gpu``)."""
    return sum(v for res, v in requests.items() if res.endswith(GPU_SUFFIX))


def lost_gpu_seconds(
    started_ts: float,
    now_ts: float,
    gpus: int,
    interval_s: float | None = None,
    last_checkpoint_ts: float | None = None,
) -> float:
    """The run since the last checkpoint (see the module), times ``gpus`` (at least 1)."""
    last = started_ts
    if interval_s:
        ran = max(0.0, now_ts - started_ts)
        last = started_ts + ran - ran % interval_s
    if last_checkpoint_ts is not None:
        last = max(last, last_checkpoint_ts)
    return max(0.0, now_ts - last) * max(1, gpus)


def workload_lost_work(wl: Workload, started_ts: float, gpus: int, now_ts: float) -> float:
    """``lost_gpu_seconds`` with a Kueue Workload's checkpoint annotations."""
    last = wl.last_checkpoint.timestamp() if wl.last_checkpoint is not None else None
    return lost_gpu_seconds(started_ts, now_ts, gpus, wl.checkpoint_interval_s, last)


__all__ = ["GPU_SUFFIX", "gpus_of", "lost_gpu_seconds", "workload_lost_work"]
