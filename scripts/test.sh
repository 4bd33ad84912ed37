#!/usr/bin/env bash
# The test command: set up, lint (ruff), type-check (mypy), check the import contracts
# (import-linter: the layers in pyproject.toml's [tool.importlinter]), then the test suite.
# HYPOTHESIS_PROFILE=ci selects the deeper property-test profile (.ci/run sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,spark  # the Spark connector's tests run a real local Spark
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-logo
# Two test processes, one per core (a third, measured, slowed the Ray tests more than it
# gained: each process runs its own local Ray). PYTEST_PROCESSES=1: all in this process.
# worksteal: a process that runs out of tests takes some of the other's (the slowest
# tests are seconds long: plain load left one process working alone at the end).
.venv/bin/python -m pytest -n "${PYTEST_PROCESSES:-2}" --dist worksteal "$@"
