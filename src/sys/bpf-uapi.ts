/**
 * The bpf(2) uapi this plugin uses, as numbers: enum bpf_cmd, map, program and attach
 * types, flags, and the byte offsets of the fields we fill in `union bpf_attr` and read
 * in the kernel's bpf_*_info structs. Checked against /usr/include/linux/bpf.h by
 * test/bpf/uapi-layout.c (test/bpf/loader.test.ts). Data only: no calls.
 */

// ---- numbers (enum bpf_cmd, bpf_map_type, bpf_prog_type, bpf_attach_type) ----

export const BPF_CMD = {
  MAP_CREATE: 0,
  MAP_LOOKUP_ELEM: 1,
  MAP_UPDATE_ELEM: 2,
  MAP_DELETE_ELEM: 3,
  MAP_GET_NEXT_KEY: 4,
  PROG_LOAD: 5,
  OBJ_PIN: 6,
  OBJ_GET: 7,
  /** Used only by the tests (test/bpf/helpers/test-run.ts); listed so they call bpf() like the rest. */
  PROG_TEST_RUN: 10,
  PROG_GET_FD_BY_ID: 13,
  MAP_GET_FD_BY_ID: 14,
  OBJ_GET_INFO_BY_FD: 15,
  BTF_LOAD: 18,
  BTF_GET_FD_BY_ID: 19,
  MAP_LOOKUP_AND_DELETE_ELEM: 21,
  BTF_GET_NEXT_ID: 23,
  MAP_LOOKUP_BATCH: 24,
  MAP_LOOKUP_AND_DELETE_BATCH: 25,
  MAP_UPDATE_BATCH: 26,
  LINK_CREATE: 28,
  LINK_UPDATE: 29,
  ITER_CREATE: 33,
  LINK_DETACH: 34,
} as const;
export type BpfCmd = keyof typeof BPF_CMD;

export const BPF_MAP_TYPE = {
  HASH: 1,
  ARRAY: 2,
  PERCPU_HASH: 5,
  PERCPU_ARRAY: 6,
  LRU_HASH: 9,
  LPM_TRIE: 11,
  ARRAY_OF_MAPS: 12,
  HASH_OF_MAPS: 13,
  SOCKHASH: 18,
  QUEUE: 22,
  SK_STORAGE: 24,
} as const;

export const BPF_PROG_TYPE = {
  SCHED_CLS: 3,
  CGROUP_SOCK: 9,
  SOCK_OPS: 13,
  SK_MSG: 16,
  CGROUP_SOCK_ADDR: 18,
  TRACING: 26,
} as const;

export const BPF_ATTACH_TYPE = {
  CGROUP_SOCK_OPS: 3,
  SK_MSG_VERDICT: 7,
  CGROUP_INET4_CONNECT: 10,
  CGROUP_INET6_CONNECT: 11,
  CGROUP_UDP4_SENDMSG: 14,
  CGROUP_UDP6_SENDMSG: 15,
  CGROUP_UDP4_RECVMSG: 19,
  CGROUP_UDP6_RECVMSG: 20,
  TRACE_ITER: 28,
  CGROUP_INET4_GETPEERNAME: 29,
  CGROUP_INET6_GETPEERNAME: 30,
  CGROUP_INET_SOCK_RELEASE: 34,
  TCX_INGRESS: 46,
  TCX_EGRESS: 47,
  NETKIT_PRIMARY: 54,
  NETKIT_PEER: 55,
} as const;

export const BPF_MISC = {
  PSEUDO_MAP_FD: 1,
  PSEUDO_KFUNC_CALL: 2,
  ANY: 0,
  NOEXIST: 1,
  EXIST: 2,
  F_NO_PREALLOC: 1,
  F_REPLACE: 4,
  OBJ_NAME_LEN: 16,
} as const;

// ---- layouts: sizes, and byte offsets inside union bpf_attr and the info structs ----

export const SIZEOF = {
  "union bpf_attr": 152,
  "struct bpf_map_info": 88,
  "struct bpf_btf_info": 32,
} as const;

export const ATTR = {
  MAP_CREATE: {
    map_type: 0,
    key_size: 4,
    value_size: 8,
    max_entries: 12,
    map_flags: 16,
    inner_map_fd: 20,
    map_name: 28,
    btf_fd: 48,
    btf_key_type_id: 52,
    btf_value_type_id: 56,
  },
  BTF_LOAD: { btf: 0, btf_log_buf: 8, btf_size: 16, btf_log_size: 20, btf_log_level: 24 },
  MAP_ELEM: { map_fd: 0, key: 8, value: 16, next_key: 16, flags: 24 },
  BATCH: { in_batch: 0, out_batch: 8, keys: 16, values: 24, count: 32, map_fd: 36, elem_flags: 40, flags: 48 },
  PROG_LOAD: {
    prog_type: 0,
    insn_cnt: 4,
    insns: 8,
    license: 16,
    log_level: 24,
    log_size: 28,
    log_buf: 32,
    prog_name: 48,
    expected_attach_type: 68,
    attach_btf_id: 108,
    fd_array: 120,
    log_true_size: 140,
  },
  OBJ: { pathname: 0, bpf_fd: 8, file_flags: 12 },
  INFO: { bpf_fd: 0, info_len: 4, info: 8 },
  GET_ID: { start_id: 0, next_id: 4, open_flags: 8 },
  PROG_INFO: { id: 4, jited_prog_len: 16, name: 64, verified_insns: 216 },
  BTF_INFO: { btf: 0, btf_size: 8, id: 12, name: 16, name_len: 24, kernel_btf: 28 },
  /** target_fd (a cgroup or a sockmap) shares its place with target_ifindex. */
  LINK_CREATE: {
    prog_fd: 0,
    target_ifindex: 4,
    target_fd: 4,
    attach_type: 8,
    flags: 12,
    relative_fd: 16,
    expected_revision: 24,
  },
  LINK_UPDATE: { link_fd: 0, new_prog_fd: 4, flags: 8, old_prog_fd: 12 },
  LINK_DETACH: { link_fd: 0 },
  ITER_CREATE: { link_fd: 0, flags: 4 },
  MAP_INFO: { type: 0, id: 4, key_size: 8, value_size: 12, max_entries: 16, map_flags: 20, name: 24 },
} as const;

// __NR_bpf differs per architecture (asm/unistd_64.h; arm64 uses the generic table).
const SYS_BPF_BY_ARCH: Partial<Record<NodeJS.Architecture, number>> = { x64: 321, arm64: 280 };

export function sysBpf(): number {
  const nr = SYS_BPF_BY_ARCH[process.arch];
  if (nr === undefined) throw new Error(`bpf(2): unsupported architecture ${process.arch}`);
  return nr;
}
