"""Secret scrubbing: nothing secret-looking reaches the console, a log, a report, an MLflow param or a saved file.

`scrub_text` is applied to every error text (retry.describe_error), every console line and log record (the
CLI's handler), every report and every row written; `scrub_secrets` to mappings (params, configs).
"""

from __future__ import annotations

import os
import re

_SECRET_KEY = re.compile(r"api_?key|secret|password|token|auth|credential|header|cookie", re.I)
_SAFE_SUFFIXES = ("_tokens",)  # token counts and limits, not credentials


# user:password@ in a URL, and the value of a secret-looking query parameter (?api_key=..., &token=..., &sig=...),
# wherever they occur in a string (a URL, or a command line that holds one).
_USERINFO = re.compile(r"(?<=://)[^/\s@'\"]+@")
_SECRET_QUERY = re.compile(r"([?&;](?:[\w.-]*(?:key|token|secret|password|passwd|pwd|auth|sig|signature|credential|"
                           r"session|code)[\w.-]*)=)[^&#\s'\"]*", re.I)
# A credential header as a provider or gateway echoes it (raw, or quoted in a dict or JSON): its value goes.
_HEADER = re.compile(r"((?:proxy-)?authorization|x-api-key|x-goog-api-key|api-key|cookie)(['\"]?\s*[:=]\s*['\"]?)"
                     r"(?:(bearer|basic|token)\s+)?[^\s'\",;}\]]+", re.I)
_BEARER = re.compile(r"\b(bearer)\s+[\w.~+/=-]{8,}", re.I)
# Provider key shapes: OpenAI/Anthropic (sk-, sk-ant-, sk-proj-), Google (AIza), GitHub, Hugging Face, Slack, AWS.
_TOKEN_SHAPES = re.compile(r"\b(?:sk-[\w-]{16,}|AIza[\w-]{30,}|gh[pousr]_\w{30,}|github_pat_\w{30,}|hf_\w{30,}|"
                           r"xox[abprs]-[\w-]{10,}|AKIA[0-9A-Z]{16})")
# Environment variables whose value is a credential: a name part like KEY, TOKEN, SECRET, PASS, PAT, AUTH.
_SECRET_ENV_PART = re.compile(r"\w*(?:KEY|TOKEN|SECRET|SECRETS|PASS|PASSWORD|PASSWD|PAT|AUTH|AUTHORIZATION|"
                              r"CREDENTIAL|CREDENTIALS|COOKIE|PRIVATE|SIGNATURE)", re.I)
SECRET_VALUE_MIN_CHARS = 8
REDACTED = "REDACTED"


def is_secret_name(name: str) -> bool:
    """True for a variable name with a credential-like part: OPENAI_API_KEY, MY_PAT, DB_PASS, HF_TOKEN, APIKEY
    (PATH, PWD and TOKENIZERS_PARALLELISM are not)."""
    return any(_SECRET_ENV_PART.fullmatch(part) for part in re.split(r"[^A-Za-z0-9]+", name) if part)


_env_cache: tuple[frozenset, re.Pattern | None] = (frozenset(), None)
_added: set[str] = set()  # values scrubbed whatever their variable's name (add_secret_values)


def add_secret_values(values) -> None:
    """Scrub these values (of 8+ characters) from every text from now on, whatever the name of the variable that
    holds them: the variables a user passes to the tests with --verify-env, which the tests can print."""
    _added.update(v for v in values if isinstance(v, str) and len(v) >= SECRET_VALUE_MIN_CHARS)


def _env_values() -> re.Pattern | None:
    """One pattern matching the value of every secret-named variable of the process, and every value added with
    add_secret_values (8+ characters)."""
    global _env_cache
    values = frozenset(v for k, v in os.environ.items() if len(v) >= SECRET_VALUE_MIN_CHARS and is_secret_name(k))
    values |= _added
    if values != _env_cache[0]:
        pattern = re.compile("|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))) if values else None
        _env_cache = (values, pattern)
    return _env_cache[1]


def scrub_text(text: str) -> str:
    """`text` with credentials replaced by REDACTED: the values of the process's secret-named variables, credential
    headers (Authorization: Bearer ..., x-api-key: ...), provider key shapes (sk-..., AIza...), URL userinfo and
    secret query values: http://u:p@h/v1?key=s -> http://h/v1?key=REDACTED."""
    if not text:
        return text
    env = _env_values()
    if env is not None:
        text = env.sub(REDACTED, text)
    text = _HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) + ' ' if m.group(3) else ''}{REDACTED}", text)
    text = _BEARER.sub(rf"\1 {REDACTED}", text)
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    if "://" in text or "=" in text:
        text = _SECRET_QUERY.sub(rf"\1{REDACTED}", _USERINFO.sub("", text))
    return text


def scrub_secrets(value):
    """Drop secret-looking keys at any depth, and scrub credentials out of URLs in any string (scrub_text):
    nothing secret is logged or saved."""
    if isinstance(value, dict):
        return {
            k: scrub_secrets(v)
            for k, v in value.items()
            if str(k).endswith(_SAFE_SUFFIXES) or not _SECRET_KEY.search(str(k))
        }
    if isinstance(value, (list, tuple)):
        return [scrub_secrets(v) for v in value]
    if isinstance(value, str):
        return scrub_text(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)
