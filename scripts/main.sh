#!/usr/bin/env bash
# The main job: set up, then run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,spark  # the Spark connector; checks for Java 17+
.venv/bin/python examples/pipeline.py "$@"
