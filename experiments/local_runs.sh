#!/usr/bin/env bash
# The real runs committed under programs/ and experiments/results/, in the order they were made, on the embedded
# 0.5B backbone (2 CPU threads). Every step resumes: rerun the script after a crash and finished work is kept.
#   bash experiments/local_runs.sh [STEP ...]      # steps: distill-ws distill-repo table1-ws table1-repo compile discover tune-evaluate budget-repo grounded scan transfer shortlist-ws shortlist-repo floors compile-local-repo heldout-repo compile-local-ws heldout-ws compile-miprov2-repo compile-gepa-repo compare-compile
# The compile-* and heldout-* steps run the 1.5B (`local`, the default backbone) whatever TIDE_BACKBONE says.
set -uo pipefail
cd "$(dirname "$0")/.."
B="${TIDE_BACKBONE:-local-small}"
# llama.cpp threads of the 1.5B steps. Under CPU contention one thread runs faster than two: two threads wait
# on each other at every barrier whenever the scheduler takes one away.
THREADS="${TIDE_THREADS:-2}"
LOG=experiments/results/logs
mkdir -p "$LOG"
export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-sqlite:///mlflow.db}"
# Under a JSON grammar the small models answer an empty list to nearly every round; require at least one
# finding per answer (see tide_dspy.backbones.llamacpp.LlamaCppEngine._require_items). Distillation is unaffected.
export TIDE_REQUIRE_ITEMS="${TIDE_REQUIRE_ITEMS:-1}"
REPO_SUBSET=(--max-context-tokens 12000)
# The first N workspace test instances (all 4 when unset): one instance costs ~35 min on the 0.5B model here.
WS_SUBSET=(${TIDE_WS_LIMIT:+--limit "$TIDE_WS_LIMIT"})
# The committed workspace runs read v1 of the workspace set; TIDE_WS_DATA=v2 runs them on the shipped default.
WS_DATA=(--data "data/workspace/${TIDE_WS_DATA:-v1}")

step() {  # name, command...
  local name=$1; shift
  echo "== $name: $* ($(date -u +%FT%TZ))" | tee -a "$LOG/$name.log"
  local t0=$SECONDS
  "$@" 2>&1 | tee -a "$LOG/$name.log"
  echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s" | tee -a "$LOG/$name.log"
}

run() {
  case $1 in
    distill-ws)  # issue 14: retried under dspy.Refine until the abstraction check passes; 1 thread under load
      step distill-workspace tide distill --setting workspace "${WS_DATA[@]}" --backbone "$B" --attempts 3 --threads 1 --max-tokens 320 ;;
    distill-repo)
      step distill-repository tide distill --setting repository --backbone "$B" --max-context-tokens 8500 \
        --max-cases "${TIDE_DISTILL_CASES:-6}" --attempts 3 --threads 1 --max-tokens 320 ;;
    table1-ws)
      step table1-workspace python experiments/run.py table1 --setting workspace "${WS_DATA[@]}" --backbone "$B" --judge proxy "${WS_SUBSET[@]}"
      for e in steps budget instances; do
        step "$e-workspace" python experiments/run.py "$e" --setting workspace "${WS_DATA[@]}" --backbone "$B" --judge proxy "${WS_SUBSET[@]}"
      done ;;
    table1-repo)
      for e in table1 steps rounds instances; do
        step "$e-repository" python experiments/run.py "$e" --setting repository --backbone "$B" --judge proxy "${REPO_SUBSET[@]}"
      done ;;
    compile)
      step compile-repository tide compile --setting repository --backbone "$B" --optimizer copro \
        --metric retrieval-f1 --max-context-tokens 5000 --rounds 2 --opt init.breadth=2 --opt init.depth=1 ;;
    discover)
      step discover-repo tide discover repo examples/sample_repo --backbone "$B" --rounds 2 --max-tokens 512 \
        --out experiments/results/discover-sample-repo
      step discover-workspace tide discover workspace examples/sample_workspace --profile examples/workspace_profile.yaml \
        --actions examples/workspace_actions.yaml --backbone "$B" --rounds 2 --max-tokens 512 \
        --out experiments/results/discover-sample-workspace ;;
    tune-evaluate)
      step tune-repository tide tune --setting repository --backbone "$B" --trials 2 --max-context-tokens 5000
      step evaluate-repository tide evaluate --program "programs/repository/$B/tide.json" --setting repository \
        --backbone "$B" --judge proxy --split test --max-context-tokens 12000 --limit 1 \
        --out experiments/results/evaluate-repository-compiled ;;
    budget-repo)
      step budget-repository python experiments/run.py budget --setting repository --backbone "$B" --judge proxy "${REPO_SUBSET[@]}" ;;
    grounded)  # issue 12: Table 1 beside both floors, with the library the first grounded runs used
      step grounded-repository python experiments/run.py table1 --setting repository --backbone "$B" --judge proxy \
        --templates experiments/results/repository-local-small/templates-used.json --max-context-tokens 12000 --limit 3
      step grounded-workspace python experiments/run.py table1 --setting workspace "${WS_DATA[@]}" --backbone "$B" --judge proxy \
        --templates experiments/results/workspace-local-small/templates-used.json --rounds 5 --methods single multi tide ;;
    scan)  # issue 15: ranking quality on train, then scan+TIDE and scan+Single on test
      step scan-recall python experiments/scan_recall.py --setting repository --backbone "$B" --split train --limit 2
      step scan-repository python experiments/run.py table1 --setting repository --backbone "$B" --judge proxy \
        --templates experiments/results/repository-local-small/templates-used.json --max-context-tokens 12000 \
        --limit 3 --methods tide single --scan --out experiments/results/repository-local-small-scan
      step scan-workspace python experiments/run.py table1 --setting workspace "${WS_DATA[@]}" --backbone "$B" --judge proxy \
        --templates experiments/results/workspace-local-small/templates-used.json --rounds 5 --methods tide single \
        --scan --out experiments/results/workspace-local-small-scan ;;
    shortlist-ws|shortlist-repo)  # issue 15, second pass: the shortlist takes the first handles
      # TIDE_SHUFFLE=SEED runs the same with the context shuffled; TIDE_BACKBONE=local runs it on the 1.5B.
      local tag=${TIDE_SHUFFLE:+-shuffled$TIDE_SHUFFLE} order=(${TIDE_SHUFFLE:+--shuffle-context "$TIDE_SHUFFLE"})
      if [[ $1 == shortlist-ws ]]; then
        step "shortlist-workspace-$B$tag" python experiments/run.py table1 --setting workspace "${WS_DATA[@]}" --backbone "$B" "${WS_SUBSET[@]}" \
          --judge proxy --templates experiments/results/workspace-local-small/templates-used.json --rounds 5 \
          --methods tide single --scan "${order[@]}" --out "experiments/results/workspace-$B$tag-shortlist"
      else
        step "shortlist-repository-$B$tag" python experiments/run.py table1 --setting repository --backbone "$B" \
          --judge proxy --templates experiments/results/repository-local-small/templates-used.json \
          "${REPO_SUBSET[@]}" --limit 3 --methods tide single --scan "${order[@]}" \
          --out "experiments/results/repository-$B$tag-shortlist"
      fi ;;
    transfer)  # issue 14: old library against the checked one; the old rows are Table 1's (copy them to resume)
      mkdir -p experiments/results/transfer-workspace-local-small/old
      cp experiments/results/workspace-local-small/raw/tide/config.json experiments/results/transfer-workspace-local-small/old/
      cp experiments/results/workspace-local-small/raw/tide/run0.jsonl experiments/results/transfer-workspace-local-small/old/results.jsonl
      step transfer-workspace python experiments/transfer.py --setting workspace "${WS_DATA[@]}" --backbone "$B" --judge proxy --rounds 5 \
        --limit 2 --library old=experiments/results/workspace-local-small/templates-used.json \
        --library new=programs/workspace/local-small/templates.json ;;
    floors)  # the three chance floors of every table1 folder, rerun without a model beside the LM rows kept
      for meta in experiments/results/*/meta-table1.json; do
        local dir; dir=$(dirname "$meta")
        local again; again=$(python3 -c 'import json, shlex, sys
words = shlex.split(json.load(open(sys.argv[1]))["command"])[1:]
kept = [w for i, w in enumerate(words) if w != "--out" and (i == 0 or words[i - 1] != "--out")]
data = sys.argv[3:] if "workspace" in words and "--data" not in words else []  # the set the run read
print(shlex.join(kept + data + ["--out", sys.argv[2], "--floors-only"]))' "$meta" "$dir" "${WS_DATA[@]}")
        eval step "floors-$(basename "$dir")" python experiments/run.py "$again"
      done ;;
    compile-local-repo)  # the scan instruction against scan recall@8 on the train split's small instances
      step compile-repository-local-copro tide compile --setting repository --backbone local --threads "$THREADS" \
        --split train --max-context-tokens 5000 --scan 8 --metric scan-recall --optimizer copro \
        --opt init.breadth=2 --opt init.depth=1 --judge proxy ;;
    heldout-repo|heldout-ws)  # uncompiled and compiled side by side on the test split; TIDE_SHUFFLE=SEED shuffles
      local tag=${TIDE_SHUFFLE:+-shuffled$TIDE_SHUFFLE} order=(${TIDE_SHUFFLE:+--shuffle-context "$TIDE_SHUFFLE"})
      if [[ $1 == heldout-repo ]]; then
        # TIDE_HELDOUT_LIMIT: the smallest N test instances (1 was run: about 5 min per program, scans cached, here)
        step "heldout-repository-local$tag" python experiments/run.py table1 --setting repository --backbone local \
          --threads "$THREADS" --judge proxy --templates programs/repository/local/templates.json "${REPO_SUBSET[@]}" \
          --limit "${TIDE_HELDOUT_LIMIT:-1}" --methods tide tide-compiled --compiled programs/repository/local/tide.json --scan "${order[@]}" \
          --out "experiments/results/compile-repository-local$tag"
      else
        step "heldout-workspace-local$tag" python experiments/run.py table1 --setting workspace "${WS_DATA[@]}" --backbone local \
          --threads 2 --judge proxy --templates programs/workspace/local/templates.json --rounds 1 --limit 2 \
          --methods tide tide-compiled --compiled programs/workspace/local/tide.json "${order[@]}" \
          --out "experiments/results/compile-workspace-local$tag"
      fi ;;
    compile-local-ws)  # the round instruction, T=1, on the two train workspaces (one to train, one held out)
      step compile-workspace-local-copro tide compile --setting workspace "${WS_DATA[@]}" --backbone local --threads "$THREADS" \
        --split train --rounds 1 --metric retrieval-f1 --optimizer copro --opt init.breadth=2 --opt init.depth=1 \
        --judge proxy ;;
    compile-miprov2-repo)  # MIPROv2, instruction only, same data and metric; its program is kept apart
      step compile-repository-local-miprov2 tide compile --setting repository --backbone local --threads "$THREADS" \
        --split train --max-context-tokens 5000 --scan 8 --metric scan-recall --optimizer miprov2 \
        --opt init.auto=null --opt init.num_candidates=2 --opt compile.num_trials=2 \
        --opt compile.program_aware_proposer=false --opt compile.tip_aware_proposer=false \
        --templates programs/repository/local/templates.json --programs experiments/results/compile-miprov2 \
        --judge proxy --no-register ;;
    compile-gepa-repo)  # GEPA, its reflection on the same 1.5B, bounded; its program is kept apart
      step compile-repository-local-gepa tide compile --setting repository --backbone local --threads "$THREADS" \
        --split train --max-context-tokens 5000 --scan 8 --metric scan-recall --optimizer gepa \
        --opt init.max_metric_calls=6 --max-calls 150 --templates programs/repository/local/templates.json \
        --programs experiments/results/compile-gepa/programs --judge proxy --no-register ;;
    compare-compile)
      step compare-compile python experiments/compare.py --out experiments/results/compile-summary/repository \
        --goal 0 --title "repository, 1.5B: uncompiled and compiled against the floors" \
        "plain=experiments/results/compile-repository-local" \
        "shuffled=experiments/results/compile-repository-local-shuffled1"
      step compare-compile python experiments/compare.py --out experiments/results/compile-summary/workspace \
        --goal 0 --title "workspace, 1.5B, T=1: uncompiled and compiled against the floors" \
        "plain=experiments/results/compile-workspace-local" ;;
    *) echo "unknown step $1" >&2; return 2 ;;
  esac
}

steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(distill-ws distill-repo table1-ws table1-repo compile discover tune-evaluate budget-repo grounded scan transfer shortlist-ws shortlist-repo floors compile-local-repo heldout-repo compile-local-ws heldout-ws compile-miprov2-repo compile-gepa-repo compare-compile)
for s in "${steps[@]}"; do run "$s"; done
