"""The benchmark stage's wing: the stage itself (`stage`: `python -m compilebench.benchmark`) and what only it and
the tools around it use: the plan's trials as records and the recorder (`recording`), the journal a killed stage
resumes from (`journal`), where trials run (`executors`), plans exported to another machine and brought back
(`exported`), and the price of a plan before it runs (`forecast`). The runner that runs an exported plan there is
not here: it ships alone in runner.pyz (`compilebench.runner`)."""
