#!/usr/bin/env bash
# Ensures Debian's packaged Linux 6.12 kernel, its modules and a small initramfs
# are cached, and prints the cache entry's folder.
#
# Nothing is built: the kernel is the one a Debian 12 node runs when it takes
# the 6.12 kernel (linux-image-6.12.*+deb12-amd64, the newest such package apt
# offers: bookworm's own when it has one, else bookworm-backports'). Its .deb is
# fetched with `apt-get download` and unpacked, never installed: the host's
# /boot and its own kernel stay untouched.
#
# The entry, $NETKIT_QEMU_CACHE (default /var/cache/netkit-cni/qemu) /
# <package version>-<hash of this recipe and the initramfs init>/, holds
#   vmlinuz          the package's kernel image
#   config           the package's kernel configuration
#   release          the kernel release (uname -r)
#   modules/         all of the package's modules, with depmod's indexes: the
#                    guest binds it at /lib/modules/<release>, so the kernel
#                    loads modules on demand (iptables extensions, sch_fq,
#                    nf_conntrack, veth) as it does on a node
#   initramfs.cpio.gz  busybox, the modules that mounting the root needs (9p,
#                    overlay: the closure taken from modules.dep) and
#                    initramfs-init.sh as /init
# An existing entry for this recipe is used without asking apt; `kernel.sh
# --update` moves to the newest package.
#
# stdout: the entry's folder, nothing else.  stderr: progress.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
CACHE_ROOT=${NETKIT_QEMU_CACHE:-/var/cache/netkit-cni/qemu}
# Image packages are named after their kernel ABI, which moves with every
# upload; the flavour is the generic amd64 one (not -cloud, not -rt).
IMAGE_PACKAGE_PATTERN='^linux-image-6\.12\.[0-9]+\+deb12(\.[0-9]+)?-amd64$'
# What the initramfs must load before the root can be mounted; their
# dependencies come from modules.dep.
INITRAMFS_MODULES=(9p 9pnet_virtio overlay)

log() { printf 'kernel.sh: %s\n' "$*" >&2; }

# shellcheck source=scripts/apt.sh
source "$HERE/../../scripts/apt.sh"
# Another apt or dpkg run on the machine holds dpkg's lock for a while: wait
# for it instead of failing.
# shellcheck disable=SC2034 # read by apt.sh's apt_install
APT_INSTALL_OPTS="--no-install-recommends -o DPkg::Lock::Timeout=600"

# The host's side: qemu runs the guest; the guest runs the host's modprobe
# (kmod), which Debian 12 machines without a kernel of their own may lack; xz
# unpacks the modules the initramfs loads (priority standard, not required).
ensure_host_packages() {
  local missing=()
  command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
  [[ -x /usr/sbin/modprobe || -x /sbin/modprobe ]] || missing+=(kmod)
  command -v xz >/dev/null || missing+=(xz-utils)
  ((${#missing[@]} == 0)) || apt_install "${missing[@]}"
}

# "PACKAGE VERSION" of the image package to use: the highest candidate version
# among the 6.12 generic amd64 images apt knows (one apt-cache call for all:
# each takes seconds on a busy machine).
choose_image_package() {
  local codename names=()
  codename=$(debian_codename)
  ensure_sources deb "$codename-backports main"
  ensure_suite_fetched "$codename-backports"
  mapfile -t names < <(apt-cache pkgnames linux-image-6.12. | grep -E "$IMAGE_PACKAGE_PATTERN" || true)
  ((${#names[@]})) || step_failed "find the kernel package" \
    "apt knows no package matching $IMAGE_PACKAGE_PATTERN (bookworm or bookworm-backports)"
  local name="" version best="" best_version="" line
  while read -r line; do
    case $line in
      *:) name=${line%:} ;;
      Candidate:*)
        version=${line#Candidate: }
        [[ $version != "(none)" ]] || continue
        if [[ -z $best ]] || dpkg --compare-versions "$version" gt "$best_version"; then
          best=$name best_version=$version
        fi
        ;;
    esac
  done < <(apt-cache policy "${names[@]}")
  [[ -n $best ]] || step_failed "find the kernel package" "no candidate for ${names[*]}"
  printf '%s %s\n' "$best" "$best_version"
}

# download PACKAGE=VERSION DIR: the .deb into DIR, by apt (no install).
download() {
  # _apt cannot write into a root-only mktemp folder; apt then downloads as
  # root and warns, which is what this wants anyway.
  chmod 755 "$2"
  (cd "$2" && run_step "download $1" apt-get download -q "$1")
}

# Everything that shapes the entry. Its text (bash prints function bodies
# without comments) is part of the cache key, with the initramfs init.
build_entry() {
  local image_deb=$1 busybox_deb=$2 stage=$3 work=$4
  dpkg-deb -x "$image_deb" "$work/image"
  dpkg-deb -x "$busybox_deb" "$work/busybox"

  local release
  release=$(basename "$(find "$work/image/lib/modules" -mindepth 1 -maxdepth 1 -type d)")
  cp "$work/image/boot/vmlinuz-$release" "$stage/vmlinuz"
  cp "$work/image/boot/config-$release" "$stage/config"
  printf '%s\n' "$release" >"$stage/release"

  # depmod -b wants BASE/lib/modules/RELEASE.
  depmod -b "$work/image" "$release"
  local modules=$work/image/lib/modules/$release

  local initramfs=$work/initramfs
  mkdir -p "$initramfs"/{bin,dev,proc,sys,lower,overlay,newroot,modules}
  cp "$work/busybox/bin/busybox" "$initramfs/bin/busybox"
  ln -s busybox "$initramfs/bin/sh"
  cp "$HERE/initramfs-init.sh" "$initramfs/init"
  chmod 755 "$initramfs/init"
  # modprobe --show-depends lists a module's dependencies first, then itself:
  # the order busybox's insmod needs. Unpacked here, as busybox cannot.
  local module path
  for module in "${INITRAMFS_MODULES[@]}"; do
    modprobe --dirname "$work/image" --set-version "$release" --show-depends "$module" |
      awk '$1 == "insmod" { print $2 }'
  done | awk '!seen[$0]++' | while read -r path; do
    module=$(basename "$path" .xz)
    xz -dc "$path" >"$initramfs/modules/$module"
    printf '%s\n' "$module" >>"$initramfs/modules/load-order"
  done
  mv "$modules" "$stage/modules"
  # busybox (from the package above) writes the archive: no cpio on the host needed.
  (cd "$initramfs" && find . | sort | "$work/busybox/bin/busybox" cpio -o -H newc) 2>/dev/null |
    gzip -1 >"$stage/initramfs.cpio.gz"
}

cache_key() {
  {
    printf '%s\n' "${INITRAMFS_MODULES[@]}"
    declare -f build_entry
    cat "$HERE/initramfs-init.sh"
  } | sha256sum | cut -c1-16
}

# The newest cached entry for this recipe, if any.
cached_entry() {
  local entries=()
  mapfile -t entries < <(find "$CACHE_ROOT" -mindepth 2 -maxdepth 2 -name initramfs.cpio.gz \
    -path "*-$1/*" -printf '%T@ %h\n' 2>/dev/null | sort -rn | cut -d' ' -f2-)
  ((${#entries[@]} == 0)) || printf '%s\n' "${entries[0]}"
}

main() {
  ensure_host_packages
  local key image version dir
  key=$(cache_key)
  # Once an entry exists it is used as it is, without asking apt (seconds per
  # call): runs stay on one kernel until --update, or a new recipe, picks the
  # newest package again.
  if [[ ${1:-} != --update ]]; then
    dir=$(cached_entry "$key")
    if [[ -n $dir ]]; then
      printf '%s\n' "$dir"
      return
    fi
  fi
  local choice
  choice=$(choose_image_package) || exit 1
  read -r image version <<<"$choice"
  # Debian versions may contain '~' and '+', harmless in a path but not ':'.
  dir=$CACHE_ROOT/${version//:/_}-$key
  if [[ -s $dir/initramfs.cpio.gz ]]; then
    printf '%s\n' "$dir"
    return
  fi

  mkdir -p "$CACHE_ROOT"
  # Concurrent callers wait for one unpacking instead of racing.
  exec 9>"$CACHE_ROOT/.lock"
  if ! flock -n 9; then
    log "waiting for another kernel.sh to finish"
    flock 9
  fi
  if [[ ! -s $dir/initramfs.cpio.gz ]]; then
    # Globals: the EXIT trap runs after main has returned.
    work=$(mktemp -d /var/tmp/netkit-qemu-kernel.XXXXXX)
    stage=$(mktemp -d "$CACHE_ROOT/.stage.XXXXXX")
    trap 'rm -rf "$work" "$stage"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM HUP
    log "fetching $image $version"
    if ! (cd "$work" && chmod 755 . && apt-get download -q "$image=$version" >/dev/null 2>&1); then
      # Lists older than the mirror name an upload it no longer has (each security
      # upload renames the image package): refresh them once and choose again.
      apt_update "refresh the lists for $image"
      choice=$(choose_image_package) || exit 1
      read -r image version <<<"$choice"
      dir=$CACHE_ROOT/${version//:/_}-$key
      if [[ -s $dir/initramfs.cpio.gz ]]; then
        printf '%s\n' "$dir"
        return
      fi
      log "fetching $image $version"
      download "$image=$version" "$work"
    fi
    download busybox-static "$work"
    # errtrace: the trap also fires inside build_entry, where set -e stops at a failure.
    set -E
    trap 'step_failed "unpack $image" "\`$BASH_COMMAND\` exited with status $? (its output is above)"' ERR
    build_entry "$work"/linux-image-*.deb "$work"/busybox-static_*.deb "$stage" "$work"
    trap - ERR
    set +E
    run_step "store the kernel in $dir" chmod 755 "$stage"
    # rename(2) within one filesystem: readers see no folder or a complete one.
    run_step "store the kernel in $dir" mv -T "$stage" "$dir"
    log "kernel cached at $dir"
  fi
  printf '%s\n' "$dir"
}

main "$@"
