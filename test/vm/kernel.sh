#!/usr/bin/env bash
# Ensures a User-Mode Linux kernel with netkit exists and prints its path.
#
# The host kernel may lack netkit, so the netkit tests boot this UML kernel
# instead (see run.sh). The kernel is built from Debian's linux-source-6.12
# and cached under $NETKIT_UML_CACHE (default /var/cache/netkit-cni/uml) in a
# folder named after the source package version and a hash of the config
# fragment and build recipe below, so editing either triggers a rebuild and
# nothing else does.
#
# stdout: the kernel's path, nothing else.  stderr: progress.
set -euo pipefail

CACHE_ROOT=${NETKIT_UML_CACHE:-/var/cache/netkit-cni/uml}
SOURCE_PKG=linux-source-6.12
SOURCE_TARBALL=/usr/src/$SOURCE_PKG.tar.xz
# Patches to the source, applied in build_kernel; their text is part of the cache key.
PATCHES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

# Options that must end up =y. olddefconfig silently drops an option whose
# dependencies are unmet, so every one of them is checked after it runs.
REQUIRED=(
  # netkit and the BPF pieces the CNI attaches with
  NETKIT VETH BPF_SYSCALL BPF DEBUG_INFO DEBUG_INFO_BTF
  CGROUPS CGROUP_BPF NET_SCHED NET_SCH_INGRESS NET_CLS_BPF NET_CLS_ACT
  NET_ACT_BPF NET_XGRESS
  # guest plumbing: host root via hostfs, writable overlay, tmpfs, /dev;
  # overlayfs keeps its metadata in xattrs of the tmpfs upper layer (without
  # them, renaming a directory from the host's root fails with EXDEV)
  HOSTFS OVERLAY_FS TMPFS TMPFS_XATTR DEVTMPFS UNIX98_PTYS BINFMT_SCRIPT
  MAGIC_SYSRQ
  # networking used by the tests, including the bandwidth plugin's tbf/ifb
  NAMESPACES NET_NS UTS_NS IPC_NS PID_NS USER_NS INET IPV6 BRIDGE TUN DUMMY
  PACKET IP_ADVANCED_ROUTER IP_MULTIPLE_TABLES IPV6_MULTIPLE_TABLES
  NET_SCH_TBF NET_CLS_U32 NET_ACT_MIRRED IFB
  # VLAN devices on the uplink (802.1Q, QinQ): the node's own tagged traffic must pass
  # the uplink's program while tags that hide a spoofed source are refused
  VLAN_8021Q
  # the bandwidth limits' earliest departure times: fq paces them (mq, which holds one
  # fq per transmit queue, is always built with the scheduler core)
  NET_SCH_FQ
  # netfilter: Debian's iptables is iptables-nft, which needs nft_compat plus
  # the xt targets/matches it translates (those kube-proxy and portmap use)
  NETFILTER NETFILTER_ADVANCED NETFILTER_NETLINK NF_CONNTRACK NF_NAT
  NF_CONNTRACK_MARK
  NF_TABLES NF_TABLES_INET NF_TABLES_IPV4 NF_TABLES_IPV6
  NFT_COMPAT NFT_NAT NFT_CT NFT_MASQ NFT_REDIR
  NETFILTER_XTABLES NETFILTER_XT_NAT NETFILTER_XT_MARK NETFILTER_XT_CONNMARK
  NETFILTER_XT_TARGET_MASQUERADE NETFILTER_XT_TARGET_REDIRECT
  NETFILTER_XT_MATCH_CONNTRACK NETFILTER_XT_MATCH_MARK
  NETFILTER_XT_MATCH_COMMENT NETFILTER_XT_MATCH_MULTIPORT
  NETFILTER_XT_MATCH_ADDRTYPE NETFILTER_XT_MATCH_STATISTIC
  # iptables-legacy (and ip6tables) for the same rules
  IP_NF_IPTABLES IP_NF_FILTER IP_NF_NAT IP_NF_MANGLE IP_NF_TARGET_MASQUERADE
  IP6_NF_IPTABLES IP6_NF_FILTER IP6_NF_NAT IP6_NF_MANGLE
  IP6_NF_TARGET_MASQUERADE NF_DEFRAG_IPV6
  # tracefs events such as net:netif_rx (FTRACE alone does not provide them)
  FTRACE ENABLE_DEFAULT_TRACERS
)
# Wanted but not available on every architecture (BPF_EVENTS needs kprobes or
# uprobes, which UML may lack): reported, not fatal.
OPTIONAL=(BPF_EVENTS)
# A single static image: nothing to load modules from inside the guest.
DISABLED=(MODULES DEBUG_INFO_NONE DEBUG_INFO_REDUCED DEBUG_INFO_SPLIT)

log() { printf 'kernel.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/../../scripts/apt.sh"
APT_INSTALL_OPTS=--no-install-recommends

# Installed versions of the given packages, as "name version" lines; one
# dpkg-query for all keeps the cached path's lookup fast.
installed_versions() {
  dpkg-query -W -f='${Package} ${db:Status-Abbrev} ${Version}\n' "$@" 2>/dev/null |
    awk '$2 == "ii" { print $1, $3 }' || true
}

# What the guest needs at run time (it runs the host's binaries) and the
# source whose version names the cache entry.
ensure_runtime_packages() {
  local -A have=()
  local name version
  while read -r name version; do have[$name]=$version; done < <(
    installed_versions iptables bpftool "$SOURCE_PKG"
  )
  local plain=() backports=()
  [[ -n ${have[iptables]:-} ]] || plain+=(iptables)
  # Bookworm's own iproute2 and bpftool predate netkit.
  [[ $(ip link help 2>&1) == *netkit* ]] || backports+=(iproute2)
  if [[ -z ${have[bpftool]:-} ]] || ! dpkg --compare-versions "${have[bpftool]}" ge 7.5; then
    backports+=(bpftool)
  fi
  [[ -f $SOURCE_TARBALL && -n ${have[$SOURCE_PKG]:-} ]] || backports+=("$SOURCE_PKG")
  ((${#plain[@]} == 0)) || apt_install "${plain[@]}"
  if ((${#backports[@]})); then
    ensure_sources deb "$(debian_codename)-backports main"
    apt_install -t "$(debian_codename)-backports" "${backports[@]}"
  fi
  [[ -f $SOURCE_TARBALL ]] || die "$SOURCE_TARBALL missing after installing $SOURCE_PKG"
}

ensure_build_packages() {
  local wanted=(build-essential flex bison bc libelf-dev dwarves xz-utils patch)
  local -A have=()
  local name version
  while read -r name version; do have[$name]=$version; done < <(
    installed_versions "${wanted[@]}"
  )
  local missing=() pkg
  for pkg in "${wanted[@]}"; do
    [[ -n ${have[$pkg]:-} ]] || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) || apt_install "${missing[@]}"
}

# Everything that shapes the kernel image. Its text (bash prints function
# bodies without comments) is part of the cache key.
build_kernel() {
  local tarball=$1 workdir=$2 jobs=$3
  local make=(make -C "$workdir/src" ARCH=um SUBARCH=x86_64)

  log "extracting $tarball"
  mkdir -p "$workdir/src"
  tar -xJf "$tarball" -C "$workdir/src" --strip-components=1
  patch -d "$workdir/src" -p1 --forward --quiet <"$PATCHES/uml-xstate.patch"

  log "configuring"
  "${make[@]}" defconfig >&2
  local args=() opt
  for opt in "${REQUIRED[@]}" "${OPTIONAL[@]}"; do args+=(--enable "$opt"); done
  for opt in "${DISABLED[@]}"; do args+=(--disable "$opt"); done
  # DWARF is needed for pahole to generate BTF; the compiler's default version.
  args+=(--enable DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT)
  # The patched FP state (uml-xstate.patch) makes task_struct larger than the default
  # 16 kB the init task's stack area holds, and every signal handler's frame (it keeps
  # the registers on the stack) larger too: 64 kB stacks.
  args+=(--set-val KERNEL_STACK_ORDER 4)
  "$workdir/src/scripts/config" --file "$workdir/src/.config" "${args[@]}"
  "${make[@]}" olddefconfig >&2

  local config=$workdir/src/.config missing=()
  grep -qx "CONFIG_KERNEL_STACK_ORDER=4" "$config" || missing+=("KERNEL_STACK_ORDER=4")
  for opt in "${REQUIRED[@]}"; do
    grep -qx "CONFIG_$opt=y" "$config" || missing+=("$opt")
  done
  for opt in "${DISABLED[@]}"; do
    if grep -q "^CONFIG_$opt=" "$config"; then missing+=("!$opt"); fi
  done
  if ((${#missing[@]})); then
    log "these options did not end up as requested in .config:"
    printf '  %s\n' "${missing[@]}" >&2
    die "kernel configuration incomplete"
  fi
  for opt in "${OPTIONAL[@]}"; do
    grep -qx "CONFIG_$opt=y" "$config" || log "note: optional CONFIG_$opt not available"
  done

  log "building (make -j$jobs linux); this takes several minutes"
  "${make[@]}" -j"$jobs" linux >&2
  # Debug info is only needed to produce .BTF, which --strip-debug keeps.
  objcopy --strip-debug "$workdir/src/linux" "$workdir/linux"
  cp "$config" "$workdir/config"
}

# The ERR trap around build_kernel: names the build step a failing command belongs to.
# build_kernel's text is part of the cache key, so its steps are told apart by their
# commands here rather than marked inside it; their output has already streamed above.
build_step_failed() {
  local status=$1 cmd=$2 step
  case $cmd in
    "tar "* | "mkdir "*) step="extract $SOURCE_TARBALL" ;;
    "patch "*) step="patch the source" ;;
    *defconfig* | *scripts/config*) step=configure ;;
    *" linux"*) step="make linux" ;;
    "objcopy "*) step=objcopy ;;
    *) step="build the kernel" ;;
  esac
  step_failed "$step" "\`$cmd\` exited with status $status (its output is above)"
}

cache_key() {
  {
    printf '%s\n' "${REQUIRED[@]}" -- "${OPTIONAL[@]}" -- "${DISABLED[@]}"
    declare -f build_kernel
    cat "$PATCHES/uml-xstate.patch"
  } | sha256sum | cut -c1-16
}

main() {
  ensure_runtime_packages
  local version dir
  # Debian versions may contain '~' and '+', harmless in a path but not '/'.
  version=$(installed_versions "$SOURCE_PKG" | awk '{ print $2 }' | tr '/:' '__')
  dir=$CACHE_ROOT/$version-$(cache_key)
  if [[ -x $dir/linux ]]; then
    printf '%s\n' "$dir/linux"
    return
  fi

  mkdir -p "$CACHE_ROOT"
  # Concurrent callers wait for one build instead of racing.
  exec 9>"$CACHE_ROOT/.lock"
  if ! flock -n 9; then
    log "waiting for another kernel.sh to finish building"
    flock 9
  fi
  if [[ ! -x $dir/linux ]]; then
    # Globals: the EXIT trap runs after main has returned.
    workdir=$(mktemp -d /var/tmp/netkit-uml-build.XXXXXX)
    stage=$(mktemp -d "$CACHE_ROOT/.stage.XXXXXX")
    trap 'rm -rf "$workdir" "$stage"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM HUP
    ensure_build_packages
    log "building UML kernel from $SOURCE_PKG $version into $dir"
    # errtrace: the trap also fires inside build_kernel, where set -e stops at a failure.
    set -E
    trap 'build_step_failed $? "$BASH_COMMAND"' ERR
    build_kernel "$SOURCE_TARBALL" "$workdir" "$(nproc)"
    trap - ERR
    set +E
    run_step "store the kernel in $dir" cp "$workdir/linux" "$workdir/config" "$stage/"
    run_step "store the kernel in $dir" chmod 755 "$stage"
    # rename(2) within one filesystem: readers see no folder or a complete one.
    run_step "store the kernel in $dir" mv -T "$stage" "$dir"
    log "kernel cached at $dir/linux"
  fi
  printf '%s\n' "$dir/linux"
}

main "$@"
