# shellcheck shell=bash
# Sourced by every install step (scripts/deps.sh, test/e2e/setup.sh, test/vm/kernel.sh):
# Debian packages installed only when missing, at most one `apt-get update` per run, and
# every failure names the step that failed and shows apt's own words.
#
# Works from nothing: a machine whose lists have never seen the suites we add (apt-cache
# refuses `-t bookworm-backports` until an update has fetched it), and a machine behind its
# own Debian mirror or proxy (the suites we add use the mirror its apt already uses).
# APT_CONFIG is honoured throughout, which is how the regression test runs all of this
# against an empty apt state.

APT_UPDATED=no
APT_ME=$(basename "$0")
# Installs never stop to ask.
export DEBIAN_FRONTEND=noninteractive

# step_failed STEP WHY...   The one way an install step reports failure.
step_failed() {
  local step=$1
  shift
  printf '%s: step "%s" failed: %s\n' "$APT_ME" "$step" "$*" >&2
  exit 1
}

# run_step STEP CMD...   Runs CMD quietly; on failure prints the step and CMD's last output.
# A successful CMD's last output stays in STEP_OUTPUT (warnings a later step may need).
STEP_OUTPUT=""
run_step() {
  local step=$1 out
  shift
  if ! out=$("$@" 2>&1); then
    step_failed "$step" "$(printf '%s\n' "$out" | tail -n 15)"
  fi
  STEP_OUTPUT=$(printf '%s\n' "$out" | tail -n 15)
}

# apt_get STEP ARGS...   apt-get ARGS as run_step runs a command, but waiting while another
# apt or dpkg holds the locks it needs (unattended upgrades on a freshly booted machine,
# another install step running beside this one): apt-get itself gives up at once on a
# held lists lock. Waits up to APT_LOCK_WAIT seconds (default 900), saying so once.
APT_LOCK_WAIT=${APT_LOCK_WAIT:-900}
apt_get() {
  local step=$1 out waited=0
  shift
  while ! out=$(apt-get -o DPkg::Lock::Timeout=30 "$@" 2>&1); do
    if ! printf '%s\n' "$out" | grep -qE '(Could not get|Unable to acquire|Unable to lock).*lock'; then
      step_failed "$step" "$(printf '%s\n' "$out" | tail -n 15)"
    fi
    if [ "$waited" -ge "$APT_LOCK_WAIT" ]; then
      step_failed "$step" "gave up after ${waited}s waiting for apt's lock: $(printf '%s\n' "$out" | grep -m1 -i lock)"
    fi
    [ "$waited" -gt 0 ] ||
      printf '%s: %s: waiting for apt'"'"'s lock (%s)\n' "$APT_ME" "$step" "$(printf '%s\n' "$out" | grep -m1 -i lock)" >&2
    sleep 5
    waited=$((waited + 5))
  done
  STEP_OUTPUT=$(printf '%s\n' "$out" | tail -n 15)
}

# apt_update [STEP]   STEP names what the update is for (default "apt-get update").
# Unreachable repositories are only warnings to apt (exit 0): they are kept in
# APT_UPDATE_WARNINGS for the step that then finds its suite missing. Bad signatures and
# the like fail the update.
APT_UPDATE_WARNINGS=""
apt_update() {
  [ "$APT_UPDATED" = yes ] && return 0
  apt_get "${1:-apt-get update}" update -qq
  APT_UPDATE_WARNINGS=$STEP_OUTPUT
  APT_UPDATED=yes
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

debian_codename() {
  # shellcheck disable=SC1091 # the machine's own file
  (. /etc/os-release && printf '%s\n' "${VERSION_CODENAME:?/etc/os-release has no VERSION_CODENAME}")
}

# The mirror this machine's apt uses for the Debian release, in either sources format.
debian_mirror() {
  local codename uri
  codename=$(debian_codename)
  # shellcheck disable=SC2016 # $(FIELD) is apt's format syntax, not the shell's
  uri=$(apt-get indextargets --no-release-info --format '$(TARGET_OF) $(RELEASE) $(REPO_URI)' 2>/dev/null |
    awk -v rel="$codename" '$1 == "deb" && $2 == rel { print $3; exit }')
  [ -n "$uri" ] || step_failed "find the Debian mirror" \
    "no 'deb' source for $codename in this machine's apt sources (apt-get indextargets lists none)"
  printf '%s\n' "${uri%/}"
}

# Is TYPE (deb, deb-src) SUITE COMPONENT among the configured sources, downloaded or not?
source_configured() {
  # shellcheck disable=SC2016 # $(FIELD) is apt's format syntax, not the shell's
  apt-get indextargets --no-release-info --format '$(TARGET_OF) $(RELEASE) $(COMPONENT)' 2>/dev/null |
    grep -qx "$1 $2 $3"
}

# ensure_sources TYPE "SUITE COMPONENT..." ...   Appends to our own deb822 file what the
# machine's sources lack, served by the machine's own mirror.
ensure_sources() {
  local type=$1 want suite comps comp missing stanzas="" added=() mirror="" parts file
  shift
  for want in "$@"; do
    read -r suite comps <<<"$want"
    missing=()
    for comp in $comps; do source_configured "$type" "$suite" "$comp" || missing+=("$comp"); done
    [ ${#missing[@]} -eq 0 ] && continue
    [ -n "$mirror" ] || mirror=$(debian_mirror) || exit 1
    stanzas+=$(printf 'Types: %s\nURIs: %s\nSuites: %s\nComponents: %s\n' "$type" "$mirror" "$suite" "${missing[*]}")
    stanzas+=$'\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n'
    added+=("$type $suite ${missing[*]}")
  done
  [ ${#added[@]} -eq 0 ] && return 0
  eval "$(apt-config shell parts Dir::Etc::sourceparts/d)"
  file=${parts:-/etc/apt/sources.list.d/}netkit-cni.sources
  printf '%s' "$stanzas" >>"$file" || step_failed "add apt sources" "cannot write $file"
  printf '%s: added to %s: %s\n' "$APT_ME" "$file" "$(IFS=';'; echo "${added[*]}")" >&2
  APT_UPDATED=no
}

# Has apt fetched SUITE's release file? apt-cache refuses `-t SUITE` until it has.
suite_fetched() { apt-cache policy 2>/dev/null | grep -q "n=$1,"; }

# The update is named after the suite it is for: a suite the mirror lacks fails the
# update itself, an unreachable mirror only leaves the suite missing afterwards.
ensure_suite_fetched() {
  suite_fetched "$1" && return 0
  apt_update "fetch suite $1"
  suite_fetched "$1" || step_failed "fetch suite $1" \
    "${APT_UPDATE_WARNINGS:-apt has no release file for it after an update: is it in the sources?}"
}

# candidate [-t SUITE] PKG   The version apt would install, or nothing. No side effects.
# apt-cache failing is a failed step with its own words, never a silent exit under set -e.
candidate() {
  local out
  out=$(apt-cache policy "$@" 2>&1) || step_failed "apt-cache policy $*" "$(printf '%s\n' "$out" | tail -n 15)"
  printf '%s\n' "$out" | awk '/Candidate:/ { print $2 }'
}

# apt_install [-t SUITE] PKG...   With -t a package must be at that suite's version (e.g.
# iproute2 from backports, which knows netkit), not merely present.
apt_install() {
  local target=() p cand missing=()
  if [ "$1" = -t ]; then
    target=(-t "$2")
    shift 2
    ensure_suite_fetched "${target[1]}"
  fi
  for p in "$@"; do
    if [ ${#target[@]} -gt 0 ]; then
      cand=$(candidate "${target[@]}" "$p")
      if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
        apt_update
        cand=$(candidate "${target[@]}" "$p")
      fi
      if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
        step_failed "install $p" "no candidate in ${target[1]}"
      fi
      [ "$cand" = "$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null)" ] || missing+=("$p")
    else
      installed "$p" || missing+=("$p")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  apt_update
  echo "$APT_ME: installing ${missing[*]}" >&2
  # shellcheck disable=SC2086 # APT_INSTALL_OPTS is a word list on purpose
  apt_get "apt-get install ${missing[*]}" install -y -qq ${APT_INSTALL_OPTS:-} "${target[@]}" "${missing[@]}"
}
