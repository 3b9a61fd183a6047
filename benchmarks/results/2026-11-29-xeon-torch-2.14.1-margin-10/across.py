"""The Xeon's five comparisons of torch 2.14.1 against 2.13.0 (startnet, by-turn, cold-blocks, forecast at ±5%; this
one at ±10%), per cell and metric: each invocation's verdict and B/A where any of them said a direction, and
CONTRADICT where two said opposite directions (issue 51: two invocations never contradict). Record
2026-11-29-xeon-torch-2.14.1-forecast's across.py, unchanged, with this record added.

    python benchmarks/results/2026-11-29-xeon-torch-2.14.1-margin-10/across.py > \\
        benchmarks/results/2026-11-29-xeon-torch-2.14.1-margin-10/across.txt
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "2026-11-29-xeon-torch-2.14.1-forecast"))

import across  # noqa: E402

across.RECORDS = [*across.RECORDS, "margin-10"]  # 2026-11-29-xeon-torch-2.14.1-<name>, oldest first

if __name__ == "__main__":
    across.main()
