#!/bin/sh
# Compiles every bpf/*.c into dist/bpf/<name>.o (clang -target bpf).
# Uses the uapi headers from linux-libc-dev and libbpf's bpf_helpers.h only;
# no vmlinux.h. The asm/ headers that linux/types.h pulls in live in the
# multiarch include directory, which clang does not search for -target bpf.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/dist/bpf"
mkdir -p "$out"
clang=${CLANG:-clang}
multiarch=$(gcc -print-multiarch 2>/dev/null || echo "$(uname -m)-linux-gnu")
for src in "$root"/bpf/*.c; do
  name=$(basename "$src" .c)
  "$clang" -O2 -g -target bpf -Wall -Werror \
    -I "$root/bpf/include" -I "$root/bpf/lib" \
    -idirafter "/usr/include/$multiarch" \
    -c "$src" -o "$out/$name.o.tmp.$$"
  # Atomic replace: test files build concurrently and read the result.
  mv "$out/$name.o.tmp.$$" "$out/$name.o"
done
