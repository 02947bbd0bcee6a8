/**
 * Which structs each of our objects lays out as user space declares them (field tables,
 * loader/struct.ts), by the object's file, and the build's check of every object
 * against them (loader/struct-btf.ts): scripts/build.mjs runs checkBuiltObjects on
 * dist/bpf as soon as clang has made the objects, so `make build` fails on a layout that
 * changed on one side only, naming it. The loaders check the objects they read with the
 * same lists. Pure: the build evaluates this module without the runtime's FFI.
 */
import { BANDWIDTH_STRUCTS } from "./bandwidth/abi";
import { FASTPATH_STRUCTS } from "./fastpath/abi";
import { MAP_DEF } from "./loader/elf";
import type { StructLayout } from "./loader/struct";
import { objectStructMismatches } from "./loader/struct-btf";
import { POLICY_STRUCTS } from "./policy/abi";
import { SOCK_OBJECT, SOCK_STRUCTS } from "./sock/abi";
import { SVC_DESTROY_OBJECT, SVC_DESTROY_STRUCTS, SVC_OBJECT, SVC_STRUCTS } from "./svc/abi";

/** The node's objects (bpf_lxc.o, bpf_host.o, each in both variants): every map of the
 * fast path, the rate limits and NetworkPolicy. */
export const NODE_STRUCTS: readonly StructLayout[] = [
  MAP_DEF,
  ...FASTPATH_STRUCTS,
  ...BANDWIDTH_STRUCTS,
  ...POLICY_STRUCTS,
];

/** Every object a build makes, with the structs it must lay out as user space does. */
export const OBJECT_STRUCTS: Readonly<Record<string, readonly StructLayout[]>> = {
  "bpf_lxc.o": NODE_STRUCTS,
  "bpf_lxc_ct.o": NODE_STRUCTS,
  "bpf_host.o": NODE_STRUCTS,
  "bpf_host_ct.o": NODE_STRUCTS,
  [SOCK_OBJECT]: SOCK_STRUCTS,
  [SVC_OBJECT]: SVC_STRUCTS,
  [SVC_DESTROY_OBJECT]: SVC_DESTROY_STRUCTS,
};

/**
 * What differs between the built objects (by file name) and user space's tables, each
 * said whole: empty when every object lays out its structs as declared. An object this
 * list does not know, or one it names that the build did not make, is a difference too.
 */
export function builtObjectMismatches(objects: ReadonlyMap<string, Buffer>): string[] {
  const problems: string[] = [];
  for (const file of Object.keys(OBJECT_STRUCTS)) if (!objects.has(file)) problems.push(`${file} was not built`);
  for (const [file, bytes] of objects) {
    const tables = OBJECT_STRUCTS[file];
    if (!tables) problems.push(`${file}: src/bpf/structs.ts does not say which structs it shares with user space`);
    else problems.push(...objectStructMismatches(bytes, tables, file));
  }
  return problems;
}
