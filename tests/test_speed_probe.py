"""benchmarks/speed_probe.py: the fit that judged a speed probe as a covariate, on a known answer and on its record."""

import math
import re
import sys

import pytest

RECORD = "benchmarks/results/2026-11-28-epyc-speed-probe"


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
    """Every row of the README's table for this run, number for number, from the run's raw rounds."""
    speed_probe.summarize([repo_root / RECORD / f"{run}.jsonl"])
    printed = capsys.readouterr().out
    rows = {tuple(cell.strip() for cell in line.strip("|").split("|"))[:2]: line for line in printed.splitlines()
            if line.startswith("| ") and "_ms" in line}  # fmt: skip
    assert len(rows) == 10
    readme = (repo_root / RECORD / "README.md").read_text()
    section = readme.split("## Processes one after the other" if run == "sequential" else "## Pairs alive together")[1]
    for (probe, metric), line in rows.items():
        numbers = re.findall(r"[+-]?\d\.\d+", line)
        shown = next(
            row for row in section.splitlines() if row.startswith(f"| {probe} ") and f"| {metric[:-3]} |" in row
        )
        assert re.findall(r"[+−-]?\d\.\d+", shown.replace("−", "-")) == numbers, (line, shown)
