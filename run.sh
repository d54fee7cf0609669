#!/usr/bin/env bash
# The whole assignment, from the repository root (src/factgpt/table/assignment.py says what it
# runs):
#   ./run.sh                      every row, its table in results.md and results.json
#   ./run.sh --jobs N             N rows side by side, each with its share of the threads
#   VARIANTS="vanilla rope" ./run.sh   only these pretrained variants (default: all four)
#   ./run.sh --pretrain_epochs 1 ...   any run.py flags, passed to every training and evaluation
#   ./run.sh demo                 the experiment on a generated world, no data and no GPU needed
# PYTHON picks the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m factgpt.table.assignment "$@"
