"""What a trial process imports, and the launcher that starts them: on any machine with torch and transformers.

The boundary of the project: nothing here imports MLflow, DVC, pandas, omegaconf or matplotlib (tests/test_boundary.py
starts a fresh interpreter and checks), so an exported plan runs on a bare GPU image. `records` holds the typed
records that cross it (specs, results, plans), `invocation` what an invocation's runs share and the loop a plan
carries, `trial` is the process (`compiling` how it compiles a variant), `timing`, `checks`, `models`, `fingerprint`
and `sample_stats` what it measures with, `launcher` runs processes in the plan's order (`results_folder` what it
writes), `files` writes atomically.
"""
