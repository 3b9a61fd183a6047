"""A pytest plugin: each test's worker, start and end (setup to teardown) as a JSON line in TIMELINE (an env var).

PYTHONPATH=RECORD pytest -n 2 --dist loadgroup -p timeline_plugin ...
"""

import json
import os
import time

_started: dict[str, float] = {}


def pytest_runtest_logstart(nodeid, location):
    _started[nodeid] = time.time()


def pytest_runtest_logreport(report):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if report.when == "teardown" and worker:  # on the workers only (the controller sees each report again)
        with open(os.environ["TIMELINE"], "a") as sink:
            line = {"w": worker, "id": report.nodeid, "start": _started.get(report.nodeid), "end": time.time()}
            sink.write(json.dumps(line) + "\n")
