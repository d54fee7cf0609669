#!/usr/bin/env bash
# The whole assignment, from the repository root:
#   London baseline; vanilla finetuned without pretraining; vanilla, perceiver
#   (bottleneck 64), synthesizer and rope pretrained then finetuned; dev and test
#   predictions for each; then a table of dev accuracies.
#
#   ./run.sh                      the handout's settings with a CUDA GPU (budgeted at two GPU-hours per pretraining);
#                                 without one, the cpu recipe (650 epochs of a 128-wide model at
#                                 batch 32, then 20 on shifted examples: about 110 minutes per
#                                 pretraining on 2 cores; docs/cpu-recipe.md), whose pretrained
#                                 models are asked in the corpus's words, not finetuned (docs/readout.md)
#   ./run.sh --pretrain_epochs 1 ...   any run.py flags, passed to every training and evaluation
#                                 (--recipe handout forces the handout's settings on a CPU)
#   ./run.sh --jobs 5             the trainings side by side on one device, each with its share of
#                                 the host's threads (and, on CUDA, DataLoader workers) and its own
#                                 log in logs/; a failed one is named with its log, the others go on
#   VARIANTS="vanilla rope" ./run.sh   only these pretrained variants (default: all four)
#
#   ./run.sh demo                 no data and no GPU needed: the experiment on a generated world (docs/demo.md)
#
# Without --jobs, stops at the first failing command. PYTHON picks the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}

step() {  # step DESCRIPTION COMMAND...: say what comes, then run it
  echo "== $1" >&2
  "${@:2}"
}

run_echoed() {  # run a command, echoing it first
  echo "   $*" >&2
  "$@"
}

percent() {  # the accuracy of a "Correct: 7 out of 20: 35.0%" line
  echo "${1##*: }"
}

recipe_value() {  # recipe_value EXPRESSION RUN.PY-FLAGS...: a Python expression of the `recipe` (and the whole
  # `cfg`, and `config`) run.py makes of the flags, after --recipe cpu where `cuda` (whether torch sees a CUDA
  # GPU) is False (a tuple's items separated by spaces); digest(*values) is a short hash of values. One Python
  # start answers all a caller asks: each costs about a second (torch's import).
  "$PY" -c 'import hashlib, sys; sys.path.insert(0, "src"); import config, torch; from arguments import build_parser, parse
cuda = torch.cuda.is_available()
flags = sys.argv[2:] if cuda else ["--recipe", "cpu", *sys.argv[2:]]
cfg = parse(["evaluate", "vanilla", "wiki.txt", *flags], build_parser())[0]
recipe, digest = cfg.recipe, lambda *values: hashlib.sha256(repr(values).encode()).hexdigest()[:16]
value = eval(sys.argv[1])
print(*value if isinstance(value, tuple) else [value])' "$@"
}

# The demo: src/world.py writes the assignment's four files for generated people into
# DEMO_DIR/world. A model is pretrained on their biographies with the demo recipe
# (src/config.py: RECIPES["demo"], DEMO_VARIANT), then asked the dev people's questions in
# the biographies' own words, with frames mined from the training people's (--readout
# frames), against the handout's question asked of the same params, finetuning without
# pretraining and the most frequent training birthplace (docs/demo.md). The dev people's
# questions are never trained on. With --readout question in DEMO_FLAGS, the pretrained
# model is finetuned gently on the training people's questions and asked the question
# instead (and with --pretrain_stages corpus+pairs, pretrained with those questions mixed
# in). DEMO_SEED seeds the world and the training; DEMO_WORLD (world.py's flags) and
# DEMO_FLAGS (run.py flags for the demo's trainings and evaluations, e.g. --pretrain_epochs
# 60) shrink it (the tests run a small one).
DEMO_DIR=${DEMO_DIR:-demo}
DEMO_SEED=${DEMO_SEED:-0}

demo() {
  local dir=$DEMO_DIR w=$DEMO_DIR/world
  local world variant readout
  world=${DEMO_WORLD:-$("$PY" -c 'import sys; sys.path.insert(0, "src"); from world import DEMO_WORLD; print(DEMO_WORLD)')}
  read -r -a world <<< "$world"
  local flags=()
  read -r -a flags <<< "${DEMO_FLAGS:-}"
  local demo=(--recipe demo --seed "$DEMO_SEED" ${flags[@]+"${flags[@]}"})
  local fields mixes  # the recipe's readout, whether a pretraining stage trains on the pairs ("True"), the variant
  fields=$(recipe_value 'recipe.readout, recipe.trains_on_pairs(), config.DEMO_VARIANT' "${demo[@]}")
  read -r readout mixes variant <<< "$fields"
  local train=(--finetune_corpus_path "$w/birth_places_train.tsv")  # the frames readout mines them too
  local mix=() pretraining="pretraining on the biographies"
  if [[ $mixes == True ]]; then
    mix=(--mix_corpus_path "$w/birth_places_train.tsv")
    pretraining+=", the training people's questions mixed in"
  fi
  mkdir -p "$dir"
  step "demo world" run_echoed "$PY" src/world.py "$w" "${world[@]}" --seed "$DEMO_SEED" >&2
  step "$pretraining" run_echoed "$PY" src/run.py pretrain "$variant" "$w/wiki.txt" "${demo[@]}" \
    ${mix[@]+"${mix[@]}"} --writing_params_path "$dir/pretrain.params"
  local recall before pretrained scratch baseline label
  recall=$(step "pretrained model: dev birthplaces recalled from the biographies" run_echoed "$PY" src/recall.py \
    "$variant" "$w/wiki.txt" --reading_params_path "$dir/pretrain.params" --eval_corpus_path "$w/birth_dev.tsv")
  before=$(step "pretrained model, asked the handout's question: dev" run_echoed "$PY" src/run.py evaluate \
    "$variant" "$w/wiki.txt" "${demo[@]}" --readout question --reading_params_path "$dir/pretrain.params" \
    --eval_corpus_path "$w/birth_dev.tsv" --outputs_path "$dir/before_finetuning.dev.predictions")
  local read=$dir/pretrain.params
  label="pretrained, asked in the corpus's words"
  if [[ $readout == question ]]; then
    read=$dir/finetune.params
    label="pretrain+finetune"
    step "finetuning the pretrained model" run_echoed "$PY" src/run.py finetune "$variant" "$w/wiki.txt" \
      "${demo[@]}" --reading_params_path "$dir/pretrain.params" --writing_params_path "$read" "${train[@]}"
  fi
  pretrained=$(step "$label: dev" run_echoed "$PY" src/run.py evaluate "$variant" "$w/wiki.txt" "${demo[@]}" \
    "${train[@]}" --reading_params_path "$read" --eval_corpus_path "$w/birth_dev.tsv" \
    --outputs_path "$dir/pretrained.dev.predictions")
  step "finetuning without pretraining" run_echoed "$PY" src/run.py finetune "$variant" "$w/wiki.txt" "${demo[@]}" \
    --writing_params_path "$dir/scratch.params" "${train[@]}"
  scratch=$(step "finetune only: dev" run_echoed "$PY" src/run.py evaluate "$variant" "$w/wiki.txt" "${demo[@]}" \
    --readout question --reading_params_path "$dir/scratch.params" --eval_corpus_path "$w/birth_dev.tsv" \
    --outputs_path "$dir/scratch.dev.predictions")
  baseline=$(step "most frequent training birthplace: dev" run_echoed "$PY" src/london_baseline.py "$w/birth_dev.tsv" \
    --most_frequent_in "$w/birth_places_train.tsv")
  recall=${recall#Recalled: }  # "43 out of 45: 95.56%" -> "43 of 45"
  recall=${recall%%:*}
  recall=${recall/ out of / of }
  echo
  echo "pretrained model, continuing the dev people's biographies: $recall birthplaces recalled"
  echo "pretrained model, asked the handout's question before any finetuning: ${before#Correct: }"
  echo
  echo "| run | dev: correct out of total: accuracy |"
  echo "| --- | --- |"
  echo "| $label | ${pretrained#Correct: } |"
  echo "| finetune only | ${scratch#Correct: } |"
  echo "| most frequent training birthplace | ${baseline#Correct: } |"
  echo
  echo "demo result: $label $(percent "$pretrained"), finetune only $(percent "$scratch"), most-frequent-place $(percent "$baseline")"
}

if [[ ${1:-} == demo ]]; then
  if (( $# > 1 )); then
    echo "run.sh: demo takes no arguments (DEMO_WORLD and DEMO_FLAGS shrink it, DEMO_SEED seeds it)" >&2
    exit 2
  fi
  demo
  exit
fi

JOBS=1
OVERRIDES=()
while (( $# )); do
  case $1 in
    --jobs) JOBS=${2:-}; shift $(( $# > 1 ? 2 : 1 )) ;;
    --jobs=*) JOBS=${1#--jobs=}; shift ;;
    *) OVERRIDES+=("$1"); shift ;;
  esac
done
if ! [[ $JOBS =~ ^[1-9][0-9]*$ ]]; then
  echo "run.sh: --jobs takes a positive number of trainings to run at once, got '$JOBS'" >&2
  exit 2
fi
read -r -a VARIANT_LIST <<< "${VARIANTS:-vanilla perceiver synthesizer rope}"
for variant in ${VARIANT_LIST[@]+"${VARIANT_LIST[@]}"}; do
  case $variant in
    vanilla | perceiver | synthesizer | rope) ;;
    *) echo "run.sh: VARIANTS: unknown variant '$variant' (vanilla, perceiver, synthesizer, rope)" >&2; exit 2 ;;
  esac
done

for f in wiki.txt birth_places_train.tsv birth_dev.tsv birth_test_inputs.tsv; do
  if [[ ! -f $f && ! -f data/$f ]]; then
    echo "run.sh: $f is neither here nor in data/: see data/README.md" >&2
    exit 2
  fi
done

# Whether there is a CUDA GPU (without one, the cpu recipe). The recipe's readout: "question"
# finetunes the pretrained models on the handout's question; "frames" asks them in the corpus's own
# words, zero-shot (docs/readout.md). What the overrides make of the settings that trainings read, and
# of all that evaluations read (the stamps' keys); and the bottleneck the handout's perceiver commands pass.
SETTINGS=$(recipe_value '(cuda, recipe.readout, digest(recipe.training_settings(), cfg.seed, cfg.device),
  digest(recipe, cfg.seed, cfg.device), config.HANDOUT_BOTTLENECK_DIM)' ${OVERRIDES[@]+"${OVERRIDES[@]}"})
read -r CUDA READOUT TRAINING_SETTINGS READING_SETTINGS BOTTLENECK <<< "$SETTINGS"
if [[ $CUDA == False ]]; then
  echo "run.sh: no CUDA GPU: training with --recipe cpu (docs/cpu-recipe.md)" >&2
  OVERRIDES=(--recipe cpu ${OVERRIDES[@]+"${OVERRIDES[@]}"})  # first, so that a --recipe among the overrides wins
fi
if [[ $READOUT == frames ]]; then
  echo "run.sh: --readout frames: the pretrained models are asked in the corpus's words, not finetuned (docs/readout.md)" >&2
fi

# With --jobs N, each training gets N-th of the host's cores as threads (OMP_NUM_THREADS, unless
# set already) and, on CUDA, a few DataLoader workers beside them; the flags given win.
JOB_FLAGS=()
if (( JOBS > 1 )); then
  cores=$("$PY" -c 'import os; print(os.cpu_count() or 1)')
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( cores / JOBS > 1 ? cores / JOBS : 1 ))}
  if [[ $CUDA == True ]]; then
    JOB_FLAGS=(--num_workers $(( OMP_NUM_THREADS > 2 ? OMP_NUM_THREADS - 1 : 1 )))
  fi
fi
LOGS=logs
STAMPS=$LOGS/stamps  # OUTPUT.key: the settings OUTPUT was written with, and its digest; OUTPUT.out: what it printed

run_py() {  # (the ${a[@]+...} form keeps empty arrays working under set -u in bash 3, as on macOS)
  run_echoed "$PY" src/run.py "$@" ${JOB_FLAGS[@]+"${JOB_FLAGS[@]}"} ${OVERRIDES[@]+"${OVERRIDES[@]}"}
}

digest() {  # the SHA-256 of standard input
  if command -v sha256sum > /dev/null; then sha256sum; else shasum -a 256; fi | cut -c1-64
}

settings_key() {  # settings_key RUN.PY-ARGS...: the command (less the overrides), what the overrides make of the
  # settings it reads, and the content of every file it reads (here or in data/)
  local arg previous="" path settings=$READING_SETTINGS
  [[ $1 == evaluate ]] || settings=$TRAINING_SETTINGS
  {
    echo "$settings"
    printf '%s\n' "$@"
    for arg in "$@"; do
      case $previous in --writing_params_path | --outputs_path) previous=$arg; continue ;; esac
      previous=$arg
      for path in "$arg" "data/$arg"; do
        if [[ -f $path ]]; then digest < "$path"; break; fi
      done
    done
  } | digest
}

# once NAME OUTPUT RUN.PY-ARGS...: run.py to write OUTPUT, unless its stamp says that this command wrote it
# with the same settings and inputs: then what it printed is printed again. A training cut short by a
# stop goes on from its checkpoint (--resume) when it was started with the same settings. With CHECK=1,
# nothing runs: MISSING=1 says that something would.
once() {
  local name=$1 output=$2 key
  shift 2
  local stamp=$STAMPS/$output
  key=$(settings_key "$@")
  if [[ -f $output && -f $stamp.key && -f $stamp.out && $(cat "$stamp.key") == "$key $(digest < "$output")" ]]; then
    (( CHECK )) || echo "== $name: kept $output, written earlier with the same settings" >&2
    cat "$stamp.out"
    return
  fi
  MISSING=1
  (( CHECK )) && return
  local resume=()
  if [[ $1 != evaluate && -f $output.ckpt && -f $stamp.started && $(cat "$stamp.started") == "$key" ]]; then
    resume=(--resume)
  fi
  mkdir -p "$(dirname "$stamp")"
  rm -f "$stamp.key"
  echo "$key" > "$stamp.started"
  step "$name" run_py "$@" ${resume[@]+"${resume[@]}"} | tee "$stamp.out.part"
  mv "$stamp.out.part" "$stamp.out"
  echo "$key $(digest < "$output")" > "$stamp.key"
  rm -f "$stamp.started"
}

evaluate() {  # evaluate NAME VARIANT PARAMS PREFIX [FLAGS...]: dev and test predictions, the dev score in logs/
  local name=$1 variant=$2 params=$3 prefix=$4
  shift 4
  # the training pairs are where --readout frames mines its frames (the handout's question ignores them)
  set -- "$@" --finetune_corpus_path birth_places_train.tsv
  once "$name: dev" "$prefix.dev.predictions" evaluate "$variant" wiki.txt "$@" --reading_params_path "$params" \
    --eval_corpus_path birth_dev.tsv --outputs_path "$prefix.dev.predictions"
  if (( ! CHECK || ! MISSING )); then  # checking a row: only where all of it so far is kept
    sed -n 's/^Correct: //p' "$STAMPS/$prefix.dev.predictions.out" > "$LOGS/$prefix.dev.score"
  fi
  once "$name: test" "$prefix.test.predictions" evaluate "$variant" wiki.txt "$@" --reading_params_path "$params" \
    --eval_corpus_path birth_test_inputs.tsv --outputs_path "$prefix.test.predictions"
}

without_pretraining() {  # finetuned on the question from scratch, so asked the question whatever the readout
  once "vanilla without pretraining" vanilla.model.params finetune vanilla wiki.txt \
    --writing_params_path vanilla.model.params --finetune_corpus_path birth_places_train.tsv
  evaluate "vanilla without pretraining" vanilla vanilla.model.params vanilla.nopretrain --readout question
}

with_pretraining() {  # with_pretraining VARIANT
  local variant=$1 flags=()
  [[ $variant == perceiver ]] && flags=(--bottleneck_dim "$BOTTLENECK")
  once "$variant pretraining" "$variant.pretrain.params" pretrain "$variant" wiki.txt ${flags[@]+"${flags[@]}"} \
    --writing_params_path "$variant.pretrain.params"
  local read=$variant.pretrain.params
  if [[ $READOUT == question ]]; then
    read=$variant.finetune.params
    once "$variant finetuning" "$read" finetune "$variant" wiki.txt ${flags[@]+"${flags[@]}"} \
      --reading_params_path "$variant.pretrain.params" --writing_params_path "$read" \
      --finetune_corpus_path birth_places_train.tsv
  fi
  evaluate "$variant with pretraining" "$variant" "$read" "$variant.pretrain" ${flags[@]+"${flags[@]}"}
}

done_before() {  # done_before COMMAND: whether every output of a row's command was written earlier with the same settings
  CHECK=1 MISSING=0
  $1 > /dev/null
  CHECK=0
  (( ! MISSING ))
}

# The trainings, as "row name|predictions prefix|command"; the table's rows come in this order.
TRAININGS=("vanilla without pretraining|vanilla.nopretrain|without_pretraining")
for variant in ${VARIANT_LIST[@]+"${VARIANT_LIST[@]}"}; do
  TRAININGS+=("$variant with pretraining|$variant.pretrain|with_pretraining $variant")
done

mkdir -p "$LOGS"
for training in "${TRAININGS[@]}"; do
  IFS="|" read -r _ prefix _ <<< "$training"
  rm -f "$LOGS/$prefix.dev.score"  # a score left by an earlier run is not this run's
done

london=$(step "London baseline" run_echoed "$PY" src/london_baseline.py birth_dev.tsv)
echo "$london"
echo "$london" > london_baseline_accuracy.txt

# A row whose params and predictions were all written with these settings (a run stopped and run
# again) is skipped; the others run, a training cut short going on from its checkpoint.
FAILED=() CHECK=0 MISSING=0 PIDS=()
(( JOBS == 1 )) || echo "== the trainings, $JOBS at a time, $OMP_NUM_THREADS thread(s) each; their logs in $LOGS/" >&2
for training in "${TRAININGS[@]}"; do
  IFS="|" read -r name prefix command <<< "$training"
  if done_before "$command"; then
    echo "== $name: skipped: its params and predictions were written earlier with the same settings" >&2
    PIDS+=("")
  elif (( JOBS == 1 )); then
    $command
  else
    while (( $(jobs -pr | wc -l) >= JOBS )); do sleep 1; done
    echo "== started: $name ($LOGS/$prefix.log)" >&2
    $command >> "$LOGS/$prefix.log" 2>&1 &
    PIDS+=($!)
  fi
done
if (( JOBS > 1 )); then
  for i in "${!TRAININGS[@]}"; do
    IFS="|" read -r name prefix _ <<< "${TRAININGS[$i]}"
    if [[ -z ${PIDS[$i]} ]]; then
      continue
    elif wait "${PIDS[$i]}"; then
      echo "== finished: $name" >&2
    else
      echo "run.sh: $name failed: see $LOGS/$prefix.log" >&2
      FAILED+=("$name")
    fi
  done
fi

{
  echo
  echo "| run | dev: correct out of total: accuracy |"
  echo "| --- | --- |"
  echo "| London baseline | ${london#Correct: } |"
  for training in "${TRAININGS[@]}"; do
    IFS="|" read -r name prefix _ <<< "$training"
    if [[ -f $LOGS/$prefix.dev.score ]]; then
      echo "| $name | $(cat "$LOGS/$prefix.dev.score") |"
    else
      echo "| $name | failed: see $LOGS/$prefix.log |"
    fi
  done
  if [[ $READOUT == frames ]]; then
    echo
    echo "With pretraining: asked zero-shot in the corpus's words (--readout frames); without: finetuned on the question."
  fi
} | tee results.md
(( ${#FAILED[@]} == 0 ))
