"""experiments/paper.py: the paper's published rows as SPEC gives them, beside rows read from our run folders, each
with its backbone, judge, data, runs, date and settings; no paper number ever lands in a row of ours."""

from __future__ import annotations

import csv
import json

from scripts import load_script


def write_run(folder, setting: str, experiment: str = "table1", archive: bool = False) -> None:
    folder.mkdir(parents=True)
    record = {"method": "tide", "instances": "2", "runs": "2"}
    for i, c in enumerate(("retrieval", "identification", "resolution")):
        for kind in ("coverage", "f1"):
            record[f"{c}_{kind}"] = f"{1.5 + i:.2f}"
            record[f"{c}_{kind}_ci_low"], record[f"{c}_{kind}_ci_high"] = "0.50", "3.25"
    rows = [record] if experiment != "transfer" else [{**record, "inference": "b", "templates_from": "b"}]
    with (folder / f"{experiment}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (folder / f"meta-{experiment}.json").write_text(json.dumps({
        "command": f"experiments/run.py {experiment} --setting {setting} --backbone b", "date": "2027-01-02T03:04:05",
        "backbone": {"backbone": "gpt-5-mini"}, "judge": "llm:openai/gpt-5-mini (probe)", "setting": setting,
        "split": "test", "data": {"name": setting, "version": "v2"}, "instances": ["a", "b"], "runs": 2,
        "settings": {"stop_on": "empty", "template_names": False}}))


def test_paper_rows_and_ours_side_by_side(tmp_path):
    paper = load_script("paper")
    results = tmp_path / "results"
    write_run(results / "ws-run", "workspace")
    write_run(results / "repo-run", "repository")
    write_run(results / "archive" / "old-run", "workspace")
    assert paper.main(["--results", str(results), "--out", str(tmp_path / "out.md")]) == 0
    text = (tmp_path / "out.md").read_text()
    lines = text.splitlines()
    assert ("| paper | GPT-5 mini | TIDE | 69.06 / 70.46 | 67.64 / 68.76 | 76.08 / 77.32 | 16.82 / 18.61 | 17.29 / "
            "19.73 | 15.52 / 17.39 |") in text
    assert sum(line.startswith("| paper |") for line in lines) == 12 + 3 + 4  # Table 1 in full, 2 and 3's cells
    ws = next(line for line in lines if line.startswith("| ours: ws-run |"))
    repo = next(line for line in lines if line.startswith("| ours: repo-run |"))
    assert "| TIDE | 1.50 [0.50, 3.25] / 1.50 [0.50, 3.25] | 2.50 [0.50, 3.25]" in ws and ws.count("| - ") == 3
    assert "| - | - | - | 1.50 [0.50, 3.25]" in repo
    for line in (ws, repo):
        assert "gpt-5-mini" in line and "(probe)" in line and "v2, test split, 2 instances" in line
        assert "| 2 | 2027-01-02 |" in line
    numbers = {f"{v:.2f}" for methods in paper.PAPER_TABLE1.values() for cells in methods.values()
               for pair in cells for v in pair}
    assert not any(n in ws or n in repo for n in numbers)
    assert "ws-run: settings stop_on=empty, template_names=False" in text
    assert "old-run" not in text  # archive/ only with --archive
    assert paper.main(["--results", str(results), "--out", str(tmp_path / "all.md"), "--archive"]) == 0
    assert "old-run" in (tmp_path / "all.md").read_text()


def test_our_transfer_and_demos_rows_come_from_their_csv(tmp_path):
    paper = load_script("paper")
    results = tmp_path / "results"
    write_run(results / "t", "repository", "transfer")
    write_run(results / "d", "repository", "demos")
    assert paper.main(["--results", str(results), "--out", str(tmp_path / "out.md")]) == 0
    text = (tmp_path / "out.md").read_text()
    assert "| ours: t | b | b | 1.50 [0.50, 3.25] |" in text
    assert "| ours: d | repository | gpt-5-mini | TIDE | 1.50 [0.50, 3.25] / 1.50 [0.50, 3.25] |" in text
    assert "| paper | Gemini 3.5 Flash | GPT-5 mini | 24.03 |" in text
    assert "| paper | repository | GPT-5 mini | Iter + Demos | 10.40 / 11.43 |" in text
