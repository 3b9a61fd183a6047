"""The harness boundary: what a trial process, the launcher and the loop it runs import stays the standard library,
torch, transformers, numpy and scipy, so an exported plan runs on a bare GPU image. A fresh interpreter imports every
module of `harness/` and `analysis/`; a static check keeps each package's imports inside what may travel."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

FORBIDDEN = ("mlflow", "dvc", "pandas", "omegaconf", "matplotlib")
PACKAGE = Path(__file__).resolve().parents[1] / "src" / "compilebench"
PROBE = """
import importlib, json, sys
for name in {modules}:
    importlib.import_module(name)
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in {forbidden})))
"""


def _modules(package: str) -> list[str]:
    return [f"compilebench.{package}.{path.stem}" for path in sorted((PACKAGE / package).glob("*.py"))]


@pytest.mark.parametrize("package", ["harness", "analysis"])
def test_what_travels_imports_none_of_the_pipelines_tools(package):
    probe = PROBE.format(modules=_modules(package), forbidden=set(FORBIDDEN))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [], f"compilebench.{package} pulled in the pipeline's tools"


def _compilebench_imports(path: Path) -> set[str]:
    """The packages or top-level modules of compilebench a file imports (`harness`, `analysis`, `config`, ...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "compilebench":
            parts = node.module.split(".")[1:]
            found |= {parts[0]} if parts else {alias.name for alias in node.names}
    return found


ALLOWED = {"harness": {"harness"}, "analysis": {"harness", "analysis"}}
LOOP = {"harness/launcher.py": {"analysis"}}  # the launcher runs the pipeline's own loop on another machine


@pytest.mark.parametrize("package", ["harness", "analysis"])
def test_each_package_imports_only_what_travels_with_it(package):
    for path in sorted((PACKAGE / package).glob("*.py")):
        allowed = ALLOWED[package] | LOOP.get(f"{package}/{path.name}", set())
        outside = _compilebench_imports(path) - allowed
        assert not outside, f"{package}/{path.name} imports compilebench's {sorted(outside)}, which stay home"


# What a bare GPU image has: torch, transformers (which brings PyYAML and, for its image processors, Pillow), numpy,
# scipy. Every import counts, module-level or inside a function (a `main()` importing pandas fails there too).
TRAVELS = {"torch", "transformers", "numpy", "scipy", "yaml", "PIL", "compilebench"}


@pytest.mark.parametrize("package", ["harness", "analysis"])
def test_every_import_of_what_travels_is_there_on_a_bare_gpu_image(package):
    for path in sorted((PACKAGE / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in TRAVELS, f"{package}/{path.name}:{node.lineno} {name}"
