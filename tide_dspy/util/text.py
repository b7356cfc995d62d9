"""Text from outside (the model, a checkout's file names, a mailbox) made safe to show, and model text capped.

`printable` shows control characters escaped: C0 (but tab, and newline where kept), DEL, C1, and the Unicode
bidirectional overrides, so an ESC/OSC sequence (window title, clear screen, an OSC 52 clipboard write), a BEL or a
newline in a file name prints as visible text (`\\x1b]52;...`), never acts on the terminal or the document.
`terminal_line` is what goes to the console: scrubbed of secrets, then made printable.

`cap` cuts a text to a length and marks the cut; `cap_finding` caps each model-written field of a finding, so
what the reports show and what the next round's prompt reads is the capped text.
"""

from __future__ import annotations

import re
import sys

# C0 except tab and newline, DEL, C1, and the bidirectional embedding/override/isolate marks.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_AND_NEWLINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escaped(match: re.Match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text, *, keep_newlines: bool = False) -> str:
    """`text` with every control character shown as an escape (`\\x1b`, `\\u202e`); tabs stay, and newlines too
    when `keep_newlines` (a carriage return is always escaped: it can overwrite what a line showed)."""
    pattern = _CONTROL if keep_newlines else _CONTROL_AND_NEWLINE
    return pattern.sub(_escaped, str(text))


def json_text(value, **dumps) -> str:
    """`json.dumps(value, ensure_ascii=False, **dumps)` with every character `printable` escapes written as a JSON
    escape (`\\u202e`, `\\u009b`): the same data, but no raw bidirectional override or control character in the
    file (JSON already escapes C0)."""
    import json

    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False, **dumps))


def terminal_line(text) -> str:
    """One console line: secrets scrubbed (util.secrets.scrub_text), control characters shown escaped."""
    from tide_dspy.util.secrets import scrub_text

    return printable(scrub_text(str(text)))


def rate_line(done: int, total: int, seconds: float, unit: str) -> str:
    """`5/15 artifacts, 0.21/s, ETA 48 s`: how far a long step is, how fast it goes and when it will end (the ETA
    from the rate so far)."""
    rate = done / seconds if seconds > 0 else 0.0
    eta = f", ETA {(total - done) / rate:.0f} s" if rate > 0 and done < total else ""
    return f"{done}/{total} {unit}, {rate:.2f}/s{eta}"


def print_line(text, file=None) -> None:
    """Print `terminal_line(text)`, flushed: the progress printer of the CLI."""
    print(terminal_line(text), file=file if file is not None else sys.stdout, flush=True)


# ---- caps on model-written text ----

DESCRIPTION_CHARS = 4_000
WHY_CHARS = 2_000
PARAMETER_CHARS = 2_000  # each action parameter's value
PARAMETERS = 32  # action parameters kept
PARAMETER_NAME_CHARS = 200
PATCH_CHARS = 64_000
CAPPED_FLAG = "capped"


def cap(text: str, limit: int) -> str:
    """`text`, or its first characters with a marker saying how much was cut; the result is at most `limit`
    characters plus the marker."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... cut: {len(text) - limit} more characters]"


def cap_finding(finding):
    """The finding with each model-written field capped (description, why, action parameters, patch) and the
    `capped` flag when anything was cut. Returns the same object, changed in place."""
    cut = False

    def capped(text: str, limit: int) -> str:
        nonlocal cut
        cut = cut or len(text) > limit
        return cap(text, limit)

    finding.description = capped(finding.description, DESCRIPTION_CHARS)
    finding.why = capped(finding.why, WHY_CHARS)
    if finding.patch is not None:
        finding.patch = capped(finding.patch, PATCH_CHARS)
    if finding.action is not None:
        items = list(finding.action.parameters.items())
        cut = cut or len(items) > PARAMETERS
        finding.action.parameters = {capped(str(k), PARAMETER_NAME_CHARS): _capped_value(v, capped)
                                     for k, v in items[:PARAMETERS]}
    if cut and CAPPED_FLAG not in finding.flags:
        finding.flags.append(CAPPED_FLAG)
    return finding


def _capped_value(value, capped):
    """A parameter value capped: text is cut; a number, bool or None stays; a list or mapping stays unless its
    text is over the cap, when it becomes that capped text."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return capped(value, PARAMETER_CHARS)
    text = str(value)
    return value if len(text) <= PARAMETER_CHARS else capped(text, PARAMETER_CHARS)
