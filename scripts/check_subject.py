"""Refuse a commit message whose subject line is over 72 characters (the pre-commit commit-msg hook).

    python scripts/check_subject.py .git/COMMIT_EDITMSG
"""

from __future__ import annotations

import sys

LIMIT = 72


def problem(message: str) -> str | None:
    subject = message.split("\n", 1)[0].rstrip()
    if len(subject) > LIMIT:
        return f"commit subject is {len(subject)} characters (at most {LIMIT}); put the detail in the body"
    return None


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as f:
        why = problem(f.read())
    if why:
        print(why, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
