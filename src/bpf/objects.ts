/**
 * The node's eBPF objects as a build ships them: the two variants' files, the epoch that
 * orders builds, and the name a build's pinned programs go by (bpf/node.ts). Pure but for
 * hashing: scripts/build.mjs runs this module to name the build it embeds, so the name an
 * executable carries and the one the objects' bytes give are computed by the same code.
 */
import { sha256Hex } from "../sys/sha256";

/** How a variant keeps NAT'd flows on the stack; in order of preference. */
export const NAT_CHECKS = ["conntrack", "memory"] as const;
export type NatCheck = (typeof NAT_CHECKS)[number];

/** The compiled objects' bytes (dist/bpf/*.o, embedded in the executable). */
export interface VariantObjects {
  lxc: Buffer;
  host: Buffer;
}

export interface NodeObjects {
  /** Read on first use: a verb that finds its build's programs pinned never needs them. */
  variants: Record<NatCheck, VariantObjects>;
  /** Seconds since 1970 when this build was made: orders builds on one node. */
  epoch: number;
  /** The objects' digest as the build computed it (objectsDigest), carried by the
   * executables; absent where the objects are read from a directory, and then computed. */
  digest?: string;
}

export const OBJECT_FILES: Record<NatCheck, { lxc: string; host: string }> = {
  conntrack: { lxc: "bpf_lxc_ct.o", host: "bpf_host_ct.o" },
  memory: { lxc: "bpf_lxc.o", host: "bpf_host.o" },
};
export const EPOCH_FILE = "epoch";
/** The executables' asset holding objectsDigest of their objects. */
export const DIGEST_FILE = "objects.digest";

/**
 * The node's objects, by their file names, from wherever the build put them (the
 * executable's embedded assets; dist/bpf for the tests). `read` returns undefined for a
 * file that is not there: a build without an epoch file is epoch 0. The objects are read
 * when first asked for: decoding and hashing them was 2 ms of every ADD.
 */
export function nodeObjectsFrom(read: (file: string) => Buffer | undefined): NodeObjects {
  const object = (file: string) => {
    const bytes = read(file);
    if (!bytes) throw new Error(`no eBPF object ${file} in this build`);
    return bytes;
  };
  let variants: Record<NatCheck, VariantObjects> | undefined;
  const digest = read(DIGEST_FILE)?.toString("utf8").trim();
  return {
    get variants() {
      variants ??= {
        conntrack: { lxc: object(OBJECT_FILES.conntrack.lxc), host: object(OBJECT_FILES.conntrack.host) },
        memory: { lxc: object(OBJECT_FILES.memory.lxc), host: object(OBJECT_FILES.memory.host) },
      };
      return variants;
    },
    epoch: Number(read(EPOCH_FILE)?.toString("utf8").trim()) || 0,
    ...(digest ? { digest } : {}),
  };
}

/** A hash of every object, both variants, in NAT_CHECKS order. */
export function objectsDigest(variants: Record<NatCheck, VariantObjects>): string {
  return sha256Hex(
    NAT_CHECKS.flatMap((v) => [variants[v].lxc, variants[v].host]),
    16,
  );
}

/** Identifies a build of the programs: its epoch and a hash of every object. */
export function buildName(objects: NodeObjects): string {
  return `${objects.epoch}-${objects.digest ?? objectsDigest(objects.variants)}`;
}
