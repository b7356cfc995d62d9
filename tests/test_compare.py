"""experiments/compare.py: one table over several table1 folders, each method against its own run's floors."""

from __future__ import annotations

import json

import pytest

from scripts import load_script

COLUMNS = "method,instances,runs,retrieval_coverage,retrieval_f1"


def write_run(folder, rows: dict[str, tuple[float, float]], recall: float | None = None):
    folder.mkdir(parents=True)
    (folder / "meta-table1.json").write_text(json.dumps({
        "command": f"experiments/run.py table1 --out {folder}", "judge": "proxy-lexical",
        "backbone": {"backbone": "local-small", "model": "llamacpp/qwen"}}))
    (folder / "table1.csv").write_text("\n".join(
        [COLUMNS, *(f"{m},4,1,{cov},{f1}" for m, (cov, f1) in rows.items())]) + "\n")
    (folder / "table1_hygiene.csv").write_text("\n".join(
        ["method,seconds,scan_recall_at_focus",
         *(f"{m},{0 if m in ('random', 'first-listed') else 400},{'' if recall is None else recall}" for m in rows)]))
    return folder


def test_each_method_is_compared_with_the_higher_floor_of_its_own_run(tmp_path):
    compare = load_script("compare")
    plain = write_run(tmp_path / "plain", {"random": (10, 8.0), "first-listed": (20, 16.0), "tide": (30, 24.0)}, 0.25)
    shuffled = write_run(tmp_path / "shuffled", {"random": (10, 10.0), "first-listed": (5, 4.0), "tide": (5, 5.0)})
    compare.main(["--out", str(tmp_path / "out"), f"plain={plain}", f"shuffled={shuffled}"])
    table = (tmp_path / "out" / "compare.md").read_text()
    assert "| plain | tide | 30.00 / 24.00 | 1.50x | 0.250 | 100 |" in table
    assert "| shuffled | tide | 5.00 / 5.00 | 0.50x | - | 100 |" in table
    assert (f"- plain: backbone local-small, judge proxy-lexical, `python experiments/run.py table1 --out {plain}`"
            in table)
    assert (tmp_path / "out" / "compare.png").stat().st_size > 0
    assert f"plain={plain}" in (tmp_path / "out" / "command.txt").read_text()


def test_a_folder_without_a_finished_run_is_named(tmp_path):
    compare = load_script("compare")
    with pytest.raises(SystemExit, match="missing/table1_hygiene.csv: not found"):
        compare.main(["--out", str(tmp_path / "out"), f"x={tmp_path / 'missing'}"])
