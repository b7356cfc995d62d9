"""Secret scrubbing: nothing secret-looking reaches a log, an MLflow param or a saved file."""

from __future__ import annotations

import re

_SECRET_KEY = re.compile(r"api_?key|secret|password|token|auth|credential|header|cookie", re.I)
_SAFE_SUFFIXES = ("_tokens",)  # token counts and limits, not credentials


# user:password@ in a URL, and the value of a secret-looking query parameter (?api_key=..., &token=..., &sig=...),
# wherever they occur in a string (a URL, or a command line that holds one).
_USERINFO = re.compile(r"(?<=://)[^/\s@'\"]+@")
_SECRET_QUERY = re.compile(r"([?&;](?:[\w.-]*(?:key|token|secret|password|passwd|pwd|auth|sig|signature|credential|"
                           r"session|code)[\w.-]*)=)[^&#\s'\"]*", re.I)
REDACTED = "REDACTED"


def scrub_text(text: str) -> str:
    """`text` with URL credentials and secret query values replaced: http://u:p@h/v1?key=s -> http://h/v1?key=REDACTED."""
    if "://" not in text and "=" not in text:
        return text
    return _SECRET_QUERY.sub(rf"\1{REDACTED}", _USERINFO.sub("", text))


def scrub_secrets(value):
    """Drop secret-looking keys at any depth, and scrub credentials out of URLs in any string (scrub_text):
    nothing secret is logged or saved."""
    if isinstance(value, dict):
        return {k: scrub_secrets(v) for k, v in value.items() if str(k).endswith(_SAFE_SUFFIXES) or not _SECRET_KEY.search(str(k))}
    if isinstance(value, (list, tuple)):
        return [scrub_secrets(v) for v in value]
    if isinstance(value, str):
        return scrub_text(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)
