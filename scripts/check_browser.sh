#!/usr/bin/env bash
# The browser tests (tests/test_browser.py, the live page's) drive headless Chromium through
# Selenium, with Debian's chromium and chromium-driver: /usr/bin/chromium and
# /usr/bin/chromedriver (CHROMIUM and CHROMEDRIVER name others). When either is missing,
# install both with apt-get (through sudo when not root; apt-get update first when the
# package lists do not know them, or again when an install from old lists fails), or say
# exactly what to do when we cannot (scripts/_apt.sh, shared with scripts/check_java.sh).
set -euo pipefail

chromium="${CHROMIUM:-/usr/bin/chromium}"
driver="${CHROMEDRIVER:-/usr/bin/chromedriver}"
packages=(chromium chromium-driver)

ready() { [ -x "$chromium" ] && [ -x "$driver" ]; }

if ready; then
  exit 0
fi

missing=()
[ -x "$chromium" ] || missing+=("$chromium")
[ -x "$driver" ] || missing+=("$driver")
what="the browser tests need headless Chromium and its driver (missing: ${missing[*]})"
fix="install them (Debian: sudo apt-get install chromium chromium-driver), or set CHROMIUM and
CHROMEDRIVER to a Chromium binary and the chromedriver of the same version, then run this again"

case "${BASH_SOURCE[0]}" in */*) here="${BASH_SOURCE[0]%/*}" ;; *) here=. ;; esac
# shellcheck source=scripts/_apt.sh
source "$here/_apt.sh"
apt_install "$what" "$fix" "${packages[@]}"

if ! ready; then
  echo "${packages[*]} are installed, but $chromium or $driver is still missing;" >&2
  echo "set CHROMIUM and CHROMEDRIVER to where they are (dpkg -L chromium chromium-driver)" >&2
  exit 2
fi
echo "Chromium is ready: $("$chromium" --version 2>/dev/null || echo "$chromium")" >&2
