"""Every name of compilebench that the package, the tests, the scripts and the record scripts use exists: a name
moved or renamed fails here, not when a script (run once in a while, on a GPU machine or for a record) next runs.
Static: each file's `from compilebench... import name` and `module.attribute` of a compilebench module it imported
(a name the file also assigns, such as a local variable called `launcher`, is left alone)."""

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("src", "tests", "benchmarks", "scripts")


def _files() -> list[Path]:
    found = [path for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]
    return [path for path in found if "results" not in path.relative_to(ROOT).parts]


def _unresolved(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    modules: dict[str, str] = {}  # a name bound to a compilebench module -> that module
    missing = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("compilebench")):
            continue
        module = importlib.import_module(node.module)
        for alias in node.names:
            found = getattr(module, alias.name, None)
            if found is None:
                try:
                    found = importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    missing.append(f"from {node.module} import {alias.name}")
                    continue
            if type(found).__name__ == "module":
                modules[alias.asname or alias.name] = found.__name__
    assigned = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    for node in ast.walk(tree):
        name = node.value.id if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) else None
        if name in modules and name not in assigned and not hasattr(importlib.import_module(modules[name]), node.attr):
            missing.append(f"{modules[name]}.{node.attr}")
    return missing


def test_every_compilebench_name_used_exists():
    missing = {str(path.relative_to(ROOT)): names for path in _files() if (names := _unresolved(path))}
    assert not missing, missing


def test_no_test_reads_a_dated_record():
    """Records under benchmarks/results are data that may be pruned: a test reads a frozen copy under tests/fixtures
    (its README says which record each came from), never the record itself."""
    tests = [path for path in sorted((ROOT / "tests").glob("*.py")) if path != Path(__file__).resolve()]
    readers = [path.name for path in tests if "benchmarks/results" in path.read_text()]
    assert readers == [], readers
