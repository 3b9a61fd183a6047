"""The forecast's price against what this comparison's processes took: the check of record
2026-11-29-xeon-forecast-check (its check.py, unchanged) on this clone's pair, make run's processes (which ran alone)
pricing make compare's.

    python benchmarks/results/2026-11-29-xeon-torch-2.14.1-margin-10/price.py > \\
        benchmarks/results/2026-11-29-xeon-torch-2.14.1-margin-10/price.txt
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "2026-11-29-xeon-forecast-check"))

import check  # noqa: E402

check.PAIRS = [(f"{HERE.name}/make-run", f"{HERE.name}/results")]

if __name__ == "__main__":
    check.main()
