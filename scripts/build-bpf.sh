#!/bin/sh
# Compiles every bpf/*.c twice into dist/bpf/, or the directory given (clang -target bpf):
#   <name>.o      NAT safety from our own per-endpoint memory (any kernel)
#   <name>_ct.o   NAT safety from the kernel's conntrack, through kfuncs (kernels with
#                 a BPF JIT); the loader tries these first (src/bpf/node.ts).
# bpf_sock.c (the socket bypass) and bpf_svc.c (Service translation) ask nothing of
# conntrack: built once.
# Uses the uapi headers from linux-libc-dev and libbpf's bpf_helpers.h only;
# no vmlinux.h. -mcpu=v3: the rate limits' compare-and-swap (bpf/lib/bandwidth.h),
# Linux 5.12+ (every kernel with tcx has it). The asm/ headers that linux/types.h pulls in live in the
# multiarch include directory, which clang does not search for -target bpf.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist/bpf}
mkdir -p "$out"
clang=${CLANG:-clang}
multiarch=$(gcc -print-multiarch 2>/dev/null || echo "$(uname -m)-linux-gnu")

# The build's epoch orders builds on a node (src/bpf/node.ts): a build never replaces a
# newer one's programs. NKC_BUILD_EPOCH, else SOURCE_DATE_EPOCH, else the commit's time,
# else now. It is compiled into the objects, so two epochs never share a build name.
epoch=${NKC_BUILD_EPOCH:-${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || true)}}
epoch=${epoch:-$(date +%s)}
compile() { # <source> <object> [extra flags...]
  src=$1 obj=$2
  # mktemp, not $$: guests side by side write this folder, and their pids can coincide.
  tmp=$(mktemp "$obj.tmp.XXXXXX")
  shift 2
  "$clang" -O2 -g -target bpf -mcpu=v3 -Wall -Werror -DNKC_BUILD_EPOCH="$epoch" "$@" \
    -I "$root/bpf/include" -I "$root/bpf/lib" \
    -idirafter "/usr/include/$multiarch" \
    -c "$src" -o "$tmp"
  # Atomic replace: test files build concurrently and read the result.
  chmod 644 "$tmp"
  mv "$tmp" "$obj"
}
for src in "$root"/bpf/*.c; do
  name=$(basename "$src" .c)
  compile "$src" "$out/$name.o"
  case $name in
  bpf_sock | bpf_svc | bpf_svc_destroy) ;; # socket programs: no packets, no conntrack
  *) compile "$src" "$out/${name}_ct.o" -DNKC_CONNTRACK ;;
  esac
done

tmp=$(mktemp "$out/epoch.tmp.XXXXXX")
echo "$epoch" >"$tmp"
mv "$tmp" "$out/epoch"
