"""The noise record a comparison's runs would have left judged from each process's median (before pairing by turn)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/, for decided.py
import decided

from compilebench.analysis import compare, noise_record

record_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
compared = decided.rejudged(record_dir / "results" / "comparison.csv", "medians")
key = json.loads((record_dir / "calibration.json").read_text())
[calibration_key] = key
measured = compare.noise_measured(compared)
out.write_text(json.dumps({calibration_key: noise_record.record_noise(None, "medians", measured, {})}))
print(noise_record.pooled_by_metric(noise_record.machine_noise(noise_record.load_calibrations(out)[calibration_key])))
