"""benchmarks/speed_probe.py: the fit that judged a speed probe as a covariate, on a known answer and on its record."""

import math
import re
import sys

import pytest

RECORD = "tests/fixtures/speed-probe"  # a record of 2026-11-28, frozen


@pytest.fixture
def speed_probe(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import speed_probe

    return speed_probe


def test_a_probe_that_explains_a_latency_removes_its_share_and_one_that_does_not_leaves_it(speed_probe):
    probe = [math.sin(i) for i in range(40)]
    own = [0.3 * math.cos(3 * i) for i in range(40)]
    r, sd, left = speed_probe.fit(probe, [p + o for p, o in zip(probe, own, strict=True)])
    assert 0.8 < r < 1 and left < 0.6 * sd
    assert left == pytest.approx(math.sqrt(sum((o - sum(own) / 40) ** 2 for o in own) / 38), rel=0.2)
    r, sd, left = speed_probe.fit(probe, own)
    assert abs(r) < 0.2 and left == pytest.approx(sd, rel=0.05)
    assert speed_probe.less_neighbours([1.0, 3.0, 2.0, 5.0]) == [1.5, -2.0]


@pytest.mark.parametrize("run", ["sequential", "together"])
def test_the_records_tables_are_what_its_raw_rounds_give(repo_root, speed_probe, capsys, run):
    """Every row of the README's tables for this run, number for number, from the run's raw rounds."""
    speed_probe.summarize([repo_root / RECORD / f"{run}.jsonl"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "_ms" in line]
    probe_rows = [line for line in lines if line.split("|")[1].strip() in speed_probe.PROBES]
    assert len(probe_rows) == 10
    readme = (repo_root / RECORD / "README.md").read_text()
    heading = "## Processes one after the other" if run == "sequential" else "## Pairs alive together"
    section = readme.split(heading)[1].split("\n## ")[0].splitlines()
    for line in probe_rows:
        probe, metric = (cell.strip() for cell in line.split("|")[1:3])
        shown = next(row for row in section if row.startswith(f"| {probe} ") and f"| {metric[:-3]} |" in row)
        assert _numbers(shown) == _numbers(line), (line, shown)
    for line in (line for line in lines if line.split("|")[1].strip() in speed_probe.METRICS):  # rounds' share
        metric = line.split("|")[1].strip()[:-3]
        shown = next(row for row in readme.splitlines() if row.startswith(f"| {metric} | 0."))
        assert _numbers(shown) == _numbers(line), (line, shown)


def _numbers(text: str) -> list[str]:
    return re.findall(r"[+-]?\d\.\d+", text.replace("−", "-"))
