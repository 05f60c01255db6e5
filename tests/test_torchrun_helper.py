"""The test launcher runs a program again only after torch's abort at interpreter exit, a few times."""

from __future__ import annotations

import subprocess

from tests.helpers.torchrun import LAUNCHES, TEARDOWN_ABORT, again_after_abort


def launches(*outcomes: tuple[int, str]):
    calls: list[int] = []

    def launch() -> subprocess.CompletedProcess[str]:
        code, output = outcomes[len(calls)]
        calls.append(code)
        return subprocess.CompletedProcess(["torchrun"], code, output, "")

    return launch, calls


def test_an_abort_at_exit_is_run_once_more() -> None:
    launch, calls = launches((-6, f"step 3 loss 0.1\n{TEARDOWN_ABORT}\n"), (0, "step 3 loss 0.1\n"))
    assert again_after_abort(launch).returncode == 0
    assert calls == [-6, 0]


def test_aborts_in_a_row_are_run_again_until_one_finishes() -> None:
    launch, calls = launches((-6, TEARDOWN_ABORT), (-6, TEARDOWN_ABORT), (0, ""))
    assert again_after_abort(launch).returncode == 0
    assert calls == [-6, -6, 0]


def test_an_abort_at_every_launch_fails() -> None:
    launch, calls = launches(*[(-6, TEARDOWN_ABORT)] * LAUNCHES, (0, ""))
    assert again_after_abort(launch).returncode == -6
    assert calls == [-6] * LAUNCHES


def test_any_other_failure_is_not_run_again() -> None:
    launch, calls = launches((1, "Traceback (most recent call last):\nValueError: bad shape\n"), (0, ""))
    assert again_after_abort(launch).returncode == 1
    assert calls == [1]


def test_torchrun_s_own_report_of_the_abort_counts_too() -> None:
    report = "rank      : 1 (local_rank: 1)\n  exitcode  : -6 (pid: 26880)  (SIGABRT)\n"
    launch, calls = launches((1, report), (0, ""))
    assert again_after_abort(launch).returncode == 0
    assert calls == [1, 0]


def test_one_node_of_several_launched_together_aborting_runs_them_all_again() -> None:
    calls: list[int] = []
    outcomes = iter([(0, -6), (0, 0)])

    def launch() -> list[subprocess.CompletedProcess[str]]:
        codes = next(outcomes)
        calls.extend(codes)
        return [subprocess.CompletedProcess([], code, TEARDOWN_ABORT if code else "") for code in codes]

    assert [d.returncode for d in again_after_abort(launch)] == [0, 0]
    assert calls == [0, -6, 0, 0]
