"""Log to MLflow what the last pipeline run could not (store down or unreachable): exactly once.

    python -m compilebench.sync        # reads params.yaml, paths.results and paths.run_info; `make sync`

Every run of paths.results whose uid is not yet in the store is logged under the invocation's parent run (found by
its tag, or created), one a failing store left half-logged (still RUNNING) is completed, and the tables, figures and
report are attached to the parent. Running it twice logs nothing twice. Exit 1 if the store is still failing.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pandas as pd

from compilebench import tracking
from compilebench.analysis.run_record import RunRecord
from compilebench.config import stage_config
from compilebench.records.reading import read_jsonl
from compilebench.report import description, read_comparisons
from compilebench.run_info import RunInfo

LOGGER = logging.getLogger(__name__)


def main() -> None:
    import argparse

    argparse.ArgumentParser(prog="python -m compilebench.sync", description=__doc__.splitlines()[0]).parse_args()
    config = stage_config()
    try:
        run_info = RunInfo.read(config.paths.run_info)
        records = [RunRecord.from_dict(row) for row in read_jsonl(config.paths.results)]
    except (OSError, ValueError) as error:
        LOGGER.error("nothing to sync: %s", error)
        sys.exit(2)
    if run_info.not_logged:
        LOGGER.info("nothing to sync: %s", run_info.not_logged)
        return
    invocation = run_info.invocation_id
    parent = run_info.parent  # made here if the store was down all along: as the benchmark names it
    tracker = tracking.Tracker(
        config.paths.tracking_uri,
        invocation,
        parent.get("name") or f"{config.suite} (synced)",
        parent.get("params"),
        parent.get("tags"),
    )
    try:
        before = tracking.count_invocation_runs(config.paths.tracking_uri, invocation)
    except tracking.StoreError as error:  # the store is still down: say so, change nothing
        LOGGER.error("%s", error)
        sys.exit(1)
    for record in records:
        tracker.log_run(**tracking.run_payload(record))
    compared = pd.DataFrame()
    if Path(config.paths.comparison).exists() and Path(config.paths.comparison).stat().st_size > 1:
        compared = pd.read_csv(config.paths.comparison)
        tracker.log_comparison(read_comparisons(compared))
    paths = config.paths
    tables = [path for path in paths.tables() if path.exists()]
    figures = sorted(Path(paths.plots).glob("*.png")) if Path(paths.plots).exists() else []
    report = [Path(paths.report)] if Path(paths.report).exists() else []
    metrics = json.loads(Path(paths.metrics).read_text()) if Path(paths.metrics).exists() else None
    tracker.log_parent(tables, "summary", metrics=metrics)
    tracker.log_parent(figures, "plots")
    written = Path(paths.summary).exists() and Path(paths.summary).stat().st_size > 1
    summary = pd.read_csv(paths.summary) if written else pd.DataFrame()
    note = description(compared, summary, records, run_info) if report else None
    tracker.log_parent(report, "report", finish_failed=run_info.failed, note=note)
    if tracker.failures:
        LOGGER.error("%d item(s) still not logged: %s", len(tracker.failures), tracker.failures[:5])
        sys.exit(1)
    after = tracking.count_invocation_runs(config.paths.tracking_uri, invocation)
    LOGGER.info(
        "invocation %s: %d run(s) newly logged, %d were already in the store", invocation, after - before, before
    )


if __name__ == "__main__":
    main()
