"""How close `tide evaluate --dry-run` comes to what a run sends: the estimate beside the requests a local
OpenAI-compatible stub received, per method and role (backbone, judge).

For each setting and method (single, multi, tide) the script prints the dry run's estimate of the chosen test
instances, then runs the same `tide evaluate` (workflows.evaluate_split, judge included) on a backbone and a
judge that both point at experiments/stub_server.py, through DSPy's native OpenAI path (ChatAdapter, as a hosted
backbone). The stub plays a model that finds something new in every round: it cites the gold problems' evidence
first, then one new artifact per finding, so every round runs, as the estimate assumes; Multi's samples, which all
start from nothing, begin at a gold problem chosen by the request's seed, as a sampler at temperature would vary.
It runs no model; it keeps every request body, and the script counts their messages with the same tokenizer
(util.tokens.count_tokens). Goal: the estimated calls and prompt tokens within +-15% of what was sent. Output
tokens are not compared: what the stub writes says nothing about what a model would. The judge's calls follow
how many distinct gold problems the findings match. The estimate counts every gold problem the findings could
reach (an upper bound); Multi's independent samples overlap, here as with a model, so its judge makes fewer.

    python experiments/estimate_accuracy.py                       # 4 workspace + 4 repository test instances
    python experiments/estimate_accuracy.py --repository 8 --out experiments/results/cost
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from stub_server import StubServer  # noqa: E402

from tide_dspy import workflows  # noqa: E402
from tide_dspy.cost.estimate import PromptCounter  # noqa: E402
from tide_dspy.data import load_instances  # noqa: E402
from tide_dspy.data.selection import Selection, context_tokens, data_path  # noqa: E402
from tide_dspy.domains import REPOSITORY, WORKSPACE, get_setting  # noqa: E402
from tide_dspy.retry import ATTEMPTS_PER_ROLLOUT  # noqa: E402
from tide_dspy.schemas import Instance  # noqa: E402
from tide_dspy.util.tokens import tokenizer_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("single", "multi", "tide")
BACKBONE, JUDGE = "openai/stub-backbone", "openai/stub-judge"
GOAL = 0.15
_HANDLE = re.compile(r"([A-Z]\d+) · ([^\s(]+)")
_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", re.S)


def fields(message: str) -> dict[str, str]:
    return dict(_FIELD.findall(message))


class FindsSomethingNew:
    """The stub's answers: findings on the gold problems first, then one new artifact per finding; judge ratings."""

    def __init__(self, instances: list[Instance]):
        self.instances = instances

    def __call__(self, body: dict) -> str:
        message = body["messages"][-1]["content"]
        tail = message.split("Respond with")[-1]
        if "[[ ## score ## ]]" in tail:
            return "[[ ## rationale ## ]]\nThe essentials match.\n\n[[ ## score ## ]]\n4\n\n[[ ## completed ## ]]"
        values = fields(message)
        handles = dict((i, h) for h, i in _HANDLE.findall(values.get("context", "")))
        instance = max((i for i in self.instances if all(a.id in handles for a in i.artifacts)),
                       key=lambda i: len(i.artifacts), default=None)
        findings = self.findings(instance, handles, int(values.get("max_new") or 1), values.get("already_found", ""),
                                 body.get("seed")) if instance else []
        return f"[[ ## findings ## ]]\n{json.dumps(findings)}\n\n[[ ## completed ## ]]"

    @staticmethod
    def findings(instance: Instance, handles: dict[str, str], max_new: int, found: str,
                 seed: int | None = None) -> list[dict]:
        setting = get_setting(instance.setting)
        gold_ids = {e for p in instance.problems for e in p.evidence}
        spare = [a.id for a in instance.artifacts if a.id not in gold_ids]
        n_found = len(re.findall(r"^\d+\. ", found, re.M))
        start = (int(seed) // ATTEMPTS_PER_ROLLOUT) % len(instance.problems) if seed and instance.problems else 0
        out = []
        for p in instance.problems[start:] + instance.problems[:start]:
            description = p.description[:240]
            if description[:80] in found:
                continue
            out.append({"description": description, "evidence_ids": [handles[e] for e in p.evidence if e in handles],
                        **FindsSomethingNew.resolution(setting, instance, p)})
        for n in range(n_found + len(out), n_found + max_new):
            artifact = spare[n % len(spare)] if spare else instance.artifacts[0].id
            out.append({"description": f"Possible problem {n + 1}: {artifact} does not agree with the rest",
                        "evidence_ids": [handles.get(artifact, artifact)], **FindsSomethingNew.resolution(
                            setting, instance, None)})
        return [{**f, "used_template_id": "", "why": "it fits"} for f in out[:max_new]]

    @staticmethod
    def resolution(setting, instance: Instance, problem) -> dict:
        if setting.resolution_kind == "patch":
            return {"patch": (problem.patch if problem is not None else "") or ""}
        if problem is not None and problem.action is not None:
            return {"action": {"action_id": problem.action.action_id,
                               "parameters": {k: str(v) for k, v in problem.action.parameters.items()}}}
        action = instance.actions[0]
        filled = {k: "to be decided" for k in action.required_parameters}
        return {"action": {"action_id": action.id, "parameters": filled}}


def chosen(setting: str, data: str | None, n: int) -> list[Instance]:
    """`n` test instances of the setting, spread evenly over their context sizes (all when there are fewer)."""
    instances = sorted(load_instances(data_path(setting, data), setting=setting, split="test"), key=context_tokens)
    if n >= len(instances):
        return instances
    return [instances[round(k * (len(instances) - 1) / max(n - 1, 1))] for k in range(n)]


def sent(requests: list[dict], counter: PromptCounter) -> dict[str, dict[str, int]]:
    """Calls and prompt tokens the stub received, per role (the model name says which)."""
    out = {"backbone": {"calls": 0, "prompt": 0}, "judge": {"calls": 0, "prompt": 0}}
    for body in requests:
        role = "judge" if body.get("model", "").endswith("judge") else "backbone"
        out[role]["calls"] += 1
        out[role]["prompt"] += counter.messages(body["messages"])
    return out


def ratio(estimated: float, measured: float) -> float | None:
    return round(estimated / measured, 3) if measured else None


def method_total(pair: list[dict]) -> dict:
    """The backbone and judge rows of one method, summed (role "all")."""
    total = {**pair[0], "role": "all"}
    for key in ("estimated_calls", "sent_calls", "estimated_prompt_tokens", "sent_prompt_tokens"):
        total[key] = sum(r[key] for r in pair)
    total["calls_ratio"] = ratio(total["estimated_calls"], total["sent_calls"])
    total["prompt_ratio"] = ratio(total["estimated_prompt_tokens"], total["sent_prompt_tokens"])
    return total


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", type=int, default=4, help="workspace test instances (default 4: all)")
    parser.add_argument("--repository", type=int, default=4, help="repository test instances, spread over sizes")
    parser.add_argument("--data", default=None, help="folder with workspace/ and repository/ (default: $TIDE_DATA)")
    parser.add_argument("--out", default=None, help="write estimate_accuracy.json and .md here")
    args = parser.parse_args(argv)
    os.environ.setdefault("OPENAI_API_KEY", "sk-stub-not-a-key")  # the native client wants one; the stub ignores it
    from tide_dspy.backbones import get_lm

    counter, records, started = PromptCounter(), [], time.time()
    for setting, n in ((WORKSPACE, args.workspace), (REPOSITORY, args.repository)):
        if n < 1:
            continue
        data = str(Path(args.data) / setting.name) if args.data else None
        instances = chosen(setting.name, data, n)
        templates = str(ROOT / "programs" / setting.name / "local" / "templates.json")
        selection = Selection(setting=setting, split="test", data=data, ids=[i.instance_id for i in instances])
        with StubServer(answer=FindsSomethingNew(instances)) as stub:
            lm = get_lm(BACKBONE, api_base=stub.api_base, cache=False)
            judge = get_lm(JUDGE, api_base=stub.api_base, cache=False)
            for method in METHODS:
                common = dict(lm=lm, backbone=BACKBONE, method=method, templates=templates, judge=judge)
                estimate = workflows.estimate_split(selection, **common)
                before = len(stub.requests)
                with tempfile.TemporaryDirectory() as tmp:
                    run = workflows.evaluate_split(selection, **common, out=Path(tmp) / "run", fresh=True,
                                                   tracking=workflows.Tracking(enabled=False))
                measured = sent(stub.requests[before:], counter)
                for role in ("backbone", "judge"):
                    tally = estimate.tallies.get((method, role))
                    est_calls, est_prompt = (round(tally.calls), round(tally.prompt)) if tally else (0, 0)
                    got = measured[role]
                    records.append({"setting": setting.name, "method": method, "role": role,
                                    "instances": len(instances), "estimated_calls": est_calls,
                                    "sent_calls": got["calls"], "calls_ratio": ratio(est_calls, got["calls"]),
                                    "estimated_prompt_tokens": est_prompt, "sent_prompt_tokens": got["prompt"],
                                    "prompt_ratio": ratio(est_prompt, got["prompt"]),
                                    "failed_instances": run.result.n_failed})
                records.append(method_total(records[-2:]))
                print(f"{setting.name} {method}: done ({len(stub.requests) - before} requests)", flush=True)

    lines = [f"Dry-run estimate against the requests a stub received (tokens: {tokenizer_name()}); goal: "
             f"ratio within 1 +- {GOAL}.", "",
             "| setting | method | role | instances | calls est. / sent | ratio | prompt tokens est. / sent | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['setting']} | {r['method']} | {r['role']} | {r['instances']} | {r['estimated_calls']:,} / "
                     f"{r['sent_calls']:,} | {r['calls_ratio']} | {r['estimated_prompt_tokens']:,} / "
                     f"{r['sent_prompt_tokens']:,} | {r['prompt_ratio']} |")
    totals = [r for r in records if r["role"] == "all"]
    prompt_ok = all(abs(r["prompt_ratio"] - 1) <= GOAL for r in totals)
    off = [f"{r['setting']} {r['method']} {r['role']} {k.split('_')[0]} {r[k]}" for r in records
           for k in ("calls_ratio", "prompt_ratio") if r[k] is not None and abs(r[k] - 1) > GOAL]
    lines += ["", f"prompt tokens per method (all roles): {'all' if prompt_ok else 'NOT all'} {len(totals)} within "
                  f"+-{GOAL:.0%} (ratios {min(r['prompt_ratio'] for r in totals):.3f} to "
                  f"{max(r['prompt_ratio'] for r in totals):.3f}).",
              "outside +-15%: " + ("; ".join(off) if off else "none") + f". {time.time() - started:.0f} s."]
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "estimate_accuracy.md").write_text("\n".join(lines) + "\n")
        (out / "estimate_accuracy.json").write_text(json.dumps(
            {"command": "python experiments/estimate_accuracy.py " + " ".join(argv or sys.argv[1:]),
             "tokenizer": tokenizer_name(), "goal": GOAL, "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
