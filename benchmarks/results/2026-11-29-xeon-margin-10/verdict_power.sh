#!/bin/bash
# verdict_power.py at +-5% and +-10%, two seeds, priced at the latest comparison's processes, on the A/A's noise record, as a
# fresh clone's first comparison (--history 0). bash benchmarks/results/2026-11-29-xeon-margin-10/verdict_power.sh
cd "$(dirname "$0")/../../.." && PATH=.venv/bin:$PATH
R=benchmarks/results/2026-11-29-xeon-torch-2.14.1-forecast/results/runs.jsonl
C=benchmarks/results/2026-11-29-xeon-aa-cold-blocks/calibration.json
for seed in 0 1; do for m in 0.05 0.10; do
  cmd="python benchmarks/verdict_power.py --runs $R --calibration $C --history 0 --margin $m --seed $seed"
  echo "\$ $cmd"
  start=$(date +%s)
  $cmd
  echo "# $(( $(date +%s) - start )) s"
done; done
