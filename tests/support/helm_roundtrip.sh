#!/usr/bin/env bash
# The real HELM on the smoke items (`make harness-check`): a side venv with crfm-helm pinned (torch
# pinned to the local CPU build), the embedded model behind llama_cpp.server on 127.0.0.1, a tiny multiple-choice
# scenario of the smoke items (tests/support/helm/medaudit_helm_plugin.py) run three ways, and the logs imported:
#   gender       4 items, zero-shot, two GenderPerturbation copies (male->female, female->male, both named "gender")
#                beside the originals: imported with the map's perturbation.<field> columns (9 answers; the copies
#                HELM skips as unchanged are listed as map rows without an answer)
#   trials       2 items x 2 train trials, one in-context example each: refused (temperature 0, different prompts)
#   trials_same  1 item x 2 train trials, the same prompt: refused (one deterministic answer repeated)
# The logs it writes are the ones kept in tests/fixtures/harness_logs/helm_* (PROVENANCE.md there). Needs notebook 01
# of the smoke profile (make test, or make nb NB=01 PROFILE=smoke). Everything lands in outputs/helm-check/.
set -euo pipefail
source "$(dirname "$0")/harness_common.sh"
HV=${HELM_VENV:-$ROOT/.cache/helm-venv}
OUT=${HELM_OUT:-$ROOT/outputs/helm-check}
PORT=${HELM_PORT:-8771}
SUPPORT=$ROOT/tests/support/helm
FIX=$ROOT/tests/fixtures/harness_logs
[ -f "$ROOT/outputs/smoke/data/items.jsonl" ] || { echo "run notebook 01 of the smoke profile first" >&2; exit 2; }
if [ ! -x "$HV/bin/helm-run" ]; then
  python3 -m venv "$HV"
  "$HV/bin/pip" install -q "torch==2.13.0" "crfm-helm[openai]==0.5.16"
fi
VERSION=$("$HV/bin/python" -c "import importlib.metadata as m; print(m.version('crfm-helm'))")
rm -rf "$OUT"; mkdir -p "$OUT/prod_env"
# HELM counts tokens with the model's own tokenizer: the one inside the GGUF, saved as a transformers folder (offline)
"$PY" -m medaudit.bench.gpu --save-tokenizer "$OUT/tokenizer" > /dev/null
sed "s#@TOKENIZER@#$OUT/tokenizer#" "$SUPPORT/tokenizer_configs.yaml" > "$OUT/prod_env/tokenizer_configs.yaml"
sed "s#@PORT@#$PORT#" "$SUPPORT/model_deployments.yaml" > "$OUT/prod_env/model_deployments.yaml"
cp "$SUPPORT/model_metadata.yaml" "$OUT/prod_env/"
serve "$PORT" "$OUT/server.log"
(cd "$OUT" && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONPATH="$SUPPORT" \
    MEDAUDIT_HELM_ITEMS="$ROOT/outputs/smoke/data/items.jsonl" "$HV/bin/helm-run" --plugins medaudit_helm_plugin \
    --local-path prod_env --output-path benchmark_output --suite medaudit \
    -r "medaudit_mcq:variant=gender,model=local/$MODEL" "medaudit_mcq:variant=trials,model=local/$MODEL" \
       "medaudit_mcq:variant=trials_same,model=local/$MODEL" \
    --num-train-trials 2 --max-eval-instances 10 --num-threads 1 --exit-on-error) > "$OUT/helm.log" 2>&1
kill $SERVER 2>/dev/null || true
RUNS="$OUT/benchmark_output/runs/medaudit"
run() { echo "$RUNS/medaudit_mcq:variant=$1,model=local_$MODEL/scenario_state.json"; }
"$PY" -m medaudit.engines.harness import helm "$(run gender)" --map "$FIX/helm_gender_map.csv" --model "$MODEL-helm" \
    --profile smoke --store "$OUT/store.sqlite" --version "$VERSION"
for v in trials trials_same; do
  if "$PY" -m medaudit.engines.harness import helm "$(run $v)" --map "$FIX/helm_${v}_map.csv" --model "$MODEL-helm-$v" \
      --profile smoke --store "$OUT/store.sqlite" --version "$VERSION"; then
    echo "the $v run was imported; it should have been refused" >&2; exit 1
  fi
done
echo "crfm-helm $VERSION: the gender run imported, both temperature-0 trial runs refused (as they should be)"
