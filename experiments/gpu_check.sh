#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run that ends within DEADLINE seconds (default 570),
# with the assignment's four files in data/ (on a loan: copied there and carried):
#
#   experiments/gpu_check.sh OUT
#
# The parts run one after another, alone on the machine, in this order (PARTS picks them); a
# part that the deadline leaves no time for is skipped. A loan's calls, in order:
#   PARTS="variants cuda_tests"   the rows never run on a GPU, then the tests that need CUDA beside them
#   PARTS="precisions"            vanilla's 650 epochs in fp32, bf16 and fp16
#   PARTS="table fused" TABLE_FLAGS="--precision P"   the whole table, then the fused graph's pretraining
# The parts:
#   variants  VARIANTS="perceiver synthesizer rope" ./run.sh $TABLE_FLAGS (default --precision tf32), one
#             after another (side by side was never measured faster on a GPU); with cuda_tests in PARTS,
#             the tests run beside it
#   precisions  the handout's vanilla (as in handout) with --precision fp32, bf16 and fp16, each
#             captured (fp16 with --captured_step cuda_graph, which auto leaves off)
#   table     ./run.sh $TABLE_FLAGS, the whole handout table, one row after another
#   fused     vanilla's handout pretraining with --captured_step fused_graph $TABLE_FLAGS: its wall time
#   paces     experiments/step_pace.py: vanilla's handout pretraining under each way of running the
#             step (straightforward, cut batches, fixed shapes, captured by a CUDA graph, the
#             default, and by torch.compile) in fp32, tf32 and bf16: steps/s, host and GPU
#             time a step, 650 epochs projected
#   handout   the handout's vanilla, whole processes with the fastest row's flags (FLAGS= to choose):
#             the 650-epoch pretraining (its time; cut at its limit, the epoch it reached and its
#             projected time), the handout's finetuning and dev score, and the frames readout of the
#             same pretrained params (the learned choice)
#   handout_fp32  the same with the fastest fp32 row's flags, when the fastest is not fp32
#   profile   vanilla's handout pretraining, eager, batches cut and at full width: an epoch's
#             batches drawn, 50 steps on batches in memory timed, then torch.profiler's table of 50 more
#   pace      the benchmark's rows of the handout pretraining for the four variants in fp32 (the
#             fastest of 4 epochs each way)
#   switches  vanilla's rows with --fixed_shapes, with --precision tf32, with --precision bf16, with --compile
#   demo      ./run.sh demo
#   cuda_tests  tests/test_cuda.py and tests/test_capture.py alone (the tests that need CUDA, and their neighbours)
#   suite     the whole suite with CUDA visible, tests/test_cuda.py included (each test named as it
#             ends; the 25 slowest listed)
# What comes back is what is under OUT as soon as it exists: OUT/summary.md gathers what each part
# printed that matters, as it goes; a table's logs/ is OUT/<part>_logs, so each finished row's dev
# score (<row>.dev.score) and what its commands printed (stamps/*.out) are there once written;
# OUT/gpu_samples.csv has the GPU's memory and utilisation every second; OUT/logs.tar every part's log.
# A part cut at its limit gets SIGTERM; the suite SIGINT, so that pytest still lists its slowest tests.
# RUN_FLAGS are added to every run.py and run.sh command: a rehearsal on the CPU gives the smoke flags
# (--recipe handout --device cpu --pretrain_epochs 1 ... ; then nvidia-smi is missing and no samples are taken).
# Measured on one H100 (2026-11-26 and 27): the suite with 16 workers needs more than 285 s
# (2 workers on 2 CPU cores: 270 s); the benchmark about 60 s a variant; the demo more than
# 75 s. On one H200 (2026-11-27, docs/speed.md) "paces handout handout_fp32" took a loan's
# first call whole; vanilla's pretraining alone took 122 s with --precision tf32.
set -uo pipefail
OUT=${1:?usage: experiments/gpu_check.sh OUT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PARTS=${PARTS-variants cuda_tests}
TABLE_FLAGS=${TABLE_FLAGS---precision tf32}
read -r -a RUN_FLAGS <<< "${RUN_FLAGS:-}"
CUDA_TESTS=(-v --durations=10 -o addopts= tests/test_cuda.py tests/test_capture.py -p no:cacheprovider)
DEADLINE=${DEADLINE:-570}
SUMMARY=$OUT/summary.md
LOGS=$(mktemp -d)
# pytest.ini's "-n auto" needs pytest-xdist: without it, one process
XDIST=(-o addopts=)
"$PY" -c 'import xdist' 2> /dev/null && XDIST+=(-n auto)

note() { echo "$*" >> "$SUMMARY"; }

keep() {  # keep FILE...: add them to OUT/logs.tar
  tar -rf "$OUT/logs.tar" -C "$LOGS" "$@" 2> /dev/null
}

timed() {  # [CUT_SIGNAL=INT] timed NAME SECONDS COMMAND...: run it into its log, within SECONDS and the deadline;
  # note how it ended
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  (( limit > DEADLINE - SECONDS - 5 )) && limit=$(( DEADLINE - SECONDS - 5 ))
  if (( limit < 10 )); then
    note "- \`$name\`: not run, the deadline is near"
    return 125
  fi
  timeout -s "${CUT_SIGNAL:-TERM}" -k 10 "$limit" "$@" > "$LOGS/$name.log" 2>&1
  rc=$?
  note "- \`$name\`: exit $rc$( ((rc == 124)) && echo " (cut at its ${limit} s)"), $((SECONDS - start)) s"
  keep "$name.log"
  return $rc
}

bar_lines() {  # bar_lines LOG: a log's lines, each progress-bar refresh a line of its own
  tr '\r' '\n' < "$1"
}

tail_lines() {  # tail_lines NAME N: the last N lines of a part's log, progress bars left out
  [[ -f $LOGS/$1.log ]] && bar_lines "$LOGS/$1.log" | grep -v -E '(it/s|s/it)\]' | tail -"$2" >> "$SUMMARY"
}

rows() {  # the benchmark's table rows of a part's log
  grep -E '^\| (vanilla|perceiver|synthesizer|rope) \|' "$LOGS/$1.log" >> "$SUMMARY" 2> /dev/null
}

table_head() {
  note; note "| variant | measure | straightforward | fast | ratio |"; note "| --- | --- | --- | --- | --- |"
}

: > "$SUMMARY"
rm -f "$OUT/logs.tar"
note "# GPU check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
note
note '```'
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c 'import os, torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "|", os.cpu_count(), "cores")'
} >> "$SUMMARY" 2>&1
note '```'

if command -v nvidia-smi > /dev/null; then  # the GPU's memory and utilisation every second, until the end
  nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu --format=csv -l 1 \
    > "$OUT/gpu_samples.csv" 2>&1 &
  SAMPLER=$!
  trap 'kill $SAMPLER 2> /dev/null' EXIT
else
  note "- no nvidia-smi: no GPU samples"
fi

table_run() {  # table_run NAME SECONDS [VARIANTS=...] RUN.SH-FLAGS...: run.sh in a work folder whose logs/ is OUT/NAME_logs
  local name=$1 limit=$2 work=$LOGS/$1_work
  shift 2
  mkdir -p "$work" "$OUT/${name}_logs"
  cp run.sh "$work"
  ln -sfn "$PWD/src" "$work/src"
  ln -sfn "$PWD/data" "$work/data"
  ln -sfn "$OUT/${name}_logs" "$work/logs"
  note; note "## \`$*\`${RUN_FLAGS[*]+ ${RUN_FLAGS[*]}}, one row after another, in $name"
  (cd "$work" && timed "$name" "$limit" env PYTHON="$PY" "$@" ${RUN_FLAGS[@]+"${RUN_FLAGS[@]}"})
  note '```'; tail_lines "$name" 12; note '```'
  note; note "The rows that finished, and each training's last progress line:"; note '```'
  for score in "$OUT/${name}_logs"/*.dev.score; do
    [[ -f $score ]] && note "$(basename "$score" .dev.score): $(cat "$score")"
  done
  bar_lines "$LOGS/$name.log" | grep -E '^== |epoch [0-9]+/' | grep -B1 -E '^== ' | grep -v '^--' | tail -30 \
    >> "$SUMMARY"
  note '```'
  cp "$work"/*.predictions "$OUT/${name}_logs/" 2> /dev/null
}

pace_rows() {  # pace_rows [PRECISION]: step_pace.py's rows (of that precision), the fastest projection first
  grep -E "^\| [a-z_]+ \| ${1:-[a-z0-9]+} \| [0-9]" "$LOGS/paces.log" 2> /dev/null | sort -t'|' -k8,8 -n
}

flags_of_row() {  # the run.py flags in a step_pace.py row's last cell
  sed -n 's/.*`\(.*\)`.*/\1/p'
}

handout_run() {  # handout_run NAME FLAGS...: vanilla's handout pretraining, finetuning, dev score and frames readout
  local name=$1 w=$LOGS/$1 rc
  shift
  mkdir -p "$w"
  note; note "## The handout's vanilla, whole processes: \`$*\`"
  set -- "$@" ${RUN_FLAGS[@]+"${RUN_FLAGS[@]}"}
  timed "${name}_pretrain" "${PRETRAIN_LIMIT:-240}" "$PY" src/run.py pretrain vanilla data/wiki.txt "$@" \
    --writing_params_path "$w/pre.params"
  rc=$?
  note '```'; note "$(bar_lines "$LOGS/${name}_pretrain.log" | grep -E 'epoch [0-9]+/' | tail -1)"
  grep -E 'pretrained|seconds|minutes' "$LOGS/${name}_pretrain.log" | tail -3 >> "$SUMMARY"; note '```'
  if (( rc != 0 )); then
    note "- finetuning, dev and the frames readout not run: the pretraining did not finish"
    return
  fi
  local data=(--finetune_corpus_path data/birth_places_train.tsv --eval_corpus_path data/birth_dev.tsv)
  timed "${name}_finetune" 90 "$PY" src/run.py finetune vanilla data/wiki.txt "$@" --reading_params_path \
    "$w/pre.params" --writing_params_path "$w/ft.params" --finetune_corpus_path data/birth_places_train.tsv
  timed "${name}_dev" 60 "$PY" src/run.py evaluate vanilla data/wiki.txt "$@" --reading_params_path "$w/ft.params" \
    "${data[@]}" --outputs_path "$w/dev.predictions"
  timed "${name}_frames" 150 "$PY" src/run.py evaluate vanilla data/wiki.txt "$@" --readout frames \
    --reading_params_path "$w/pre.params" "${data[@]}" --outputs_path "$w/frames.dev.predictions"
  note '```'
  for part in dev frames; do note "$part: $(grep -E '^Correct' "$LOGS/${name}_$part.log" 2> /dev/null | tail -1)"; done
  note '```'
}

if [[ " $PARTS " == *" variants "* ]]; then
  read -r -a table_flags <<< "$TABLE_FLAGS"
  if [[ " $PARTS " == *" cuda_tests "* ]]; then  # beside the table (they take little of the GPU); noted below
    timeout -s INT -k 10 300 "$PY" -m pytest "${CUDA_TESTS[@]}" > "$LOGS/cuda_tests.log" 2>&1 &
    TESTS=$!
  fi
  table_run variants 540 VARIANTS="perceiver synthesizer rope" ./run.sh ${table_flags[@]+"${table_flags[@]}"}
  if [[ -n ${TESTS-} ]]; then
    wait "$TESTS"
    note "- \`cuda_tests\` (beside the table): exit $?"
    keep cuda_tests.log
  fi
fi

if [[ " $PARTS " == *" precisions "* ]]; then
  for precision in fp32 bf16 fp16; do
    flags=(--precision "$precision")
    [[ $precision == fp16 ]] && flags+=(--captured_step cuda_graph)  # auto leaves fp16 uncaptured
    PRETRAIN_LIMIT=200 handout_run "handout_$precision" "${flags[@]}"
  done
fi

if [[ " $PARTS " == *" table "* ]]; then
  read -r -a table_flags <<< "$TABLE_FLAGS"
  table_run table 480 ./run.sh ${table_flags[@]+"${table_flags[@]}"}
fi

if [[ " $PARTS " == *" fused "* ]]; then
  read -r -a table_flags <<< "$TABLE_FLAGS"
  note; note "## vanilla's handout pretraining with the fused graph: \`--captured_step fused_graph $TABLE_FLAGS\`"
  timed fused 200 "$PY" src/run.py pretrain vanilla data/wiki.txt --captured_step fused_graph \
    ${table_flags[@]+"${table_flags[@]}"} ${RUN_FLAGS[@]+"${RUN_FLAGS[@]}"} --writing_params_path "$LOGS/fused.params"
  note '```'; note "$(bar_lines "$LOGS/fused.log" | grep -E 'epoch [0-9]+/' | tail -1)"; note '```'
fi

if [[ " $PARTS " == *" paces "* ]]; then
  note; note "## vanilla's handout pretraining under each way of running its step"
  timed paces 240 "$PY" experiments/step_pace.py --epochs 3
  note; grep -E '^(vanilla|\| )' "$LOGS/paces.log" >> "$SUMMARY" 2> /dev/null
fi

if [[ " $PARTS " == *" handout "* ]]; then
  read -r -a best <<< "${FLAGS-$(pace_rows | head -1 | flags_of_row)}"
  handout_run handout ${best[@]+"${best[@]}"}
fi

if [[ " $PARTS " == *" handout_fp32 "* ]] && [[ " ${best[*]-} " == *" --precision "* ]]; then
  read -r -a fp32 <<< "$(pace_rows fp32 | head -1 | flags_of_row)"
  handout_run handout_fp32 ${fp32[@]+"${fp32[@]}"}
fi

if [[ " $PARTS " == *" profile "* ]]; then
  for width in cut full; do
    note; note "## vanilla's handout pretraining, batches $width: steps in memory, torch.profiler's table"
    flags=(--captured_step off); [[ $width == full ]] && flags+=(--full_padding)
    timed "profile_$width" 45 "$PY" experiments/benchmark.py --variants vanilla --profile_steps 50 "${flags[@]}"
    note '```'; grep -E '^(drawing|[0-9]+ steps)' "$LOGS/profile_$width.log" >> "$SUMMARY" 2> /dev/null
    sed -n '/^---/,$p' "$LOGS/profile_$width.log" 2> /dev/null | head -24 >> "$SUMMARY"
    grep -E '^Self (CPU|CUDA) time total' "$LOGS/profile_$width.log" >> "$SUMMARY" 2> /dev/null; note '```'
  done
fi

common=(--sweep --epochs 4 --eval_questions 20)
if [[ " $PARTS " == *" pace "* ]]; then
  note; note "## The handout pretraining's pace in fp32 (straightforward loop, then the fast way)"
  timed pace_fp32 170 "$PY" experiments/benchmark.py --variants vanilla perceiver synthesizer rope "${common[@]}"
  table_head; rows pace_fp32
fi

if [[ " $PARTS " == *" switches "* ]]; then
  note; note "## Vanilla with each speed switch, beside the same straightforward loop"
  for switch in "--fixed_shapes" "--precision tf32" "--precision bf16" "--compile"; do
    name=pace_vanilla_${switch//[^a-z0-9]/_}
    read -r -a flags <<< "$switch"
    timed "$name" "$( [[ $switch == --compile ]] && echo 90 || echo 50 )" \
      "$PY" experiments/benchmark.py --variants vanilla "${common[@]}" "${flags[@]}"
    (( $? == 125 )) && continue  # not run
    note; note "the fast way with \`$switch\`:"
    table_head; rows "$name"
  done
fi

if [[ " $PARTS " == *" demo "* ]]; then
  note; note "## ./run.sh demo on CUDA"
  timed demo 110 env DEMO_DIR="$LOGS/demo" ./run.sh demo
  note '```'; tail_lines demo 10; note '```'
fi

if [[ " $PARTS " == *" cuda_tests "* ]]; then
  note; note "## The tests that need CUDA (tests/test_cuda.py, tests/test_capture.py)"
  [[ -n ${TESTS-} ]] || CUT_SIGNAL=INT timed cuda_tests 150 "$PY" -m pytest "${CUDA_TESTS[@]}"
  note '```'; grep -E '(PASSED|FAILED|ERROR|SKIPPED)' "$LOGS/cuda_tests.log" 2> /dev/null | head -40 >> "$SUMMARY"
  grep -E '^E ' "$LOGS/cuda_tests.log" 2> /dev/null | head -20 >> "$SUMMARY"
  note "$(tail -1 "$LOGS/cuda_tests.log" 2> /dev/null)"; note '```'
fi

if [[ " $PARTS " == *" suite "* ]]; then
  note; note "## The whole suite with CUDA visible"
  CUT_SIGNAL=INT timed suite 300 "$PY" -m pytest -v --durations=25 "${XDIST[@]}" tests -p no:cacheprovider
  note '```'; grep -E '(FAILED|ERROR) tests/' "$LOGS/suite.log" 2> /dev/null | head -20 >> "$SUMMARY"
  sed -n '/slowest 25 durations/,/^=/p' "$LOGS/suite.log" 2> /dev/null | head -26 >> "$SUMMARY"
  note "$(tail -1 "$LOGS/suite.log" 2> /dev/null)"; note '```'
fi

cat "$SUMMARY"
