"""Several paths in one smoke run: one path's model runs on a worker thread while the next builds its batches.

The threads must not change what is computed (the reports equal those of a one-by-one run), must
raise the error a one-by-one run would raise (the first request's, in order), and must honour the
caller's stop check (the MCP server's cancellation and time limit), leaving no thread behind.
"""

from __future__ import annotations

import threading

import pytest

from seqpack.data.interrupt import checkpoint, stop_checks, with_stop_check
from seqpack.core.errors import SeqpackError
from seqpack.smoke.run import SmokeRequest, run_packing_smoke_tests


def _comparable(report) -> dict:
    d = report.to_dict()
    d.pop("timings")
    d["data"].pop("source")  # a temporary directory of its own run
    return d


@pytest.mark.slow
def test_paths_on_threads_give_the_reports_of_a_one_by_one_run():
    requests = ["offline", "in_batch", SmokeRequest("offline", faults=("shift_loss_mask",))]
    alone = run_packing_smoke_tests(requests, size="tiny", cp_check=False, workers=1)
    threaded = run_packing_smoke_tests(requests, size="tiny", cp_check=False, workers=2)
    assert [r.result for r in alone] == ["incomplete", "incomplete", "fail"]
    assert [_comparable(r) for r in threaded] == [_comparable(r) for r in alone]


def test_the_first_requests_error_is_raised(tmp_path):
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text('{"prompt": "a", "completion": \n')
    second.write_text('{"prompt": "b"}\n{"prompt": 3, "completion": "x"}\n')
    requests = [SmokeRequest("offline", data=str(first)), SmokeRequest("in_batch", data=str(second))]
    for workers in (1, 2):
        with pytest.raises(SeqpackError) as err:
            run_packing_smoke_tests(requests, size="tiny", cp_check=False, workers=workers)
        # the first request's rows, read in place: the error names the user's file
        assert err.value.file == str(first), (workers, str(err.value))


class _Stopped(Exception):
    pass


def test_the_callers_stop_check_stops_the_run_and_no_thread_outlives_it():
    calls: list[str] = []

    def check() -> None:
        calls.append(threading.current_thread().name)
        if len(calls) > 3:  # some rows of the first path read, then the caller gives up
            raise _Stopped("stop")

    before = threading.active_count()
    with stop_checks(check), pytest.raises(_Stopped):
        run_packing_smoke_tests(["offline", "in_batch", "energon"], size="tiny", cp_check=False, workers=2)
    assert threading.active_count() == before


def test_with_stop_check_carries_the_callers_check_into_another_thread():
    seen: list[str] = []

    def check() -> None:
        seen.append(threading.current_thread().name)

    with stop_checks(check):
        work = with_stop_check(checkpoint)
    worker = threading.Thread(target=work, name="worker")
    worker.start()
    worker.join()
    checkpoint()  # outside the block: no check here
    unwrapped = threading.Thread(target=with_stop_check(checkpoint))  # wrapped without a check: nothing to call
    unwrapped.start()
    unwrapped.join()
    assert seen == ["worker"]


def test_workers_must_be_positive():
    with pytest.raises(SeqpackError, match="workers"):
        run_packing_smoke_tests(["offline"], size="tiny", cp_check=False, workers=0)
