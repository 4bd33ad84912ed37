#!/usr/bin/env bash
# The test command: set up, lint (ruff), type-check (mypy), then the test suite.
# HYPOTHESIS_PROFILE=ci selects the deeper property-test profile (.ci/run sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,spark  # the Spark connector's tests run a real local Spark
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# Three test processes on two cores: many tests wait on Ray, Spark or subprocesses, so a
# third process keeps the CPUs busy (PYTEST_PROCESSES=1 runs them in this process).
.venv/bin/python -m pytest -n "${PYTEST_PROCESSES:-3}" "$@"
