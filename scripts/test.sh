#!/usr/bin/env bash
# The test lanes, fastest first, in the active Python environment (the README's test command; CI runs all four).
#
#   bash scripts/test.sh            # fast, then paper, then full, then wheel
#   bash scripts/test.sh fast       # lint, docs check and the offline suite (the shipped sets' checks too): no
#                                   # llama.cpp build, nothing to download
#   bash scripts/test.sh paper      # the paper's settings end to end against the provider simulator (minutes)
#   bash scripts/test.sh full       # builds the embedded backbone once (scripts/install.sh), then the tests of the
#                                   # real model, the served llama.cpp engine and PostgreSQL
#   bash scripts/test.sh wheel      # builds the wheel, installs it in a new venv and runs `tide discover` and
#                                   # `tide data check` (the sets it carries) from it
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
PIP=("$PYTHON" -m pip --disable-pip-version-check --no-input -q)
lanes=("${@:-fast paper full wheel}")
lanes=(${lanes[*]})

lane() { printf '\n[test] == %s lane ==\n' "$1" >&2; }

fast() {
  lane fast
  "$PYTHON" -c 'import tide_dspy, pytest, xdist, ruff' 2>/dev/null || "${PIP[@]}" install -e ".[dev]"
  "$PYTHON" -m ruff check .
  "$PYTHON" scripts/check_docs.py
  # Two workers per core (pytest-xdist): many tests wait (retries, polls, timeouts) rather than compute.
  "$PYTHON" -m pytest -m "not local and not postgres and not paper" -n "$(( 2 * $(nproc) ))"
}

paper() {
  lane paper
  "$PYTHON" -m pytest -m paper -n auto
}

full() {
  lane full
  bash scripts/install.sh
  "$PYTHON" -m pytest -m "local or postgres"
}

wheel() {
  lane wheel
  local tmp
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' RETURN
  "${PIP[@]}" wheel --no-deps -w "$tmp/dist" .
  "$PYTHON" -m venv "$tmp/venv"
  # The embedded backbone's llama-cpp-python comes from the wheel scripts/install.sh built (the `full` lane).
  local llama
  llama="$(ls "${TIDE_WHEEL_DIR:-$HOME/.cache/tide-dspy/wheels}"/*/llama_cpp_python-*.whl | head -n1)"
  "$tmp/venv/bin/python" -m pip --disable-pip-version-check -q install "$llama" "$(ls "$tmp"/dist/*.whl)[local]"
  cp -r examples/sample_repo "$tmp/sample_repo"
  (cd "$tmp" && venv/bin/tide discover repo sample_repo --rounds 1 --out report) | tee "$tmp/discover.log"
  grep -q "shipped" "$tmp/discover.log" || { echo "[test] the wheel found no shipped program or templates" >&2; return 1; }
  (cd "$tmp" && env -u TIDE_DATA venv/bin/tide data check --no-floors)
}

for name in "${lanes[@]}"; do
  case $name in
    fast|paper|full|wheel) "$name" ;;
    *) echo "scripts/test.sh: unknown lane '$name' (fast, paper, full, wheel)" >&2; exit 2 ;;
  esac
done
