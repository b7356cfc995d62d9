"""One cheap call to a backbone before a run spends anything: does the key work, is the model served, what will
the run be sent and charged.

`check_lm` makes the call (a one-word prompt, never answered from DSPy's cache) and reports the model id, the key
variable it found (never its value), where the calls go and through which client, how structured output is asked
for, the window and the price entry. `require_ready` stops a command with that report's message on a 401, a 404
or a missing key; `tide check` prints the report.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from dspy.utils.exceptions import LMAuthError, LMError, LMNotConfiguredError, LMUnsupportedModelError

from tide_dspy.backbones.calls import unresolvable
from tide_dspy.backbones.registry import provider_address, resolve
from tide_dspy.cost.prices import Target, map_entry, map_key
from tide_dspy.util.secrets import scrub_text

PROMPT = "Reply with the single word: ok"


class PreflightError(ValueError):
    """The backbone cannot run: its message says why and what to do."""


@dataclass
class CheckReport:
    backbone: str
    model: str
    kind: str
    key_env: str | None
    key_found: bool
    address: str
    client: str
    structured_output: str
    window: str
    price: str
    ok: bool = False
    problem: str | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        key = f"{self.key_env} ({'set' if self.key_found else 'NOT SET'})" if self.key_env else "none needed"
        rows = [("model", self.model), ("key", key), ("sends to", self.address), ("client", self.client),
                ("structured output", self.structured_output), ("window", self.window), ("price", self.price),
                ("preflight call", f"ok in {self.seconds:.1f}s" if self.ok else f"FAILED: {self.problem}")]
        return [f"{self.backbone}:"] + [f"  {name:<18} {value}" for name, value in rows] + \
            [f"  note: {n}" for n in self.notes]


def _describe(lm) -> CheckReport:
    backbone = resolve(getattr(lm, "tide_backbone", None) or getattr(lm, "model", ""))
    rules = getattr(lm, "tide_rules", backbone.rules)
    engine = getattr(lm, "engine", None)
    if backbone.kind == "local":  # in this process: no address, client, key or price to speak of
        structured = ("a llama.cpp grammar compiled from the output schema" if getattr(engine, "constrained", False)
                      else "JSON asked for in the prompt (TIDE_CONSTRAINED=0)")
        n_ctx = getattr(engine, "n_ctx", None)
        return CheckReport(backbone.name, backbone.note or backbone.model, backbone.kind, None, False,
                           "nowhere: it runs in this process, offline", "tide-dspy's embedded llama.cpp engine",
                           structured, f"{n_ctx:,} tokens (TIDE_N_CTX)" if n_ctx else "the engine's",
                           "free: it runs on this machine")
    if backbone.kind == "openai-compatible":
        served = lm.tide_served
        address, client = served.api_base, f"DSPy's LiteLLM client, the schema as {served.schema_format}"
    else:
        address, source = provider_address(backbone, (lm.kwargs or {}).get("api_base"))
        address = f"{scrub_text(address)} ({source})" if address else source
        client = "DSPy's native client (lm15)" if getattr(lm, "tide_native_client", False) else "LiteLLM"
    structured = (f"JSON schema, {rules.schema_dialect} dialect" if rules.schema_dialect != "json-object"
                  else "JSON object (the schema is in the prompt)")
    structured += "; DSPy's JSON fallback on" if rules.json_fallback else "; no JSON fallback (salvage and retries)"
    target = Target.of(lm)
    most = map_entry(map_key(lm)).get("max_output_tokens")
    window = (f"{target.window:,} tokens" + (f", {most:,} output" if most else "") if target.window
              else "unknown (the server's own)")
    prices = target.prices
    price = ("no price entry: cost_usd stays null" if prices is None else
             f"${prices.prompt:g} in / ${prices.completion:g} out per M tokens"
             + (f", ${prices.cached_prompt:g} cached" if prices.cached_prompt is not None else "")
             + (f" ({prices.source})" if prices.source else ""))
    key_env = backbone.key_env or None
    report = CheckReport(backbone.name, backbone.model if backbone.kind == "hosted" else lm.model, backbone.kind,
                         key_env, bool(key_env and os.environ.get(key_env)), address, client, structured, window, price)
    if not backbone.verified and backbone.note:
        report.notes.append(f"unverified model id: {backbone.note}")
    if backbone.rules.provider == "unknown" or rules.schema_dialect == "conservative":
        report.notes.append("not a registered backbone: conservative requests (no temperature, no seed)")
    return report


def _problem(exc: BaseException, report: CheckReport) -> str:
    status = getattr(exc, "status", None)
    # The provider's own words, first line only (a client's advice below it names options tide-dspy does not have).
    detail = scrub_text(str(getattr(exc, "message", None) or exc).strip().splitlines()[0])[:300]
    if unresolvable(exc):
        return (f"cannot reach {report.address}: its host name does not resolve ({detail}); check that this machine "
                "is online and its DNS works, and that --api-base (or the provider's base variable) is spelled right")
    if isinstance(exc, LMNotConfiguredError):
        return f"no key: set {report.key_env} ({detail})"
    if isinstance(exc, LMAuthError) or status in (401, 403) or (status == 400 and "api key" in detail.lower()):
        return (f"the provider refused the key in {report.key_env or 'TIDE_API_KEY'} (HTTP {status}): check it or "
                f"set another. Provider said: {detail}")
    if isinstance(exc, LMUnsupportedModelError) or status == 404:
        return (f"model {report.model} is not served there (HTTP {status}): check the model id, or the key's "
                f"region for DashScope. Provider said: {detail}")
    if isinstance(exc, LMError):
        return f"{type(exc).__name__}{f' (HTTP {status})' if status else ''}: {detail}"
    return f"{type(exc).__name__}: {detail}"


def check_lm(lm) -> CheckReport:
    """Describe `lm`'s backbone and make the one preflight call (skipped when its key variable is not set)."""
    report = _describe(lm)
    if report.kind == "hosted" and report.key_env and not report.key_found:
        report.problem = f"{report.key_env} is not set: export it (the key is read from the environment only)"
        return report
    t0 = time.perf_counter()
    try:
        lm(PROMPT, cache=False)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the report's message
        report.problem = _problem(exc, report)
    else:
        report.ok = True
    report.seconds = time.perf_counter() - t0
    return report


def require_ready(lm, flag: str) -> None:
    """Check a hosted backbone's `lm` (the LM a command just built: one call before its run); raise PreflightError
    with the report's message when it fails. Other LMs (embedded, served, a caller's own) pass. --no-check skips
    it."""
    if resolve(getattr(lm, "tide_backbone", None) or "local").kind != "hosted":
        return
    report = check_lm(lm)
    if not report.ok:
        raise PreflightError(f"{flag} {report.backbone}: {report.problem}\n(`tide check {report.backbone}` shows "
                             "what is sent and charged; --no-check skips this call)")
