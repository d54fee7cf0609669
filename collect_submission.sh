#!/usr/bin/env bash
# Builds assignment5.zip from src/ and the params and predictions that run.sh writes:
#   ./collect_submission.sh [all|2021|2023|2024]
# (src/factgpt/table/submission.py says what each edition holds).
set -euo pipefail
cd "$(dirname "$0")"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m factgpt.table.submission "$@"
