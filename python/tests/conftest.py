"""pytest setup: the package from the build tree (PYTHONPATH, set by CTest)
and this folder's helpers. A file whose tests were all skipped exits 77,
which CTest reports as skipped (with pytest's reasons in the output)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

_outcomes = {"passed": 0, "skipped": 0, "failed": 0}


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcomes[report.outcome] = _outcomes.get(report.outcome, 0) + 1


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 0 and _outcomes["skipped"] and not _outcomes["passed"] and not _outcomes["failed"]:
        session.exitstatus = 77
