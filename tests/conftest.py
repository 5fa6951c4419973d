import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# auto's tuning cache (SCALECOMM_TUNING_FILE) would carry one test's
# measurements into the next; tests that exercise it set their own file.
os.environ.setdefault("SCALECOMM_TUNING_FILE", "none")


def pytest_runtest_logreport(report):
    """SC_TEST_FAILURE_LOG=path appends each failure's report to path as it
    happens, so a run cut off by a time limit still says why its tests failed."""
    path = os.environ.get("SC_TEST_FAILURE_LOG")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"==== {report.nodeid} ({report.when}, {report.duration:.1f} s)\n{report.longreprtext}\n")
