"""The persistent prompt cache (TIDE_PROMPT_CACHE) on the embedded model: a rerun of one instance with it and
without it, side by side in one run.

    python experiments/bench_prompt_cache.py                         # local-small (0.5B), a ~3k-token instance

Three fresh processes run the same first discovery round (method iter, one round, no retries, DSPy's response
cache off) on the same repository instance, so nothing survives in memory between them:
  1. cache on, empty folder: pays the whole prompt and stores the state;
  2. cache on (a rerun): loads the stored prefix and evaluates only the tail;
  3. cache off (a rerun without it): pays the whole prompt again.
Per run: prompt tokens, tokens loaded from disk, llama.cpp's prompt-eval seconds, the seconds spent loading and
storing the state, and the call's wall time; and whether the three runs wrote the same answer (greedy decoding,
so a restored state must give the answer a fresh evaluation gives). Goal: prompt time of run 2 <= 0.1x of run 3
(prompt-eval seconds plus loading seconds, so the disk read is counted).

Writes experiments/results/bench_prompt_cache/<backbone>-<date>.{json,txt}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from tide_dspy.util.safe_write import write_text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
OUT = ROOT / "experiments" / "results" / "bench_prompt_cache"


def pick_instance(max_tokens: int):
    """The largest repository instance whose rendered context fits `max_tokens` (estimated)."""
    from tide_dspy.data import load_instances
    from tide_dspy.data.selection import data_path, select_instances
    from tide_dspy.domains import REPOSITORY

    instances = load_instances(data_path(REPOSITORY.name), setting=REPOSITORY.name)
    fitting = select_instances(instances, max_context_tokens=max_tokens)
    if not fitting:
        raise SystemExit(f"no repository instance fits {max_tokens} tokens")
    return fitting[-1]


def child(args) -> None:
    """One run in this fresh process: the first round of `iter` on the instance; prints a JSON line."""
    import dspy

    from tide_dspy.backbones import get_lm, llamacpp_cache
    from tide_dspy.domains import REPOSITORY
    from tide_dspy.programs import build_program

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    instance = pick_instance(args.max_context_tokens)
    lm = get_lm(args.backbone, max_tokens=args.max_tokens, num_threads=args.threads, n_ctx=args.n_ctx, cache=False)
    program = build_program("iter", REPOSITORY, max_rounds=1, per_round=1, max_attempts=1)
    t0 = time.perf_counter()
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        program(instance)
    call = lm.engine.calls[0]
    cache = llamacpp_cache.for_model(lm.engine.spec.dspy_model, lm.engine.n_ctx)
    print(json.dumps({
        "instance": instance.instance_id, "prompt_tokens": call.prompt_tokens,
        "restored_tokens": cache.restored if cache else 0,
        "prompt_eval_seconds": round(call.prompt_seconds or 0.0, 2),
        "cache_seconds": round(cache.seconds, 2) if cache else 0.0,
        "call_wall_seconds": call.wall_seconds, "run_seconds": round(time.perf_counter() - t0, 2),
        "cache_mb": round(cache.size_bytes() / 2**20, 1) if cache else 0.0,
        "answer": lm.history[0]["outputs"][0] if lm.history else None,
    }), flush=True)


def run_child(args, cache_dir: str | None, timeout: float) -> dict:
    env = {**os.environ, "TIDE_PROMPT_CACHE": cache_dir or "0"}
    cmd = [sys.executable, __file__, "--child", "--backbone", args.backbone, "--max-context-tokens",
           str(args.max_context_tokens), "--max-tokens", str(args.max_tokens), "--threads", str(args.threads),
           "--n-ctx", str(args.n_ctx)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default="local-small")
    parser.add_argument("--max-context-tokens", type=int, default=3000)
    parser.add_argument("--max-tokens", type=int, default=48, help="answer cap: the prompt is what is measured")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0

    with tempfile.TemporaryDirectory(prefix="tide-prompt-cache-") as folder:
        runs = {"first, cache on (fills it)": run_child(args, folder, args.timeout),
                "rerun, cache on": run_child(args, folder, args.timeout),
                "rerun, cache off": run_child(args, None, args.timeout)}
    on, off = runs["rerun, cache on"], runs["rerun, cache off"]
    prompt_on = on["prompt_eval_seconds"] + on["cache_seconds"]
    prompt_off = off["prompt_eval_seconds"]
    ratio = prompt_on / prompt_off if prompt_off else float("nan")
    lines = [
        f"{args.backbone}, {args.threads} threads, instance {on['instance']} ({on['prompt_tokens']} prompt tokens), "
        "each run a fresh process",
        "| run | tokens loaded from disk | prompt eval s | cache load+store s | call wall s | cache MB |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {name} | {r['restored_tokens']} | {r['prompt_eval_seconds']} | {r['cache_seconds']} | "
              f"{r['call_wall_seconds']} | {r['cache_mb']} |" for name, r in runs.items()]
    same = on["answer"] == off["answer"] == runs["first, cache on (fills it)"]["answer"]
    lines.append(f"the three runs wrote the same answer (greedy decoding): {'yes' if same else 'NO'}")
    lines.append(f"rerun prompt time with the cache / without: {prompt_on:.2f}s / {prompt_off:.2f}s = {ratio:.4f}x "
                 "(goal <= 0.1x)")
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "backbone": args.backbone,
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "command": "python experiments/bench_prompt_cache.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "runs": runs,
        "same_answer": same,
        "ratio": round(ratio, 4),
        "goal": "<= 0.1x",
    }
    write_text(out / f"{args.backbone}-{stamp}.json", json.dumps(result, indent=1) + "\n")
    write_text(out / f"{args.backbone}-{stamp}.txt", text + "\n")
    print(f"-> {out / args.backbone}-{stamp}.{{json,txt}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
