#!/usr/bin/env bash
# The real harnesses on the design export (`make harness-check`): a side venv with the pinned lm-eval and
# inspect-ai, the embedded model behind llama_cpp.server on 127.0.0.1, notebook 03's smoke design exported, run by
# each harness, both logs imported back into one store, and each harness's own reported accuracy checked equal to ours
# on the same replies (before the model runs, tests/test_harness_tools.py in the side venv). Needs notebooks
# 01-02 of the smoke profile (make test or make nb NB=01 PROFILE=smoke, then NB=02). Prints each import's counts and
# each comparison; everything lands in outputs/harness-check/.
set -euo pipefail
source "$(dirname "$0")/harness_common.sh"
HV=${HARNESS_VENV:-$ROOT/.cache/harness-venv}
OUT=${HARNESS_OUT:-$ROOT/outputs/harness-check}
PORT=${HARNESS_PORT:-8765}
[ -f "$ROOT/outputs/smoke/data/variants.jsonl" ] || { echo "run notebooks 01-02 of the smoke profile first" >&2; exit 2; }
if [ ! -x "$HV/bin/lm_eval" ] || [ ! -x "$HV/bin/inspect" ] || [ ! -x "$HV/bin/pytest" ]; then
  python3 -m venv "$HV"
  "$HV/bin/pip" install -q "torch==2.13.0" "lm-eval==0.4.13" "inspect-ai==0.3.285" openai pandas pyyaml pydantic \
      scipy statsmodels jinja2 tqdm pytest
fi
# the harnesses' own scores of the exported tasks on replies that tell rules apart, a replaying model, no server
(cd "$ROOT" && "$HV/bin/python" -m pytest tests/test_harness_tools.py -q -p no:cacheprovider -W ignore::DeprecationWarning)
rm -rf "$OUT"; mkdir -p "$OUT"
"$PY" -m medaudit.engines.harness export --profile smoke --out "$OUT/export"
serve "$PORT" "$OUT/server.log"
# inspect takes the task file by a relative path
(cd "$OUT/export" && LOCAL_BASE_URL="http://127.0.0.1:$PORT/v1" LOCAL_API_KEY=none "$HV/bin/inspect" eval \
    medaudit_mcq_inspect.py --model "openai-api/local/$MODEL" --log-dir "$OUT/inspect" --max-connections 1 \
    --display plain)
HF_HUB_OFFLINE=1 "$HV/bin/lm_eval" --model local-chat-completions \
    --model_args "model=$MODEL,base_url=http://127.0.0.1:$PORT/v1/chat/completions,num_concurrent=1,max_retries=3,tokenized_requests=False,tokenizer_backend=None" \
    --include_path "$OUT/export" --tasks medaudit_mcq --apply_chat_template --output_path "$OUT/lm-eval" --log_samples
MAP="$OUT/export/medaudit_mcq_map.csv"
# an .eval log is read by inspect_ai: the side venv runs the project's importer for it
"$HV/bin/python" -m medaudit.engines.harness import inspect "$OUT"/inspect/*.eval --map "$MAP" \
    --model "$MODEL-inspect" --profile smoke --store "$OUT/store.sqlite"
"$PY" -m medaudit.engines.harness import lm-eval "$OUT"/lm-eval/*/samples_medaudit_mcq_*.jsonl --map "$MAP" \
    --model "$MODEL-lm-eval" --profile smoke --store "$OUT/store.sqlite" --version 0.4.13
# each harness's own reported accuracy must be ours on the same replies (exit 1 otherwise)
"$HV/bin/python" -m medaudit.engines.harness agree inspect "$OUT"/inspect/*.eval --model "$MODEL-inspect" --profile smoke \
    --store "$OUT/store.sqlite"
"$PY" -m medaudit.engines.harness agree lm-eval "$OUT"/lm-eval/*/results_*.json --model "$MODEL-lm-eval" --profile smoke \
    --store "$OUT/store.sqlite"
