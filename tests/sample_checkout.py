"""A small git checkout (`pkg/` and `tools/`) with one planted bug, and DSPy answers that report findings in it;
the `repo` fixture in conftest.py builds it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

MATHUTIL = '''def mean(values):
    return sum(values) / (len(values) - 1)


class Counter:
    def __init__(self):
        self.n = 0

    def bump(self, by=1):
        self.n += by
        return self.n
'''
TEXT = "def shout(s):\n    return s.upper()\n"
# A long docstring makes tools/ the larger package, for the window tests.
REPORT = 'def render(rows):\n    """' + "Render rows as a table. " * 60 + '"""\n    return "\\n".join(rows)\n'

GOOD_PATCH = """diff --git a/pkg/mathutil.py b/pkg/mathutil.py
--- a/pkg/mathutil.py
+++ b/pkg/mathutil.py
@@ -1,3 +1,3 @@
 def mean(values):
-    return sum(values) / (len(values) - 1)
+    return sum(values) / len(values)

"""
BAD_PATCH = """diff --git a/pkg/text.py b/pkg/text.py
--- a/pkg/text.py
+++ b/pkg/text.py
@@ -1,2 +1,2 @@
 def shout(text):
-    return text.lower()
+    return text.upper()
"""


def run_git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=cwd, check=True,
                   capture_output=True)


def write_tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "tools").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mathutil.py").write_text(MATHUTIL)
    (root / "pkg" / "text.py").write_text(TEXT)
    (root / "tools" / "report.py").write_text(REPORT)
    return root



def make_repo(root: Path) -> Path:
    write_tree(root)
    run_git(root, "init", "-q")
    run_git(root, "add", ".")
    run_git(root, "commit", "-qm", "initial")
    return root


def finding(description, evidence, patch, template="", why=""):
    return {"description": description, "evidence_ids": evidence, "patch": patch,
            "used_template_id": template, "why": why}


def answers(*findings):
    """A round that returns these findings, then an empty round that ends the loop."""
    return [{"findings": json.dumps(list(findings))}, {"findings": "[]"}]
