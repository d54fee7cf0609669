#!/usr/bin/env bash
# Builds assignment5.zip from src/ and the params and predictions that run.sh writes.
#   ./collect_submission.sh [all|2021|2023|2024]
#   2021: the edition with the synthesizer; 2023: the edition with the perceiver;
#   2024: the edition with rope; all (default): the three. The zip holds the course's modules
#   (COURSE_SOURCES) and the edition's params and predictions. Fails, naming every missing file, before writing anything; a
#   failing call also removes an earlier assignment5.zip, so that no zip is left that
#   this call did not build.
set -euo pipefail
cd "$(dirname "$0")"
rm -f assignment5.zip assignment5.zip.tmp
if (( $# > 1 )); then
  echo "collect_submission.sh: takes at most one argument (all, 2021, 2023 or 2024), got $#: $*" >&2
  exit 2
fi
edition=${1:-all}

# The course's files: each variant's pretrained and finetuned params and the finetuned params'
# predictions (run.sh's table writes the zero-shot readout's as <variant>.frames.*, which stay out).
variant_files() { echo "$1.pretrain.params $1.finetune.params $1.pretrain.dev.predictions $1.pretrain.test.predictions"; }
common=(vanilla.model.params vanilla.nopretrain.dev.predictions vanilla.nopretrain.test.predictions $(variant_files vanilla))

case $edition in
  2021) files=("${common[@]}" $(variant_files synthesizer)) ;;
  2023) files=("${common[@]}" $(variant_files perceiver)) ;;
  2024) files=("${common[@]}" $(variant_files rope)) ;;
  all) files=("${common[@]}" $(variant_files perceiver) $(variant_files synthesizer) $(variant_files rope)) ;;
  *) echo "collect_submission.sh: unknown edition '$edition' (use all, 2021, 2023 or 2024)" >&2; exit 2 ;;
esac

# The course's modules and what they import: every module of src/ but the demo world's generator
# (the research scripts are in experiments/ and stay out).
COURSE_SOURCES=()
for f in src/*.py; do
  [[ $f == src/world.py ]] || COURSE_SOURCES+=("$f")
done
files=("${COURSE_SOURCES[@]}" "${files[@]}")

missing=()
for f in "${files[@]}"; do
  [[ -f $f ]] || missing+=("$f")
done
if (( ${#missing[@]} )); then
  echo "collect_submission.sh: missing ${missing[*]} (run ./run.sh first)" >&2
  exit 1
fi

${PYTHON:-python3} - "${files[@]}" <<'PY'
import sys, zipfile
from pathlib import Path

with zipfile.ZipFile("assignment5.zip.tmp", "w", zipfile.ZIP_DEFLATED) as z:
    for path in sys.argv[1:]:
        z.write(path)
Path("assignment5.zip.tmp").replace("assignment5.zip")
PY
echo "wrote assignment5.zip (${#COURSE_SOURCES[@]} course modules and $(( ${#files[@]} - ${#COURSE_SOURCES[@]} )) params and predictions files)"
