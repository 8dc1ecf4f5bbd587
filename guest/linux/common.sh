# Shared helpers for the guest image scripts (sourced, not run).
#
# Every artefact lives under $KUBICLE_CACHE (default ~/.cache/kubicle) in a
# directory named by a hash of everything that went into it, so a changed
# input gives a new directory and an unchanged one is reused. Builds take a
# lock per artefact kind so parallel test setups do not race.

KUBICLE_CACHE=${KUBICLE_CACHE:-$HOME/.cache/kubicle}
GUEST_LINUX_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { echo "$(basename "$0"): $*" >&2; }
die() { log "error: $*"; exit 1; }

# Installs the Debian packages given, only those missing (apt-get as root).
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Installed version of a Debian package.
package_version() { dpkg-query -W -f='${Version}' "$1"; }

# Short content hash of the files and strings given (files by content).
content_key() {
  local item
  for item in "$@"; do
    if [ -f "$item" ]; then sha256sum <"$item"; else printf '%s\n' "$item"; fi
  done | sha256sum | cut -c1-16
}

# Seconds since $1 (a `date +%s` value) as "1m23s".
elapsed() {
  local s=$(($(date +%s) - $1))
  printf '%dm%02ds' $((s / 60)) $((s % 60))
}
