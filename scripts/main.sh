#!/usr/bin/env bash
# The main job: set up, then run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
.venv/bin/python examples/wordcount.py "$@"
