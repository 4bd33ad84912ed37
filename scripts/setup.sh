#!/usr/bin/env bash
# Create .venv and install the project with the given extras (default: dev).
# Re-runs pip only when pyproject.toml changed since the last install.
# With the spark extra, also makes sure Java 17+ is there (scripts/check_java.sh); with the
# dev extra (the tests), headless Chromium and chromedriver (scripts/check_browser.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
py="${PYTHON:-python3}"
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "timely needs Python >= 3.10 (found: $("$py" --version 2>&1)); set PYTHON=/path/to/python3.10+" >&2
  exit 2
fi
case ",$extras," in
  *,spark,*) bash scripts/check_java.sh ;;
esac
case ",$extras," in
  *,dev,*) bash scripts/check_browser.sh ;;
esac
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)-${extras//,/_}"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[${extras}]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
