# shellcheck shell=bash
# Sourced by scripts/deps.sh and test/e2e/setup.sh: installing Debian packages only when
# missing, with one `apt-get update` at most per run.

APT_UPDATED=no
apt_update() { if [ "$APT_UPDATED" != yes ]; then apt-get update -qq; APT_UPDATED=yes; fi; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# apt_install [-t suite] pkg...   With -t, a package must be at that suite's version
# (e.g. iproute2 from backports, which knows netkit), not merely present.
apt_install() {
  local target=()
  if [ "$1" = -t ]; then target=(-t "$2"); shift 2; fi
  local missing=() p inst cand
  for p in "$@"; do
    if [ ${#target[@]} -gt 0 ]; then
      inst=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)
      cand=$(apt-cache policy "${target[@]}" "$p" 2>/dev/null | awk '/Candidate:/{print $2}')
      if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then apt_update; cand=$(apt-cache policy "${target[@]}" "$p" | awk '/Candidate:/{print $2}'); fi
      [ -n "$cand" ] && [ "$cand" = "$inst" ] || missing+=("$p")
    else
      installed "$p" || missing+=("$p")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  apt_update
  echo "$(basename "$0"): installing ${missing[*]}" >&2
  # shellcheck disable=SC2086 # APT_INSTALL_OPTS is a word list on purpose
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${APT_INSTALL_OPTS:-} "${target[@]}" "${missing[@]}" >/dev/null
}
