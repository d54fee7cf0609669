#!/usr/bin/env bash
# The whole assignment, from the repository root:
#   London baseline; vanilla finetuned without pretraining; vanilla, perceiver
#   (bottleneck 64) and synthesizer pretrained then finetuned; dev and test
#   predictions for each; then a table of dev accuracies.
#
#   ./run.sh                      the handout's settings with a CUDA GPU (budgeted at two GPU-hours per pretraining);
#                                 without one, the cpu recipe (90 epochs at batch 32: README,
#                                 "Pretraining on a CPU")
#   ./run.sh --max_epochs 1 ...   any run.py overrides, passed to every training and evaluation
#                                 (--recipe handout forces the handout's settings on a CPU)
#
# Stops at the first failing command. PYTHON picks the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
OVERRIDES=("$@")

for f in wiki.txt birth_places_train.tsv birth_dev.tsv birth_test_inputs.tsv; do
  if [[ ! -f $f && ! -f data/$f ]]; then
    echo "run.sh: $f is neither here nor in data/: see data/README.md" >&2
    exit 2
  fi
done

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "run.sh: no CUDA GPU: training with --recipe cpu (README: Pretraining on a CPU)" >&2
  OVERRIDES=(--recipe cpu "$@")  # first, so that a --recipe among the overrides wins
fi

RESULTS=()

step() {  # step DESCRIPTION COMMAND...: say what comes, then run it
  echo "== $1" >&2
  "${@:2}"
}

run_echoed() {  # run a command, echoing it first
  echo "   $*" >&2
  "$@"
}

run_py() {  # (the ${a[@]+...} form keeps empty arrays working under set -u in bash 3, as on macOS)
  run_echoed "$PY" src/run.py "$@" ${OVERRIDES[@]+"${OVERRIDES[@]}"}
}

evaluate() {  # evaluate NAME VARIANT PARAMS PREFIX [FLAGS...]: dev and test predictions, dev accuracy kept
  local name=$1 variant=$2 params=$3 prefix=$4
  shift 4
  local out
  out=$(step "$name: dev" run_py evaluate "$variant" wiki.txt "$@" --reading_params_path "$params" \
        --eval_corpus_path birth_dev.tsv --outputs_path "$prefix.dev.predictions")
  echo "$out"
  RESULTS+=("$name|${out#Correct: }")
  step "$name: test" run_py evaluate "$variant" wiki.txt "$@" --reading_params_path "$params" \
    --eval_corpus_path birth_test_inputs.tsv --outputs_path "$prefix.test.predictions"
}

london=$(step "London baseline" run_echoed "$PY" src/london_baseline.py birth_dev.tsv)
echo "$london"
echo "$london" > london_baseline_accuracy.txt
RESULTS+=("London baseline|${london#Correct: }")

step "vanilla without pretraining" run_py finetune vanilla wiki.txt \
  --writing_params_path vanilla.model.params --finetune_corpus_path birth_places_train.tsv
evaluate "vanilla without pretraining" vanilla vanilla.model.params vanilla.nopretrain

for variant in vanilla perceiver synthesizer; do
  flags=()
  [[ $variant == perceiver ]] && flags=(--bottleneck_dim 64)
  step "$variant pretraining" run_py pretrain "$variant" wiki.txt ${flags[@]+"${flags[@]}"} \
    --writing_params_path "$variant.pretrain.params"
  step "$variant finetuning" run_py finetune "$variant" wiki.txt ${flags[@]+"${flags[@]}"} \
    --reading_params_path "$variant.pretrain.params" --writing_params_path "$variant.finetune.params" \
    --finetune_corpus_path birth_places_train.tsv
  evaluate "$variant with pretraining" "$variant" "$variant.finetune.params" "$variant.pretrain" ${flags[@]+"${flags[@]}"}
done

{
  echo
  echo "| run | dev: correct out of total: accuracy |"
  echo "| --- | --- |"
  for row in "${RESULTS[@]}"; do
    echo "| ${row%%|*} | ${row#*|} |"
  done
} | tee results.md
