"""The invocation's run info: the labels in their order (the baseline first); files of earlier versions read back."""

import json

import pytest

from compilebench.run_info import RunInfo


def test_the_labels_are_written_in_order_and_read_from_an_older_files_environments(repo_root, tmp_path):
    info = RunInfo(
        "inv",
        "compilebench",
        labels=("torch-2.14.1", "current"),
        environments={"current": {"name": "current"}, "torch-2.14.1": {"name": "torch-2.14.1"}},
        failed_runs=("m bs1 default [current]: oom",),
        crashed=False,
    )
    path = tmp_path / "run_info.json"
    path.write_text(json.dumps(info.to_dict()))
    again = RunInfo.read(path)
    assert again == info and again.labels[0] == "torch-2.14.1"  # the baseline is named, not the dict's first key
    assert not again.failed  # a run failed but none crashed: the parent run ends FINISHED
    older = RunInfo.read(repo_root / "tests/fixtures/aa-2026-11-28/results/run_info.json")
    raw = json.loads((repo_root / "tests/fixtures/aa-2026-11-28/results/run_info.json").read_text())
    assert "labels" not in raw and older.labels == tuple(raw["environments"]) == ("current", "current#2")
    assert RunInfo.from_dict({"invocation_id": "i", "failed_runs": ["x"]}).failed  # before `crashed`: any failure


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"invocation_id": "i", "enviroments": {}}', "unknown keys \\['enviroments'\\]"),
        ("[1]", "not a JSON object"),
        ('{"experiment": "e"}', "no `invocation_id`"),
        ('{"invocation_id": ', "Expecting value"),
    ],
)
def test_a_run_info_that_is_not_one_is_refused_naming_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "run_info.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as error:
        RunInfo.read(path)
    assert str(path) in str(error.value)
