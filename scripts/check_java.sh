#!/usr/bin/env bash
# Spark needs Java 17 or newer. Check `java -version` (JAVA_HOME's java if set, else the
# one on PATH); when it is missing or too old, install Debian's openjdk-17-jre-headless
# with apt-get (scripts/_apt.sh: through sudo when not root), or say exactly what to do
# when we cannot.
set -euo pipefail

java_bin() {
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
    echo "$JAVA_HOME/bin/java"
  elif command -v java >/dev/null 2>&1; then
    command -v java
  fi
}

# The major version of a java binary: "17.0.15" -> 17, "1.8.0_292" -> 8; 0 if none.
java_major() {
  local bin version
  bin="$(java_bin)"
  [ -n "$bin" ] || { echo 0; return; }
  version="$("$bin" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n 1)"
  case "$version" in
    1.*) version="${version#1.}" ;;
  esac
  version="${version%%[!0-9]*}"
  echo "${version:-0}"
}

major="$(java_major)"
if [ "$major" -ge 17 ]; then
  exit 0
fi

found="none"
[ "$major" -gt 0 ] && found="Java $major at $(java_bin)"
fix="install Java 17+ (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless), or set
JAVA_HOME to a Java 17+ installation, then run this again"

what="Spark needs Java 17 or newer (found: $found)"
case "${BASH_SOURCE[0]}" in */*) here="${BASH_SOURCE[0]%/*}" ;; *) here=. ;; esac
# shellcheck source=scripts/_apt.sh
source "$here/_apt.sh"
apt_install "$what" "$fix" openjdk-17-jre-headless

major="$(java_major)"
if [ "$major" -lt 17 ]; then
  echo "openjdk-17-jre-headless is installed, but \`java\` is still Java $major;" >&2
  echo "set JAVA_HOME=/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture 2>/dev/null || echo amd64)" >&2
  echo "or choose it with: sudo update-alternatives --config java" >&2
  exit 2
fi
echo "Java $major is ready" >&2
