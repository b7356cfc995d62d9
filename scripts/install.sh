#!/usr/bin/env bash
# Install tide-dspy into the current Python environment, with a portable llama.cpp build.
#
#   scripts/install.sh                # extras: local,serve,distributed,dev
#   scripts/install.sh local          # other extras (comma-separated); "" for none
#   PYTHON=/path/to/python scripts/install.sh
#
# llama-cpp-python is an sdist: pip compiles it with -march=native by default, and that build dies with
# SIGILL on VMs whose CPUs list AMX/AVX512 but do not allow them. This script compiles it once with fixed
# x86-64-v3 flags (AVX2/FMA/F16C/BMI2) into a wheel cache that pip's own cache cannot mix up (pip's cache
# ignores CMAKE_ARGS), then installs from there. Re-runs reuse the wheel. Override the flags with
# TIDE_LLAMA_CMAKE_ARGS and the cache with TIDE_WHEEL_DIR. Non-interactive: safe under CI.
set -euo pipefail

EXTRAS="${1-local,serve,distributed,dev}"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LLAMA_VERSION="0.3.36"
CMAKE_FLAGS="${TIDE_LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DLLAMA_CURL=OFF}"
PIP=("$PYTHON" -m pip --disable-pip-version-check --no-input)

log() { printf '[install] %s\n' "$*" >&2; }

needs_llama=0
case ",$EXTRAS," in *,local,*) needs_llama=1 ;; esac

if [[ $needs_llama == 1 ]]; then
  PY_TAG="$("$PYTHON" -c 'import sys, sysconfig; print(f"cp{sys.version_info[0]}{sys.version_info[1]}-{sysconfig.get_platform()}")')"
  FLAGS_HASH="$(printf '%s|%s|%s' "$LLAMA_VERSION" "$CMAKE_FLAGS" "$PY_TAG" | sha256sum | cut -c1-12)"
  WHEEL_DIR="${TIDE_WHEEL_DIR:-$HOME/.cache/tide-dspy/wheels}/$FLAGS_HASH"
  mkdir -p "$WHEEL_DIR"
  wheel="$(ls "$WHEEL_DIR"/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
  if [[ -z $wheel ]]; then
    log "building llama-cpp-python $LLAMA_VERSION once (about 12 minutes on 2 cores) with: $CMAKE_FLAGS"
    start=$SECONDS
    CMAKE_ARGS="$CMAKE_FLAGS" FORCE_CMAKE=1 CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
      "${PIP[@]}" wheel --no-cache-dir --no-deps -w "$WHEEL_DIR" "llama-cpp-python==$LLAMA_VERSION"
    wheel="$(ls "$WHEEL_DIR"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n1)"
    printf '%s\n' "$CMAKE_FLAGS" >"$WHEEL_DIR/CMAKE_ARGS"
    log "built $(basename "$wheel") in $((SECONDS - start))s"
  else
    log "reusing $wheel"
  fi
  # --force-reinstall: replace a same-version build from pip's cache (possibly a crashing native one).
  "${PIP[@]}" install --no-deps --force-reinstall "$wheel"
fi

target="$ROOT"
[[ -n $EXTRAS ]] && target="$ROOT[$EXTRAS]"
log "pip install -e $target"
"${PIP[@]}" install -e "$target"

if [[ $needs_llama == 1 ]]; then
  # Self-check: the library loads and was built without the instructions that crash on restricted VMs.
  "$PYTHON" - <<'EOF'
import os

import llama_cpp

info = llama_cpp.llama_print_system_info().decode()
print(f"[install] llama_cpp {llama_cpp.__version__}: {info.strip()}")
cpu = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []
bad = [f for f, need in (("AMX_INT8 = 1", None), ("AVX512 = 1", "avx512f")) if f in info and (need is None or need not in cpu)]
if bad:
    raise SystemExit(f"[install] llama_cpp was built with {bad}, which this CPU cannot run; delete the wheel cache and rerun")
EOF
fi
log "done"
