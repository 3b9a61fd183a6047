"""`python -m compilebench.benchmark`: the benchmark stage (stage.py)."""

from compilebench.benchmark.stage import main

main()
