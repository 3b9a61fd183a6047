"""The trial harness's boundary: what a trial process and the launcher import stays torch and transformers (and the
standard library), so an exported plan runs on a bare GPU image. A fresh interpreter imports the entry points."""

import json
import subprocess
import sys

import pytest

FORBIDDEN = ("mlflow", "dvc", "pandas", "omegaconf", "matplotlib")
PROBE = """
import json, sys
import compilebench.trial, compilebench.launcher
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in {forbidden})))
"""


@pytest.mark.parametrize("entry", ["compilebench.trial", "compilebench.launcher"])
def test_the_harness_imports_none_of_the_pipelines_tools(entry):
    probe = PROBE.replace("compilebench.trial, compilebench.launcher", entry).replace(
        "{forbidden}", repr(set(FORBIDDEN))
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [], f"{entry} pulled in the pipeline's tools"
