"""The command line's front door: unknown options are named with the closest one, --setting is checked and
explained, and building the parser (every `--help`) loads neither DSPy nor `datasets`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tide_dspy.cli.main import main
from tide_dspy.cli.options import SETTING_HELP
from tide_dspy.domains import SETTING_NAMES


@pytest.mark.parametrize("argv,typo,meant", [
    (["discover", "repo", ".", "--rouns", "3"], "--rouns", "--rounds"),
    (["evaluate", "--setting", "workspace", "--method", "iter", "--limt", "2"], "--limt", "--limit"),
    (["discover", "workspace", ".", "--per-rund", "2"], "--per-rund", "--per-round"),
])
def test_an_unknown_option_is_named_with_the_closest_option_of_its_command(argv, typo, meant, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"{typo} -> did you mean {meant}?" in err, err


def test_an_unknown_setting_names_the_settings(capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", "--setting", "workspaces", "--method", "iter"])
    assert f"unknown setting 'workspaces': choose one of {', '.join(SETTING_NAMES)}" in capsys.readouterr().err


def test_setting_has_help_that_names_every_setting(capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--setting SETTING the benchmark setting:" in out
    assert all(name in SETTING_HELP for name in SETTING_NAMES)


@pytest.mark.parametrize("argv", [["--help"], ["discover", "repo", "--help"], ["evaluate", "--help"],
                                  ["check", "--help"], ["data", "stats", "--help"]])
def test_help_loads_neither_dspy_nor_datasets(argv):
    code = ("import json, sys\nfrom tide_dspy.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
            "    pass\nprint(json.dumps(sorted(m for m in ('dspy', 'datasets', 'mlflow', 'litellm') "
            "if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == []
