"""The Xeon's two comparisons of transformers 4.57.6 against 5.23.0 (seed-0, then seed-1 in the same clone), per cell
and metric: each invocation's verdict and B/A where either said a direction, and CONTRADICT where they said opposite
directions (issue 51: two invocations never contradict). Record 2026-11-29-xeon-torch-2.14.1-forecast's across.py on
these two records.

    python benchmarks/results/2026-11-29-xeon-transformers-4.57.6-seed-1/across.py > \\
        benchmarks/results/2026-11-29-xeon-transformers-4.57.6-seed-1/across.txt
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "2026-11-29-xeon-torch-2.14.1-forecast"))

import across  # noqa: E402

across.PREFIX = "2026-11-29-xeon-transformers-4.57.6-"
across.RECORDS = ["seed-0", "seed-1"]

if __name__ == "__main__":
    across.main()
