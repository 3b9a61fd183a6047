import json
import os
import resource
import time

import pytest


def _cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    s0, c0 = _cpu()
    t0 = time.time()
    yield
    s1, c1 = _cpu()
    with open("/tmp/acct/tests.jsonl", "a") as f:
        f.write(
            json.dumps(
                {
                    "test": item.nodeid,
                    "self": s1 - s0,
                    "children": c1 - c0,
                    "wall": time.time() - t0,
                    "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                }
            )
            + "\n"
        )
