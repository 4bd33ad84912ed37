#!/usr/bin/env bash
# The browser tests (tests/test_browser.py, the live page's) drive headless Chromium through
# Selenium, with Debian's chromium and chromium-driver: /usr/bin/chromium and
# /usr/bin/chromedriver (CHROMIUM and CHROMEDRIVER name others). When either is missing,
# install both with apt-get (through sudo when not root; apt-get update first when the
# package lists do not know them, or again when an install from old lists fails), or say
# exactly what to do when we cannot. Modelled on scripts/check_java.sh.
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

if ! command -v apt-get >/dev/null 2>&1; then
  echo "$what and there is no apt-get here to install them;" >&2
  echo "$fix" >&2
  exit 2
fi

if [ "$(id -u)" = "0" ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
  as_root=(sudo -n)
else
  echo "$what; installing them needs root, and sudo is not available without a password here;" >&2
  echo "$fix" >&2
  exit 2
fi

apt() {
  ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get "$@" >&2
}

install() {
  apt install -y -qq --no-install-recommends "${packages[@]}"
}

failed() {
  echo "apt-get could not install ${packages[*]};" >&2
  echo "$fix" >&2
  exit 2
}

echo "$what: installing Debian's ${packages[*]}" >&2
updated=no
if ! apt-cache show "${packages[@]}" >/dev/null 2>&1; then
  apt update -qq || failed # the package lists are empty or do not have them yet
  updated=yes
fi
if ! install; then
  [ "$updated" = no ] || failed
  apt update -qq || failed # old lists can name versions the mirror no longer has
  install || failed
fi

if ! ready; then
  echo "${packages[*]} are installed, but $chromium or $driver is still missing;" >&2
  echo "set CHROMIUM and CHROMEDRIVER to where they are (dpkg -L chromium chromium-driver)" >&2
  exit 2
fi
echo "Chromium is ready: $("$chromium" --version 2>/dev/null || echo "$chromium")" >&2
