#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run of at most about 8 minutes (the parts' limits
# add up to 485 s), with the assignment's four files in data/:
#
#   experiments/gpu_check.sh OUT                 the suite, the pace of the handout pretraining, the demo
#   PARTS="table" experiments/gpu_check.sh OUT   the handout table: run.sh --jobs 5 for TABLE_EPOCHS epochs
#
# Every part has a time limit and its own log in OUT; OUT/summary.md gathers what each printed
# that matters, and is printed last. PARTS (default "suite pace demo") picks the parts.
set -uo pipefail
OUT=${1:?usage: experiments/gpu_check.sh OUT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PARTS=${PARTS-suite pace demo}
TABLE_EPOCHS=${TABLE_EPOCHS:-20}
SUMMARY=$OUT/summary.md
# pytest.ini's "-n auto" needs pytest-xdist: without it, one process
XDIST=(-o addopts=)
"$PY" -c 'import xdist' 2> /dev/null && XDIST+=(-n auto)

note() { echo "$*" >> "$SUMMARY"; }

timed() {  # timed NAME SECONDS COMMAND...: run it with a time limit into OUT/NAME.log, note its exit status and time
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  note "- \`$name\`: exit $rc$( ((rc == 124)) && echo " (its ${limit} s ran out)"), $((SECONDS - start)) s"
  return $rc
}

tail_lines() {  # tail_lines NAME N: the last N lines of a log, progress bars left out
  tr '\r' '\n' < "$OUT/$1.log" | grep -v 'it/s]' | tail -"$2" >> "$SUMMARY"
}

rows() {  # the benchmark's table rows of a log
  grep -E '^\| (vanilla|perceiver|synthesizer|rope) \|' "$OUT/$1.log" >> "$SUMMARY"
}

: > "$SUMMARY"
note "# GPU check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
note
note '```'
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c 'import os, torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "|", os.cpu_count(), "cores")'
} >> "$SUMMARY" 2>&1
note '```'

if [[ " $PARTS " == *" suite "* ]]; then
  note; note "## The suite with CUDA visible"
  timed cuda_tests 90 "$PY" -m pytest -q -o addopts= tests/test_cuda.py
  note "  $(tail -1 "$OUT/cuda_tests.log")"
  timed quick_suite 60 "$PY" -m pytest -q "${XDIST[@]}" tests -m "not slow" --ignore tests/test_cuda.py
  note "  $(tail -1 "$OUT/quick_suite.log")"
fi

if [[ " $PARTS " == *" pace "* ]]; then
  note; note "## The handout pretraining's pace (straightforward loop, then the fast way)"
  note; note "| variant | measure | straightforward | fast | ratio |"; note "| --- | --- | --- | --- | --- |"
  common=(--sweep --epochs 2 --eval_questions 100)
  timed pace_fp32 80 "$PY" experiments/benchmark.py --variants vanilla perceiver synthesizer rope "${common[@]}"
  rows pace_fp32
  for switch in "--precision tf32" "--precision bf16" "--compile"; do
    name=pace_vanilla_${switch//[^a-z0-9]/_}
    read -r -a flags <<< "$switch"
    timed "$name" "$( [[ $switch == --compile ]] && echo 70 || echo 35 )" \
      "$PY" experiments/benchmark.py --variants vanilla "${common[@]}" "${flags[@]}"
    note; note "the fast way with \`$switch\`:"; note
    note "| variant | measure | straightforward | fast | ratio |"; note "| --- | --- | --- | --- | --- |"
    rows "$name"
  done
  timed profile_vanilla 25 "$PY" experiments/benchmark.py --variants vanilla --profile_steps 50
  note '```'; sed -n '/^---/,$p' "$OUT/profile_vanilla.log" | head -20 >> "$SUMMARY"; note '```'
fi

if [[ " $PARTS " == *" demo "* ]]; then
  note; note "## ./run.sh demo on CUDA"
  timed demo 90 env DEMO_DIR="$OUT/demo" ./run.sh demo
  note '```'; tail_lines demo 10; note '```'
fi

if [[ " $PARTS " == *" table "* ]]; then
  note; note "## The handout table, $TABLE_EPOCHS pretraining epochs (650 in full)"
  timed table 420 ./run.sh --jobs 5 --pretrain_epochs "$TABLE_EPOCHS"
  note '```'; tail_lines table 12; note '```'
  cp -r logs "$OUT/table_logs" 2>/dev/null
fi

cat "$SUMMARY"
