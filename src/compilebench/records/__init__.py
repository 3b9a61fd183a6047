"""The ground floor: every format that crosses a boundary, and the reading and writing of them.

`formats` holds the records a process, a plan or a result line carries (`ModelSpec`, `TimingSpec`, `TrialSpec`,
`TrialResult`, `Plan`, ...), `invocation` what an invocation's loop and context say, `reading` and `writing` how
they are read and written (atomically, under a lock). It imports nothing else of compilebench, so every part of the
project stands on it, and it travels in `runner.pyz` with the harness (the trial side) and the analysis.
"""
