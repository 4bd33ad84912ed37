#!/usr/bin/env bash
# The test command: set up, lint (ruff), type-check (mypy), check the import contracts
# (import-linter: the layers in pyproject.toml's [tool.importlinter]), build the
# documentation site (mkdocs, strict: a broken link or API reference fails it), then the
# test suite.
# HYPOTHESIS_PROFILE=ci selects the deeper property-test profile (.ci/run sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,spark  # the Spark connector's tests run a real local Spark
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-logo
# The site goes to a temporary directory (never site/ in the repository). Not -q: with it
# mkdocs drops the warnings before --strict counts them, and a broken link passes. Its log
# is shown only when the build fails.
docs_site="$(mktemp -d)"
if ! NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -d "$docs_site/site" >"$docs_site/log" 2>&1; then
  grep -v '^INFO' "$docs_site/log" >&2
  rm -rf "$docs_site"
  echo "mkdocs build --strict failed (the warnings above)" >&2
  exit 1
fi
rm -rf "$docs_site"
# Two test processes, one per core (a third, measured, slowed the Ray tests more than it
# gained: each process runs its own local Ray). PYTEST_PROCESSES=1: all in this process.
# worksteal: a process that runs out of tests takes some of the other's (the slowest
# tests are seconds long: plain load left one process working alone at the end).
.venv/bin/python -m pytest -n "${PYTEST_PROCESSES:-2}" --dist worksteal "$@"
