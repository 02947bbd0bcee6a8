/**
 * BPF maps as objects: create one from a MapSpec, open a pinned one, and the element
 * operations (lookup, update, delete, iterate and count keys) on raw key/value bytes.
 * Knows map types only as far as per-CPU value sizing and their names need; what the
 * bytes mean belongs to the callers (the features' folders). Owns the map fd
 * until close().
 */
import * as fs from "node:fs";
import {
  closeFd,
  mapCreate,
  mapDeleteElem,
  mapGetNextKey,
  mapLookupElem,
  mapPopElem,
  mapUpdateElem,
  objGet,
  objGetInfo,
} from "../../sys/bpf-syscall";
import { ATTR, BPF_MAP_TYPE, BPF_MISC, SIZEOF } from "../../sys/bpf-uapi";
import type { MapSpec } from "./elf";
import { withMapBtf } from "./map-btf";

export type UpdateMode = "any" | "create-only" | "replace-only";

const PERCPU_TYPES = new Set<number>([BPF_MAP_TYPE.PERCPU_HASH, BPF_MAP_TYPE.PERCPU_ARRAY]);

export class BpfMap {
  private open = true;

  constructor(
    readonly fd: number,
    readonly spec: MapSpec,
  ) {}

  static create(spec: MapSpec): BpfMap {
    // A map of maps is created with an example of its inner maps, which it then no
    // longer needs.
    const template = spec.inner ? BpfMap.create(spec.inner) : undefined;
    try {
      const attr = {
        mapType: spec.type,
        keySize: spec.keySize,
        valueSize: spec.valueSize,
        maxEntries: spec.maxEntries,
        mapFlags: spec.flags,
        name: spec.name,
        innerMapFd: template?.fd,
      };
      // Socket storage exists only with the types of its key and value (map-btf.ts).
      const fd =
        spec.type === BPF_MAP_TYPE.SK_STORAGE
          ? withMapBtf(spec.valueSize, (btf) => mapCreate({ ...attr, btf }))
          : mapCreate(attr);
      return new BpfMap(fd, spec);
    } finally {
      template?.close();
    }
  }

  /** Opens a pinned map; its spec comes from the kernel (bpf_map_info). */
  static openPinned(path: string): BpfMap {
    const fd = objGet(path);
    try {
      return new BpfMap(fd, mapInfo(fd));
    } catch (e) {
      closeFd(fd);
      throw e;
    }
  }

  get isPerCpu(): boolean {
    return PERCPU_TYPES.has(this.spec.type);
  }

  /** Bytes a lookup returns: per-CPU maps give one 8-byte-aligned slot per possible CPU. */
  get lookupSize(): number {
    if (!this.isPerCpu) return this.spec.valueSize;
    return roundUp8(this.spec.valueSize) * possibleCpus();
  }

  lookup(key: Buffer): Buffer | undefined {
    return mapLookupElem(this.fd, this.checkKey(key), this.lookupSize);
  }

  /** Per-CPU maps: one value per possible CPU. */
  lookupPerCpu(key: Buffer): Buffer[] | undefined {
    const all = this.lookup(key);
    if (!all) return undefined;
    const slot = roundUp8(this.spec.valueSize);
    return Array.from({ length: all.length / slot }, (_, cpu) =>
      all.subarray(cpu * slot, cpu * slot + this.spec.valueSize),
    );
  }

  update(key: Buffer, value: Buffer, mode: UpdateMode = "any"): void {
    if (this.isPerCpu) throw new Error(`map ${this.spec.name}: per-CPU update needs every CPU's value`);
    if (value.length !== this.spec.valueSize) {
      throw new Error(`map ${this.spec.name}: value is ${value.length} bytes, expected ${this.spec.valueSize}`);
    }
    const flags = mode === "any" ? BPF_MISC.ANY : mode === "create-only" ? BPF_MISC.NOEXIST : BPF_MISC.EXIST;
    mapUpdateElem(this.fd, this.checkKey(key), value, flags);
  }

  /** A queue map: `value` added as its newest; fails (E2BIG) when it is full. */
  push(value: Buffer): void {
    if (value.length !== this.spec.valueSize) {
      throw new Error(`map ${this.spec.name}: value is ${value.length} bytes, expected ${this.spec.valueSize}`);
    }
    mapUpdateElem(this.fd, undefined, value, BPF_MISC.ANY);
  }

  /** A queue map's oldest value, taken out; undefined when the queue is empty. */
  pop(): Buffer | undefined {
    return mapPopElem(this.fd, this.spec.valueSize);
  }

  /** Returns false when the key was not there. */
  delete(key: Buffer): boolean {
    return mapDeleteElem(this.fd, this.checkKey(key));
  }

  /** Keys in kernel order. Entries deleted meanwhile may end the walk early or restart it
   * (BPF_MAP_GET_NEXT_KEY semantics); callers needing a snapshot collect first. */
  *keys(): Generator<Buffer> {
    let key = mapGetNextKey(this.fd, undefined, this.spec.keySize);
    while (key) {
      yield key;
      key = mapGetNextKey(this.fd, key, this.spec.keySize);
    }
  }

  /** How many keys the map holds now (one walk of keys(); a per-CPU map counts keys, not
   * its per-CPU values). Approximate while the programs add or delete entries. */
  countKeys(): number {
    let n = 0;
    for (const _ of this.keys()) n += 1;
    return n;
  }

  close(): void {
    if (!this.open) return;
    this.open = false;
    closeFd(this.fd);
  }

  private checkKey(key: Buffer): Buffer {
    if (key.length !== this.spec.keySize) {
      throw new Error(`map ${this.spec.name}: key is ${key.length} bytes, expected ${this.spec.keySize}`);
    }
    return key;
  }
}

/** What the kernel says about a map fd. */
export function mapInfo(fd: number): MapSpec {
  const info = objGetInfo(fd, SIZEOF["struct bpf_map_info"]);
  const o = ATTR.MAP_INFO;
  const nameEnd = info.indexOf(0, o.name);
  return {
    name: info.toString("ascii", o.name, nameEnd === -1 || nameEnd > o.name + 16 ? o.name + 16 : nameEnd),
    type: info.readUInt32LE(o.type),
    keySize: info.readUInt32LE(o.key_size),
    valueSize: info.readUInt32LE(o.value_size),
    maxEntries: info.readUInt32LE(o.max_entries),
    flags: info.readUInt32LE(o.map_flags),
  };
}

/** The kernel's name for a map type, as bpftool prints it ("hash", "lru_hash", "lpm_trie"). */
export function mapKind(type: number): string {
  const name = Object.entries(BPF_MAP_TYPE).find(([, n]) => n === type)?.[0];
  return name ? name.toLowerCase() : `type ${type}`;
}

/** The kernel's id for the map behind `fd` (the same for every fd of one map). */

/** Differences that make a pinned map unusable for a spec; empty when compatible. */
export function specMismatches(want: MapSpec, have: MapSpec): string[] {
  const fields = ["type", "keySize", "valueSize", "maxEntries", "flags"] as const;
  return fields.filter((f) => want[f] !== have[f]).map((f) => `${f} ${have[f]} (want ${want[f]})`);
}

let cpus: number | undefined;

/** Number of possible CPUs, from sysfs ("0-3,5" is 5). The kernel copies per-CPU values
 * for_each_possible_cpu() into consecutive slots, so this is the slot count. */
export function possibleCpus(): number {
  if (cpus === undefined) {
    const text = fs.readFileSync("/sys/devices/system/cpu/possible", "utf8").trim();
    cpus = 0;
    for (const part of text.split(",")) {
      const [first, last = first] = part.split("-").map(Number) as [number, number?];
      cpus += last - first + 1;
    }
  }
  return cpus;
}

const roundUp8 = (n: number) => Math.ceil(n / 8) * 8;
