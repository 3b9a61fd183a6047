#!/bin/bash
# Every committed comparison of torch 2.14.1 against 2.13.0 on this Xeon VM, and its A/As, judged again at +-5% and
# +-10% (the same blocks; no process runs). Run from the repository root: bash benchmarks/results/2026-11-29-xeon-margin-10/rejudge.sh
for name in torch-2.14.1-startnet torch-2.14.1-by-turn torch-2.14.1-cold-blocks torch-2.14.1-forecast \
            aa-startnet aa-by-turn aa-cold-blocks; do
  for margin in 0.05 0.10; do
    cmd="python benchmarks/decided.py --rejudge turns --margin $margin benchmarks/results/2026-11-29-xeon-$name"
    echo "\$ $cmd"
    $cmd
    echo
  done
done
