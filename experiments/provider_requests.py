"""What the four hosted providers are sent, and whether they would take it: `tide evaluate` against the provider
simulator (tide_dspy.testing.provider_sim), which refuses what each provider's documentation forbids.

    python experiments/provider_requests.py                 # the shared data's test split, every route
    python experiments/provider_requests.py --repo-limit 1  # fewer repository instances

For each provider, client route (DSPy's native client, or LiteLLM) and method (TIDE, Single, Multi, with the LLM
judge on the same backbone), one run over the test workspaces and the smallest repository instances prints the
calls sent, the calls refused (4xx), the JSON-fallback requests among them (the first round's answer is prose, so
DSPy's JSON adapter asks for the schema as structured output), the cached share of the prompt tokens, and for TIDE
the share of each round's prompt that is a byte-identical prefix of round 1's (goal: >= 95% for rounds 2..T).

A second table measures the schema options on the forced fallback alone, per provider and route: the schema as
tide-dspy writes it for the embedded engine ("full"), written in the provider's dialect ("dialect", the default),
and the dialect with DSPy's JSON fallback off, relying on salvage and the round's bounded retries ("no fallback").

No model runs: the simulator answers instantly, so the numbers are about requests, not quality. Writes
experiments/results/providers/provider_requests.{md,json}.

`--capture FILE` also writes every request as JSONL (provider, route, method, path, headers without the host and
length, body), the openai-compatible engine's too (a stub server in each schema dialect), so two versions of the
transport can be compared request by request: `diff before.jsonl after.jsonl`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402

# this checkout's package, and this script's neighbour stub_server.py
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from stub_server import StubServer  # noqa: E402

from tide_dspy.backbones import BACKBONES, get_lm, lm_context  # noqa: E402
from tide_dspy.cli.main import main as tide  # noqa: E402
from tide_dspy.data.loaders import load_instances  # noqa: E402
from tide_dspy.data.selection import data_path  # noqa: E402
from tide_dspy.domains import REPOSITORY, SETTINGS, WORKSPACE  # noqa: E402
from tide_dspy.programs import build_program  # noqa: E402
from tide_dspy.testing.provider_sim import Fault, PromptCache, ProviderSimulator  # noqa: E402
from tide_dspy.util.tokens import estimate_tokens  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "providers"
BACKBONE = {"openai": "gpt-5-mini", "anthropic": "claude-sonnet-4.5", "gemini": "gemini-3.5-flash",
            "dashscope": "qwen-3.6-flash"}
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
           "dashscope": "DASHSCOPE_API_KEY"}
ROUTES = [("openai", "native"), ("openai", "litellm"), ("anthropic", "native"), ("anthropic", "litellm"),
          ("gemini", "native"), ("gemini", "litellm"), ("dashscope", "litellm")]
TEMPLATES = {name: ROOT / "programs" / name / "local" / "templates.json" for name in SETTINGS}


def _first_round(prompt: str) -> bool:
    return "[[ ## already_found ## ]]\n(nothing yet)" in prompt


def prefix_shares(log) -> list[float]:
    """For each TIDE round t >= 2 in the log: the share of its prompt that is a byte-identical prefix of its
    instance's round 1 (plain rounds in order; a JSON-fallback request has another system prompt and is left out)."""
    shares, first = [], None
    for entry in log:
        if entry.kind != "findings" or entry.structured or entry.status != 200:
            continue
        if _first_round(entry.prompt):
            first = entry.prompt
            continue
        if first is not None:
            n = 0
            for a, b in zip(first, entry.prompt):
                if a != b:
                    break
                n += 1
            shares.append(n / len(entry.prompt))
    return shares


@contextlib.contextmanager
def route_env(sim: ProviderSimulator, provider: str, path: str):
    names = [f"{provider.upper()}_API_BASE"]
    saved = {n: os.environ.get(n) for n in names}
    if path == "litellm":
        os.environ[names[0]] = sim.litellm_base(provider)
    try:
        yield ([] if path == "litellm" else
               ["--api-base", sim.base_url(provider), "--judge-api-base", sim.base_url(provider)])
    finally:
        for n, v in saved.items():
            os.environ.pop(n, None) if v is None else os.environ.__setitem__(n, v)


def run_evaluate(sim, provider, path, method, setting, data: Path, ids: list[str], out: Path) -> dict:
    backbone = BACKBONE[provider]
    start = len(sim.log)
    sim.cache = PromptCache()  # each run's cached share is its own
    sim.faults[:] = [Fault("prose", count=1, kind="findings", structured=False)]
    with route_env(sim, provider, path) as extra:
        args = ["evaluate", "--setting", setting, "--data", str(data), "--ids", ",".join(ids), "--method", method,
                "--backbone", backbone, "--judge", backbone, "--no-track", "--fresh", "--out", str(out), *extra]
        if method == "tide":
            args += ["--templates", str(TEMPLATES[setting])]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            rc = tide(args)
    log = sim.log[start:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()] if rc == 0 else []
    prompt = sum(r.usage.get("prompt_tokens", r.usage.get("promptTokenCount", 0)) or 0 for r in log
                 if r.status == 200 and r.kind != "other")
    cached = sum((r.usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                 + (r.usage.get("cache_read_input_tokens") or 0) + (r.usage.get("cachedContentTokenCount") or 0)
                 for r in log if r.status == 200 and r.kind != "other")
    if provider == "anthropic":  # Anthropic reports input_tokens without the cached and written parts
        prompt = sum((r.usage.get("input_tokens") or 0) + (r.usage.get("cache_read_input_tokens") or 0)
                     + (r.usage.get("cache_creation_input_tokens") or 0) for r in log
                     if r.status == 200 and r.kind != "other")
    shares = prefix_shares(log) if method == "tide" else []
    return {
        "provider": provider, "path": path, "method": method, "setting": setting, "rc": rc,
        "instances": len(rows), "complete": sum(1 for r in rows if r["error"] is None and not any(
            rd["aborted"] or rd["failed"] for rd in r["rounds"])),
        "calls": len(log), "refused": sum(1 for r in log if 400 <= r.status < 500 and r.status != 429),
        "refusals": sorted({(r.error or "")[:120] for r in log if 400 <= r.status < 500 and r.status != 429}),
        "fallback": sum(1 for r in log if r.kind == "findings" and r.structured),
        "cached_share": round(cached / prompt, 3) if prompt else None,
        "prefix_mean": round(sum(shares) / len(shares), 4) if shares else None,
        "prefix_min": round(min(shares), 4) if shares else None, "rounds_measured": len(shares),
    }


def fallback_variant(sim, provider, path, variant: str, instance) -> dict:
    """One round-1 call whose answer is prose, on an LM built with the schema option `variant`."""
    start = len(sim.log)
    sim.faults[:] = [Fault("prose", count=1, kind="findings", structured=False)]
    with route_env(sim, provider, path) as extra:
        lm = get_lm(BACKBONE[provider], api_base=extra[1] if extra else None)
    rules = lm.tide_rules
    lm.tide_rules = {"full": replace(rules, schema_dialect="full"), "dialect": rules,
                     "no fallback": replace(rules, json_fallback=False)}[variant]
    program = build_program("single", instance.setting)
    with route_env(sim, provider, path), lm_context(lm):
        prediction = program(instance)
    record = prediction.rounds[0]
    log = sim.log[start:]
    return {"provider": provider, "path": path, "variant": variant, "calls": len(log),
            "refused": sum(1 for r in log if 400 <= r.status < 500 and r.status != 429),
            "refusal": next((r.error[:140] for r in log if 400 <= r.status < 500 and r.status != 429), ""),
            "round_ok": not record.failed, "findings": record.new}


VOLATILE_HEADERS = ("host", "content-length")  # the port changes from run to run; the length follows the body


def captured(route: str, provider: str, method: str, path: str, headers: dict, body: dict) -> dict:
    """One request as --capture writes it."""
    kept = {k.lower(): v for k, v in headers.items() if k.lower() not in VOLATILE_HEADERS}
    return {"route": route, "provider": provider, "method": method, "path": path,
            "headers": dict(sorted(kept.items())), "body": body}


def served_run(dialect: str, setting, data: Path, ids: list[str], out: Path) -> list[dict]:
    """`tide evaluate` of TIDE on the openai-compatible engine against a stub server in `dialect`; the requests."""
    with StubServer() as stub:
        args = ["evaluate", "--setting", setting, "--data", str(data), "--ids", ",".join(ids), "--method", "tide",
                "--backbone", "openai-compatible", "--api-base", stub.api_base, "--server-schema", dialect,
                "--no-track", "--fresh", "--out", str(out), "--templates", str(TEMPLATES[setting])]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            tide(args)
        return [captured(f"served-{dialect}", "openai-compatible", "POST", "/v1/chat/completions", h, b)
                for h, b in zip(stub.headers, stub.requests)]


def table(rows: list[dict], columns: list[str]) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "".join("| " + " | ".join("-" if r.get(c) is None else str(r.get(c)) for c in columns) + " |\n"
                          for r in rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo-limit", type=int, default=2, help="the smallest N repository test instances")
    parser.add_argument("--workspace-limit", type=int, default=4, help="the first N test workspaces")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--capture", default=None, metavar="FILE",
                        help="also write every request (headers without host and length, body) as JSONL")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    selected = {}
    for setting, limit in ((WORKSPACE, args.workspace_limit), (REPOSITORY, args.repo_limit)):
        path = data_path(setting.name)  # $TIDE_DATA/<setting>, else the shipped set
        instances = [i for i in load_instances(path, setting=setting.name) if i.split == "test"]
        if setting is REPOSITORY:
            instances.sort(key=lambda i: estimate_tokens(setting.render_context(i)))
        selected[setting.name] = (path, instances[:limit])
    t0, runs, variants, capture, seen = time.perf_counter(), [], [], [], 0
    with ProviderSimulator() as sim, tempfile.TemporaryDirectory() as tmp:
        for provider, env in KEY_ENV.items():
            os.environ[env] = sim.keys[provider]
        for provider, path in ROUTES:
            for setting, (set_path, instances) in selected.items():
                for method in ("tide", "single", "multi"):
                    out = Path(tmp) / f"{provider}-{path}-{setting}-{method}"
                    row = run_evaluate(sim, provider, path, method, setting, set_path,
                                       [i.instance_id for i in instances], out)
                    runs.append(row)
                    print(f"{provider:9} {path:7} {setting:10} {method:6} calls {row['calls']:4} refused "
                          f"{row['refused']:3} fallback {row['fallback']:2} complete {row['complete']}/"
                          f"{row['instances']} prefix {row['prefix_mean']} (min {row['prefix_min']}) cached "
                          f"{row['cached_share']}", flush=True)
            for variant in ("full", "dialect", "no fallback"):
                variants.append(fallback_variant(sim, provider, path, variant, selected[WORKSPACE.name][1][0]))
                v = variants[-1]
                print(f"  fallback, schema {variant:11}: calls {v['calls']} refused {v['refused']} round ok "
                      f"{v['round_ok']} {v['refusal']}", flush=True)
            capture += [captured(f"{provider}-{path}", r.provider, r.method, r.path, r.headers, r.body)
                        for r in sim.log[seen:]]
            seen = len(sim.log)
        if args.capture:
            for dialect in ("json_schema", "llama.cpp"):
                for setting, (set_path, instances) in selected.items():
                    capture += served_run(dialect, setting, set_path, [i.instance_id for i in instances],
                                          Path(tmp) / f"served-{dialect}-{setting}")
    if args.capture:
        with open(args.capture, "w") as f:
            f.writelines(json.dumps(c, sort_keys=True, ensure_ascii=False) + "\n" for c in capture)
        print(f"captured {len(capture)} requests -> {args.capture}")
    seconds = round(time.perf_counter() - t0, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ws, repo = selected[WORKSPACE.name][1], selected[REPOSITORY.name][1]
    meta = {"command": "python experiments/provider_requests.py " + " ".join(argv or sys.argv[1:]),
            "workspaces": [i.instance_id for i in ws], "repositories": [i.instance_id for i in repo],
            "backbones": {p: BACKBONES[b].model for p, b in BACKBONE.items()}, "seconds": seconds}
    (out / "provider_requests.json").write_text(json.dumps({"meta": meta, "runs": runs, "fallback": variants},
                                                           indent=1) + "\n")
    tide_rows = [r for r in runs if r["method"] == "tide"]
    text = (
        "# Requests to the four hosted providers, through the provider simulator\n\n"
        f"`{meta['command'].strip()}`; {len(ws)} test workspaces ({', '.join(meta['workspaces'])}) and "
        f"{len(repo)} repository instances ({', '.join(meta['repositories'])}), the paper's T and k, the LLM judge "
        f"on the same backbone, the first round's answer in prose (forcing DSPy's JSON fallback). {seconds} s.\n\n"
        "## Calls sent and refused, per provider, route and method\n\n"
        + table(runs, ["provider", "path", "setting", "method", "calls", "refused", "fallback", "complete",
                       "instances", "cached_share"])
        + "\n## TIDE: share of each round's prompt that is a byte-identical prefix of round 1's (rounds 2..T)\n\n"
        + table(tide_rows, ["provider", "path", "setting", "rounds_measured", "prefix_mean", "prefix_min"])
        + "\n## The forced JSON fallback, per schema option (one Single call on the first workspace)\n\n"
        + table(variants, ["provider", "path", "variant", "calls", "refused", "round_ok", "findings", "refusal"]))
    (out / "provider_requests.md").write_text(text)
    print(f"\nwrote {out / 'provider_requests.md'} and .json in {seconds} s")
    refused = sum(r["refused"] for r in runs)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
