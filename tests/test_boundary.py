"""The boundaries: what travels (the runner: `records/`, the formats and their reading and writing, which import
nothing else of the project; `harness/`, what a trial process and the launcher import; `analysis/`, the
loop the runner adds blocks with; `runner.py`) imports the standard library, torch, transformers, numpy and scipy
only, so an exported plan runs on a bare GPU image. A fresh interpreter imports every module of it; a static check
keeps each package's imports inside what may travel, with no exemption. And the whole package: no two modules import
each other in a loop, and no module holds more than 40 definitions."""

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


@pytest.mark.parametrize("package", ["records", "harness", "analysis", "runner"])
def test_what_travels_imports_none_of_the_pipelines_tools(package):
    modules = ["compilebench.runner"] if package == "runner" else _modules(package)
    probe = PROBE.format(modules=modules, forbidden=set(FORBIDDEN))
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


ALLOWED = {
    "records": {"records"},  # the ground floor: nothing else of the project
    "harness": {"records", "harness"},
    "analysis": {"records", "harness", "analysis"},
    "runner.py": {"records", "harness", "analysis"},
}


def _travelling(part: str) -> list[Path]:
    return [PACKAGE / part] if part.endswith(".py") else sorted((PACKAGE / part).glob("*.py"))


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_each_part_imports_only_what_travels_with_it(part):
    for path in _travelling(part):
        outside = _compilebench_imports(path) - ALLOWED[part]
        assert not outside, f"{path.relative_to(PACKAGE)} imports compilebench's {sorted(outside)}, which stay home"


def _module_graph() -> dict[str, set[str]]:
    """Each module of the package (dotted, below compilebench) and the package's modules it imports, anywhere in it."""
    names = {".".join(path.relative_to(PACKAGE).with_suffix("").parts): path for path in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in names.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("compilebench"):
                base = node.module.split(".", 1)[1] if "." in node.module else ""
                for alias in node.names:
                    target = f"{base}.{alias.name}".strip(".")
                    found.add(target if target in names else base)
            elif isinstance(node, ast.Import):
                found |= {alias.name.split(".", 1)[1] for alias in node.names if alias.name.startswith("compilebench.")}
        graph[name] = {
            target for target in found if target in names and target != name and not target.endswith("__init__")
        }
    return graph


def test_no_two_modules_import_each_other_in_a_loop():
    graph, cycles = _module_graph(), []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, f"modules importing each other in a loop: {cycles}"


MAX_DEFINITIONS = 40  # functions, classes and methods in one module: what a reader holds as one noun (now at most 38)


def definitions(source: str) -> int:
    """A module's functions and classes and its classes' methods (not nested helpers): how much it asks a reader to
    hold, however the formatter lays it out."""
    tree = ast.parse(source)
    top = [node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    methods = [
        node
        for owner in top
        if isinstance(owner, ast.ClassDef)
        for node in owner.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    return len(top) + len(methods)


def test_no_module_holds_more_than_40_definitions():
    large = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := definitions(path.read_text())) > MAX_DEFINITIONS
    }
    assert not large, (
        f"modules of more than {MAX_DEFINITIONS} definitions (split each into modules of one noun): {large}"
    )


def test_the_size_bar_counts_definitions_not_lines():
    packed = "def a(): pass\nclass B:\n    def c(self): pass\n    def d(self): pass\n"
    laid_out = packed.replace(": pass", ":\n        pass").replace("def a():\n        pass", "def a():\n    pass")
    assert definitions(packed) == definitions(laid_out) == 4


# What a bare GPU image has: torch, transformers (which brings PyYAML and, for its image processors, Pillow), numpy,
# scipy. Every import counts, module-level or inside a function (a `main()` importing pandas fails there too).
TRAVELS = {"torch", "transformers", "numpy", "scipy", "yaml", "PIL", "compilebench"}


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_every_import_of_what_travels_is_there_on_a_bare_gpu_image(part):
    for path in _travelling(part):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in TRAVELS, f"{path.name}:{node.lineno} {name}"
