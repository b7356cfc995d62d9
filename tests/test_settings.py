"""A setting's name is written once, on its Setting: the code asks the Setting or the registry, never the name."""

from __future__ import annotations

import re
from pathlib import Path

from tide_dspy.domains import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
SCOPE = ("tide_dspy", "experiments")  # the code; experiments/results/ holds recorded runs, not code
QUOTED = re.compile("|".join(f'"{name}"' for name in SETTINGS))
# The lines allowed to spell a name: each Setting's definition, and the CLI subcommand `tide discover workspace`.
ALLOWED = {
    "tide_dspy/domains.py": re.compile(r'^    name = "\w+"$'),
    "tide_dspy/cli/discover_cmd.py": re.compile(r'sub\.add_parser\("\w+"'),
}


def offenders() -> list[str]:
    found = []
    for folder in SCOPE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                allowed = ALLOWED.get(rel)
                if QUOTED.search(line) and not (allowed and allowed.search(line)):
                    found.append(f"{rel}:{number}: {line.strip()}")
    return found


def test_only_the_settings_and_the_cli_subcommands_spell_a_setting_name():
    found = offenders()
    assert not found, "ask the Setting (or domains.SETTINGS) instead of naming it:\n" + "\n".join(found)


def test_each_setting_spells_its_name_once():
    domains = (ROOT / "tide_dspy" / "domains.py").read_text(encoding="utf-8")
    assert [domains.count(f'name = "{name}"') for name in SETTINGS] == [1] * len(SETTINGS)
