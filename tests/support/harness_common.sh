# Sourced by harness_roundtrip.sh and helm_roundtrip.sh (make harness-check): the project's paths, and the
# embedded model served on 127.0.0.1 for as long as the script runs.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=$ROOT/.venv/bin/python
# this checkout's library, whatever the venv's editable install points at (a worktree shares another's venv)
export PYTHONPATH="$ROOT/lib${PYTHONPATH:+:$PYTHONPATH}"
MODEL=qwen2.5-coder-1.5b

# serve PORT LOG: the embedded GGUF behind llama_cpp.server (n_ctx 4096, named MODEL), stopped when the script exits
serve() {
  local gguf
  gguf=$("$PY" -c "from medaudit.llm import models; print(models.model_path('$MODEL'))")
  "$PY" -m llama_cpp.server --model "$gguf" --host 127.0.0.1 --port "$1" --n_ctx 4096 --model_alias "$MODEL" \
      > "$2" 2>&1 &
  SERVER=$!
  trap 'kill $SERVER 2>/dev/null || true' EXIT
  for _ in $(seq 120); do curl -sf "http://127.0.0.1:$1/v1/models" > /dev/null && break; sleep 1; done
  # one chat request of a prompt's length before any harness runs: a server that dies on it (a llama.cpp build for
  # another CPU ends in SIGILL at the first batched prompt) stops the script here, not after the harness's retries
  local words rc=running
  words=$(printf 'word %.0s' $(seq 200))
  if ! curl -sf -m 600 "http://127.0.0.1:$1/v1/chat/completions" -H 'Content-Type: application/json' -d \
      "{\"model\": \"$MODEL\", \"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"$words\"}]}" \
      > /dev/null; then
    sleep 1
    kill -0 "$SERVER" 2>/dev/null || { wait "$SERVER" || rc=$?; }
    echo "the model server on 127.0.0.1:$1 answered no chat request (its exit status: $rc; 132 is SIGILL, a" \
         "llama.cpp built for instructions this machine does not allow: e.g. rebuild llama-cpp-python with" \
         "CMAKE_ARGS=-DGGML_NATIVE=OFF); log: $2" >&2
    exit 1
  fi
}
