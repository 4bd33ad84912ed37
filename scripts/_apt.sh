# Sourced by scripts/check_java.sh and scripts/check_browser.sh: install Debian packages
# for a check that found something missing, or say exactly what to do when we cannot.
#
#   apt_install WHAT FIX PACKAGE...
#
# WHAT says what is missing ("Spark needs Java 17 or newer (found: none)"), FIX how to
# get it by hand. Through sudo -n when not root; apt-get update first when the package
# lists do not know the packages, or again when an install from old lists fails. Exits 2
# (after WHAT, why, and FIX on stderr) when there is no apt-get, no root and no
# passwordless sudo, or apt-get fails.

apt_install() {
  local what="$1" fix="$2"
  shift 2
  local packages=("$@")
  local as_root=()
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$what and there is no apt-get here to install ${packages[*]};" >&2
    echo "$fix" >&2
    exit 2
  fi
  if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
      as_root=(sudo -n)
    else
      echo "$what; installing ${packages[*]} needs root, and sudo is not available" >&2
      echo "without a password here;" >&2
      echo "$fix" >&2
      exit 2
    fi
  fi
  _apt() {
    ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get "$@" >&2
  }
  _apt_failed() {
    echo "apt-get could not install ${packages[*]};" >&2
    echo "$fix" >&2
    exit 2
  }
  echo "$what: installing Debian's ${packages[*]}" >&2
  local updated=no
  if ! apt-cache show "${packages[@]}" >/dev/null 2>&1; then
    _apt update -qq || _apt_failed # the package lists are empty or do not have them yet
    updated=yes
  fi
  if ! _apt install -y -qq --no-install-recommends "${packages[@]}"; then
    [ "$updated" = no ] || _apt_failed
    _apt update -qq || _apt_failed # old lists can name versions the mirror no longer has
    _apt install -y -qq --no-install-recommends "${packages[@]}" || _apt_failed
  fi
}
