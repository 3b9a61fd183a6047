"""Decisions over results, pure functions of typed records (numpy and scipy; no pipeline tools): `plan` (what runs,
in which order), `per_process` (one process's record), `runs` (processes pooled into runs), `validity` (what makes a
process count), `stats` (intervals between processes, B/A ratios and their verdicts), `compare` (B against A: paired
blocks, verdicts, the noise record), `adaptive` (more blocks where intervals are widest). The launcher runs
`adaptive`'s loop on another machine, so an exported plan carries this package beside the harness.
"""
