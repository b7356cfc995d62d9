"""The abstraction check over template libraries, against their source cases in the data.

    python experiments/check_library.py programs/*/*/templates.json
    git show 24bf372:programs/workspace/local-small/templates.json > /tmp/old.json && \\
        python experiments/check_library.py /tmp/old.json

Prints, per library, each template's score and what it carries over, then how many templates are clean and the
mean score. Exit status 1 when any template carries a specific token of its source case.
"""

from __future__ import annotations

import argparse
import statistics
import sys


def source_cases(setting: str, data: str | None) -> dict[str, str]:
    from tide_dspy.abstraction import case_text
    from tide_dspy.data import load_instances
    from tide_dspy.data.selection import data_path
    from tide_dspy.domains import get_setting
    from tide_dspy.templates import solved_cases

    instances = load_instances(data_path(setting, data), setting=setting, split="train")
    return {p.problem_id: case_text(get_setting(setting).solved_case(i, p)) for i, p in solved_cases(instances)}


def main(argv: list[str] | None = None) -> int:
    from tide_dspy.abstraction import check
    from tide_dspy.templates import TemplateLibrary

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("libraries", nargs="+")
    p.add_argument("--data", default=None,
                   help="the setting's data (default: $TIDE_DATA/<setting>, else the shipped set)")
    args = p.parse_args(argv)
    dirty = 0
    cases: dict[str, dict[str, str]] = {}
    for path in args.libraries:
        library = TemplateLibrary.load(path)
        setting = library.setting or (library.templates[0].setting if library.templates else None)
        if setting is None:
            raise SystemExit(f"{path}: no setting recorded in the library")
        if setting not in cases:
            cases[setting] = source_cases(setting, args.data)
        scores = []
        print(f"{path} ({setting}, {len(library)} templates)")
        for t in library:
            if t.source_case not in cases[setting]:
                raise SystemExit(f"{path}: {t.id}'s source case {t.source_case!r} is not in the {setting} train data")
            report = check(t.name, t.pattern, t.evidence_flow, source=cases[setting][t.source_case])
            scores.append(report.score)
            dirty += not report.passed
            leaks = "; ".join(str(lk) for lk in report.leaks)
            print(
                f"  {t.id} score {report.score:.3f} leaks {len(report.leaks)}" + (f": {leaks[:400]}" if leaks else "")
            )
        clean = sum(s == 1.0 for s in scores)
        mean = f"{statistics.fmean(scores):.3f}" if scores else "-"
        print(f"  clean {clean}/{len(scores)}, mean score {mean}\n")
    return 1 if dirty else 0


if __name__ == "__main__":
    sys.exit(main())
