"""Client-side throughput of `tide evaluate --workers N` against a latency-bound OpenAI-compatible endpoint.

    python experiments/bench_workers.py                    # 16 instances, 0.5 s per call, --workers 1 vs 8

The endpoint is a STUB (experiments/stub_server.py on 127.0.0.1): it runs no model, waits a fixed delay and
answers empty findings. So this measures only how well the client overlaps calls, the number a served backbone
(vLLM, llama.cpp server with parallel slots, a hosted API) can give when the server has capacity; it says nothing
about model speed. Both runs go through the real CLI (`tide evaluate --backbone openai-compatible`), one after
the other in this process, on copies of tests/fixtures/tiny_workspace.jsonl with distinct ids; DSPy's response
cache is off so every call reaches the stub. Goal: >= 6x.

Writes experiments/results/bench_workers/<date>.{json,txt}.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402

# This checkout's package (not another installed copy) and the stub beside this script.
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from stub_server import StubServer  # noqa: E402

from tide_dspy.cli.main import main as tide  # noqa: E402
from tide_dspy.domains import WORKSPACE  # noqa: E402
from tide_dspy.util.safe_write import write_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny_workspace.jsonl"
OUT = ROOT / "experiments" / "results" / "bench_workers"


def instances_file(folder: Path, n: int) -> Path:
    """`n` copies of the fixture's instances, each with its own id."""
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    path = folder / "instances.jsonl"
    return write_text(path, "".join(json.dumps(dict(rows[k % len(rows)], instance_id=f"bench-{k:03d}")) + "\n"
                                    for k in range(n)))


def run(workers: int, data: Path, stub: StubServer, out: Path, rounds: int) -> dict:
    before = len(stub.requests)
    stub.most_in_flight = 0
    args = ["evaluate", "--method", "iter", "--setting", WORKSPACE.name, "--split", "test", "--data", str(data),
            "--backbone", "openai-compatible", "--api-base", stub.api_base, "--workers", str(workers),
            "--rounds", str(rounds), "--out", str(out), "--fresh", "--no-track", "--judge", "proxy"]
    printed = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(printed):
        code = tide(args)
    seconds = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"tide evaluate --workers {workers} exited {code}:\n{printed.getvalue()}")
    summary = json.loads((out / "summary.json").read_text())
    return {"workers": workers, "seconds": round(seconds, 2), "instances": summary["n_instances"],
            "failed": summary["n_failed"], "requests": len(stub.requests) - before,
            "most_in_flight": stub.most_in_flight,
            "instances_per_second": round(summary["n_instances"] / seconds, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=16)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds the stub waits per call")
    parser.add_argument("--rounds", type=int, default=1,
                        help="most discovery rounds per instance (one call each; the stub's empty answer ends an "
                             "instance after its first round either way)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    if args.instances * args.rounds > 400:
        parser.error("keep it bounded: --instances x --rounds must be <= 400 calls per run")
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    # Bounded: two runs of instances x rounds calls (plus slack for retries).
    limit = 2 * args.instances * args.rounds * 2
    with tempfile.TemporaryDirectory() as tmp, StubServer(delay=args.delay, max_requests=limit) as stub:
        tmp = Path(tmp)
        data = instances_file(tmp, args.instances)
        runs = [run(w, data, stub, tmp / f"w{w}", args.rounds) for w in (1, args.workers)]
    serial, parallel = runs
    ratio = serial["seconds"] / parallel["seconds"]
    result = {
        "what": "client-side throughput against a STUB OpenAI-compatible server (no model), fixed delay per call",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python experiments/bench_workers.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "delay_s": args.delay, "rounds": args.rounds, "cpus": os.cpu_count(), "python": platform.python_version(),
        "runs": runs, "speedup": round(ratio, 2), "goal": ">= 6x",
    }
    lines = [f"STUB endpoint (no model): {args.delay}s per call, {args.instances} instances, "
             f"{os.cpu_count()} CPUs",
             "| workers | seconds | instances/s | requests | most in flight | failed |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['workers']} | {r['seconds']} | {r['instances_per_second']} | {r['requests']} | "
              f"{r['most_in_flight']} | {r['failed']} |" for r in runs]
    lines.append(f"speedup --workers {args.workers} vs 1: {ratio:.2f}x (goal >= 6x)")
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    write_text(out / f"{stamp}.json", json.dumps(result, indent=1) + "\n")
    write_text(out / f"{stamp}.txt", text + "\n")
    print(f"-> {out / stamp}.{{json,txt}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
