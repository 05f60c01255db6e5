"""The one process pool of every tool: results in input order, and a worker that dies (a file
that crashes the parser, runs out of memory or recurses too deep) costs only its own file."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

J = TypeVar("J")
R = TypeVar("R")

SERIAL_BELOW = 8  # fewer jobs than this run in the calling process: a pool costs more


def _run_chunk(work: Callable[[J], R], chunk: Sequence[J]) -> list[R]:
    return [work(job) for job in chunk]


def run_jobs(
    work: Callable[[J], R],
    jobs: Sequence[J],
    workers: int,
    failed: Callable[[J, str], R],
) -> list[R]:
    """`work(job)` for every job, in order. `work` must be picklable (a module-level function).

    `failed(job, why)` stands in for a job whose worker died or raised: the job is run once more,
    alone in a fresh worker, so that the files sharing its chunk still get their own result and
    the dead one is named, and never in this process (one poisonous file must not end the run).
    """
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(jobs) < SERIAL_BELOW:
        return [_guarded(work, job, failed) for job in jobs]
    size = max(1, min(64, len(jobs) // (workers * 8)))
    chunks = [jobs[i : i + size] for i in range(0, len(jobs), size)]
    results: list[R] = []
    retry: list[int] = []
    with ProcessPoolExecutor(max_workers=min(workers, len(chunks))) as pool:
        futures = [pool.submit(_run_chunk, work, chunk) for chunk in chunks]
        for future, chunk in zip(futures, chunks, strict=True):
            try:
                results.extend(future.result())
            except Exception:  # a worker died or a job raised: find which, one job at a time
                retry.extend(range(len(results), len(results) + len(chunk)))
                results.extend([None] * len(chunk))  # type: ignore[list-item]
    for index in retry:
        results[index] = _alone(work, jobs[index], failed)
    return results


def _guarded(work: Callable[[J], R], job: J, failed: Callable[[J, str], R]) -> R:
    try:
        return work(job)
    except Exception as exc:
        return failed(job, f"{type(exc).__name__}: {exc}")


def _alone(work: Callable[[J], R], job: J, failed: Callable[[J, str], R]) -> R:
    with ProcessPoolExecutor(max_workers=1) as solo:
        try:
            return solo.submit(work, job).result()
        except BrokenProcessPool as exc:
            return failed(job, f"the worker died ({exc})")
        except Exception as exc:
            return failed(job, f"{type(exc).__name__}: {exc}")
