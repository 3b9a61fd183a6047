"""dvc.yaml as a map of the code: each stage re-runs when, and only when, code it runs changes. Reads files only, so
it runs in make test-fast (a missed dep was caught only by the full suite once)."""

import ast
from pathlib import Path

import yaml


def _imports(source: Path, package: Path) -> set[str]:
    """The compilebench modules a source file imports, as paths under the package (`harness/trial.py`)."""
    found = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "compilebench":
            base = node.module.split(".")[1:]
            for parts in [base, *([*base, alias.name] for alias in node.names)]:
                if parts and package.joinpath(*parts).with_suffix(".py").exists():
                    found.add("/".join(parts) + ".py")
                elif parts and package.joinpath(*parts, "__init__.py").exists():  # a package: its __init__ hands on
                    found.add("/".join(parts) + "/__init__.py")
    return found


def test_each_stage_depends_on_exactly_the_code_it_runs(repo_root):
    """dvc.yaml's code deps of a stage are the compilebench modules it imports, transitively (benchmark: also the
    trial process it starts); nothing missing (a change would not re-run it), nothing extra (it would re-run)."""
    package = repo_root / "src" / "compilebench"
    stages = yaml.safe_load((repo_root / "dvc.yaml").read_text())["stages"]
    for stage, body in stages.items():
        entry = f"{stage}.py" if (package / f"{stage}.py").exists() else f"{stage}/__main__.py"  # a module or a wing
        roots = [entry, "harness/trial.py"] if stage == "benchmark" else [entry]
        seen, todo = set(), list(roots)
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo += _imports(package / module, package)
        prefix = "src/compilebench/"
        listed = {dep.removeprefix(prefix) for dep in body["deps"] if dep.startswith(prefix) and dep.endswith(".py")}
        assert listed == seen, f"{stage}: missing {sorted(seen - listed)}, extra {sorted(listed - seen)}"
