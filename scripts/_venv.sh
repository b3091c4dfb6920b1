# Sourced by scripts/up and scripts/test: a virtualenv with the project's own dependencies.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VENV="${CTXOBS_VENV:-$ROOT/.venv}"
EXTRAS="$1"
if [ ! -x "$VENV/bin/python" ]; then
  echo "ctxobs: creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
STAMP="$VENV/.ctxobs-installed-$(echo "$EXTRAS" | tr ',' '-')"
WANT="$(cat pyproject.toml | "$VENV/bin/python" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "ctxobs: installing dependencies ($EXTRAS) — the first run builds llama-cpp-python (about 5 minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # A portable llama.cpp build: -march=native turns on AMX kernels that fault on hosts which
  # report AMX without enabling its tile state (seen on some VMs), crashing the local model.
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON}"
  "$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
