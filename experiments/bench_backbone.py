"""Benchmark the embedded backbone: speed, prefix reuse across TIDE rounds, and first-time parse rates.

    python experiments/bench_backbone.py                      # local-small (0.5B), 2 threads
    python experiments/bench_backbone.py --backbone local     # the 1.5B default

Prints and saves (experiments/results/bench_backbone/<backbone>-<date>.{json,txt}):
  1. prompt tokens/s and generated tokens/s on a fresh ~2k-token prompt, with and without a JSON-schema grammar;
  2. a TIDE run on one small repository instance under two decoding modes:
     - ChatAdapter, unconstrained (its JSONAdapter fallback is off, so a parse failure counts as one);
     - JSONAdapter with the signature's JSON schema compiled to a llama.cpp grammar (constrained);
     per round: prompt tokens, tokens reused from the previous call's KV cache, prompt-eval seconds, and
     round t's prompt-eval time over round 1's (the prefix-reuse ratio, target < 0.3);
  3. the share of rounds whose first LM answer parsed, side by side;
  4. generation tokens/s with no grammar, llama-cpp-python's full-vocabulary grammar sampler and the check-first
     grammar (tide_dspy.backbones.grammar), side by side, on a small schema and on grounded round schemas
     (`--grammar-only` runs just this part).
The DSPy response cache is off so every call is real.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402
from dspy.lm15 import Config, Message, Request  # noqa: E402

from tide_dspy.backbones import describe_lm, get_lm  # noqa: E402
from tide_dspy.data import load_instances  # noqa: E402
from tide_dspy.data.selection import data_path  # noqa: E402
from tide_dspy.discovery import TIDE, DiscoveryState  # noqa: E402
from tide_dspy.domains import REPOSITORY, WORKSPACE, get_setting  # noqa: E402
from tide_dspy.schemas import Finding  # noqa: E402
from tide_dspy.templates import TemplateLibrary  # noqa: E402
from tide_dspy.util.safe_write import write_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = data_path(REPOSITORY.name)  # $TIDE_DATA/repository, else the shipped set
DEFAULT_INSTANCE = "pytest-dev__pytest__multi-10"  # the smallest candidate pool (~3k tokens rendered)


def load_instance(path: Path, instance_id: str):
    for instance in load_instances(path, setting=REPOSITORY.name):
        if instance.instance_id == instance_id:
            return instance
    raise SystemExit(f"{path}: no instance {instance_id!r}")


def speed(lm, text: str, gen_tokens: int) -> dict:
    """Fresh prompt (a nonce first, so nothing is reused), then free and grammar-constrained generation."""
    engine = lm.engine
    schema = {"type": "object", "properties": {"summary": {"type": "string"},
                                               "functions": {"type": "array", "items": {"type": "string"}}},
              "required": ["summary", "functions"]}
    out = {}
    for label, fmt in (("free", None), ("grammar", {"type": "json_schema", "schema": schema})):
        request = Request(
            model=lm.model,
            system=f"run {uuid.uuid4().hex}",
            messages=(Message.user(text + "\n\nDescribe this code at length, as JSON with a summary and the "
                                   "list of function names."),),
            config=Config(max_tokens=gen_tokens, temperature=0.0, response_format=fmt),
        )
        engine.complete(request)
        c = engine.calls[-1]
        out[label] = dict(prompt_tokens=c.prompt_tokens, prompt_tok_s=round(c.prompt_tokens / c.prompt_seconds, 1),
                          output_tokens=c.output_tokens,
                          gen_tok_s=round(c.output_tokens / c.generation_seconds, 1) if c.generation_seconds else None)
    return out


def grammar_speed(backbone: str, lm_args: dict, text: str, schemas: dict[str, dict], gen_tokens: int) -> list[dict]:
    """Generation tokens/s with no grammar, llama-cpp-python's full-vocabulary grammar, and the check-first
    grammar (tide_dspy.backbones.grammar), side by side on the same cached prompt, per schema. At temperature 0
    the two grammars must write the same text."""
    engines = {"free": get_lm(backbone, constrained=False, **lm_args).engine,
               "grammar (full vocabulary)": get_lm(backbone, fast_grammar=False, **lm_args).engine,
               "grammar (check first)": get_lm(backbone, fast_grammar=True, **lm_args).engine}
    rows = []
    for schema_name, schema in schemas.items():
        texts, rates = {}, {}
        for label, engine in engines.items():
            fmt = None if label == "free" else {"type": "json_schema", "schema": schema}
            request = Request(model="bench", system="Answer in JSON.", messages=(Message.user(text),),
                              config=Config(max_tokens=gen_tokens, temperature=0.0, response_format=fmt))
            # The engines share one Llama, so the prompt is evaluated once; generation time excludes prompt eval.
            response = engine.complete(request)
            c = engine.calls[-1]
            # llama.cpp's own generation timer counts decoding only; the grammar runs in sampling, so the time to
            # write is the call's wall time less its prompt evaluation.
            seconds = c.wall_seconds - (c.prompt_seconds or 0.0)
            rates[label] = c.output_tokens / seconds if seconds > 0 else None
            texts[label] = response.message.text if hasattr(response.message, "text") else str(response.message)
            rows.append(dict(schema=schema_name, mode=label, output_tokens=c.output_tokens,
                             gen_seconds=round(seconds, 2), gen_tok_s=round(rates[label], 1),
                             grammar_fallbacks=c.grammar_fallbacks))
        free = rates["free"]
        for r in rows[-3:]:
            r["vs_free"] = round(r["gen_tok_s"] / free, 2) if free else None
        rows[-1]["same_text_as_full_vocabulary"] = texts["grammar (check first)"] == texts["grammar (full vocabulary)"]
    return rows


def grounded_schemas(repository_instance) -> dict[str, dict]:
    """The JSON schemas a TIDE round sends for the bench's repository instance and the fixture workspace."""
    from dspy.adapters.json_adapter import _get_structured_outputs_response_format

    from tide_dspy.data import load_instances
    from tide_dspy.domains import ContextView

    workspace = load_instances(ROOT / "tests" / "fixtures" / "instances" / "workspace.jsonl", setting=WORKSPACE.name)[0]
    out = {}
    for instance in (repository_instance, workspace):
        s = get_setting(instance.setting)
        signature = s.grounded_signature(s.round_signature, instance, ContextView.of(instance), 2)
        out[f"grounded {instance.setting} round ({len(instance.artifacts)} artifacts)"] = \
            _get_structured_outputs_response_format(signature).model_json_schema()
    return out


def grammar_main(args, instance, lm_args, started, t0, load_start, argv) -> int:
    toy = {"type": "object", "properties": {"summary": {"type": "string"},
                                            "functions": {"type": "array", "items": {"type": "string"}}},
           "required": ["summary", "functions"]}
    text = (REPOSITORY.render_context(instance)[:6000]
            + "\n\nReport the two most likely bugs in this code as JSON.")
    rows = grammar_speed(args.backbone, {**lm_args, "max_tokens": args.grammar_tokens}, text,
                         {"small schema": toy, **grounded_schemas(instance)}, args.grammar_tokens)
    lines = [f"{r['schema']:45} {r['mode']:26} {r['output_tokens']:4} tok in {r['gen_seconds']:6} s = "
             f"{r['gen_tok_s']:5} tok/s, x{r['vs_free']} of free"
             + (f", fallbacks {r['grammar_fallbacks']}" if r["grammar_fallbacks"] is not None else "")
             + (f", same text as full vocabulary: {r['same_text_as_full_vocabulary']}"
                if "same_text_as_full_vocabulary" in r else "") for r in rows]
    wall = time.perf_counter() - t0
    command = "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    header = (f"command: {command}\ndate: {started.isoformat(timespec='seconds')}\nwall time: {wall:.0f} s\n"
              f"backbone: {args.backbone}, {args.threads} threads, temperature 0; load average at start {load_start}, "
              f"at end {os.getloadavg()[0]:.2f} (other processes share these CPUs)\n")
    print(header + "\n" + "\n".join(lines))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"grammar-{args.backbone}-{started.strftime('%Y%m%dT%H%M%SZ')}"
    write_text(stem.with_suffix(".txt"), header + "\n" + "\n".join(lines) + "\n")
    write_text(
        stem.with_suffix(".json"), json.dumps(dict(command=command, date=started.isoformat(), rows=rows), indent=1)
    )
    print(f"\nsaved {stem}.txt and .json")
    return 0


def run_mode(name: str, lm, adapter, instance, rounds: int, per_round: int, templates=None) -> dict:
    """`rounds` TIDE rounds, all of them: TIDE.forward would stop after a round with nothing new, and the
    reuse ratio needs rounds 2 and 3. Each round is TIDE's own `run_round` on the growing state."""
    program = TIDE(REPOSITORY, templates=templates, max_rounds=rounds, per_round=per_round, max_attempts=2)
    engine = lm.engine
    state, rows, records = DiscoveryState(), [], []
    start_calls = len(engine.calls)
    t0 = time.perf_counter()
    with dspy.context(lm=lm, adapter=adapter):
        for t in range(1, rounds + 1):
            first = len(engine.calls)
            state, record = program.run_round(instance, state, t, per_round)
            records.append(record)
            c = engine.calls[first]
            rows.append(dict(round=t, lm_calls=record.lm_calls, parse_failures=record.parse_failures,
                             parsed_first_time=record.parse_failures == 0, new=record.new, failed=record.failed,
                             prompt_tokens=c.prompt_tokens, reused_tokens=c.reused_tokens,
                             prompt_seconds=round(c.prompt_seconds, 2), output_tokens=c.output_tokens,
                             generation_seconds=round(c.generation_seconds, 2), finish=c.finish_reason))
        # When the model finds nothing, rounds 2 and 3 repeat round 1's prompt exactly. To time the tail that a
        # grown state re-evaluates, two more calls carry already_found = the instance's gold problems (a
        # synthetic state for timing only; their outputs are not findings of this run).
        gold = [Finding(description=g.description[:400], evidence=g.evidence, round=1) for g in instance.problems]
        for k in range(1, min(2, len(gold)) + 1):
            first = len(engine.calls)
            out = program.call_round(instance, program.view(instance), gold[:k], per_round)
            c = engine.calls[first]
            rows.append(dict(round=f"probe: {k} found", lm_calls=out.lm_calls, parse_failures=out.parse_failures,
                             parsed_first_time=out.parse_failures == 0, new=None, failed=out.error is not None,
                             prompt_tokens=c.prompt_tokens, reused_tokens=c.reused_tokens,
                             prompt_seconds=round(c.prompt_seconds, 2), output_tokens=c.output_tokens,
                             generation_seconds=round(c.generation_seconds, 2), finish=c.finish_reason))
    wall = time.perf_counter() - t0
    base = rows[0]["prompt_seconds"]
    for r in rows:
        r["prompt_time_vs_round1"] = round(r["prompt_seconds"] / base, 3) if base else None
    rounds_only = [r for r in rows if isinstance(r["round"], int)]
    known = set(instance.artifact_ids)
    findings = state.findings
    return dict(
        mode=name, wall_seconds=round(wall, 1), rounds=rows, lm_calls=len(engine.calls) - start_calls,
        parsed_first_time=f"{sum(r['parsed_first_time'] for r in rows)}/{len(rows)} calls "
                          f"({sum(r['parsed_first_time'] for r in rounds_only)}/{len(rounds_only)} rounds)",
        findings=len(findings), findings_with_evidence=sum(bool(f.evidence) for f in findings),
        evidence_ids_all_known=all(e in known for f in findings for e in f.evidence),
        error=next((r.error for r in records if r.error), None),
    )


def report(result: dict) -> str:
    lines = [
        f"backbone: {result['backbone']}  threads: {result['threads']}  "
        f"temperature: {result['lm'].get('temperature')}  "
        f"templates: {result['templates'] or 'none'}  instance: {result['instance']} "
        f"({result['candidates']} candidates)",
        "",
    ]
    for label, s in result["speed"].items():
        lines.append(f"speed [{label:7}] prompt {s['prompt_tokens']} tok at {s['prompt_tok_s']} tok/s; "
                     f"generated {s['output_tokens']} tok at {s['gen_tok_s']} tok/s")
    lines.append("")
    for mode in result["modes"]:
        lines.append(
            f"{mode['mode']}: {len(mode['rounds'])} rounds, {mode['lm_calls']} LM calls, {mode['wall_seconds']} s, "
            f"{mode['findings']} findings, evidence ids all known: {mode['evidence_ids_all_known']}"
        )
        for r in mode["rounds"]:
            lines.append(
                f"  {r['round'] if isinstance(r['round'], str) else 'round ' + str(r['round'])}: "
                f"prompt {r['prompt_tokens']} tok, reused {r['reused_tokens']}, "
                f"prompt eval {r['prompt_seconds']} s (x{r['prompt_time_vs_round1']} of round 1), "
                f"out {r['output_tokens']} tok in {r['generation_seconds']} s [{r['finish']}], "
                f"parsed first time: {r['parsed_first_time']}, new {r['new']}"
            )
        if mode["error"]:
            lines.append(f"  last error: {mode['error'][:200]}")
    lines.append("")
    lines.append(
        "first LM answer parsed: " + ", ".join(f"{m['mode']} {m['parsed_first_time']}" for m in result["modes"])
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default="local-small")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--instance", default=DEFAULT_INSTANCE)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-round", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=768)
    parser.add_argument("--temperature", type=float, default=None, help="default: the backbone's (0.0 for local)")
    parser.add_argument("--templates", type=Path, default=None,
                        help="a template library JSON (tide_dspy.templates.TemplateLibrary) to guide the rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--speed-prompt-tokens", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results" / "bench_backbone")
    parser.add_argument("--grammar-only", action="store_true", help="only part 4, the grammar sampling speeds")
    parser.add_argument("--grammar-tokens", type=int, default=96, help="tokens to write per grammar-speed call")
    args = parser.parse_args(argv)

    started = datetime.now(UTC)
    t0 = time.perf_counter()
    load_start = f"{os.getloadavg()[0]:.2f}"
    instance = load_instance(args.data, args.instance)
    context = REPOSITORY.render_context(instance)
    lm_args = dict(num_threads=args.threads, max_tokens=args.max_tokens, temperature=args.temperature,
                   seed=args.seed, cache=False)
    if args.grammar_only:
        return grammar_main(args, instance, lm_args, started, t0, load_start, argv)
    lm = get_lm(args.backbone, **lm_args)
    if not hasattr(lm, "engine") or not hasattr(lm.engine, "calls"):
        raise SystemExit(f"{args.backbone} is not an embedded llama.cpp backbone; this bench measures local engines")
    unconstrained = get_lm(args.backbone, constrained=False, **lm_args)

    result = dict(backbone=args.backbone, lm=describe_lm(lm), threads=args.threads, instance=instance.instance_id,
                  candidates=len(instance.artifacts))
    # ~4 characters per token for code: cut the context to about the requested prompt size.
    result["speed"] = speed(lm, context[: args.speed_prompt_tokens * 4], gen_tokens=128)
    templates = list(TemplateLibrary.load(args.templates)) if args.templates else None
    result["templates"] = str(args.templates) if templates else None
    result["modes"] = [
        run_mode("ChatAdapter (unconstrained)", unconstrained, dspy.ChatAdapter(use_json_adapter_fallback=False),
                 instance, args.rounds, args.per_round, templates),
        run_mode("JSONAdapter + schema grammar", lm, dspy.JSONAdapter(), instance, args.rounds, args.per_round,
                 templates),
    ]
    wall = time.perf_counter() - t0
    text = report(result)
    command = "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    header = (f"command: {command}\ndate: {started.isoformat(timespec='seconds')}\nwall time: {wall:.0f} s\n"
              f"machine: {platform.machine()}, {os.cpu_count()} CPUs; load average at start {load_start}, "
              f"at end {os.getloadavg()[0]:.2f} (other processes share these CPUs)\n")
    print(header + "\n" + text)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{args.backbone}-{started.strftime('%Y%m%dT%H%M%SZ')}"
    write_text(stem.with_suffix(".txt"), header + "\n" + text + "\n")
    write_text(
        stem.with_suffix(".json"),
        json.dumps(
            dict(command=command, date=started.isoformat(), wall_seconds=round(wall, 1), **result),
            indent=1,
            default=str,
        ),
    )
    print(f"\nsaved {stem}.txt and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
