/**
 * The loader against this kernel: uapi numbers and attr offsets match the installed
 * headers, native memory is really shared with C, our ELF objects parse, maps are
 * created, pinned and reused, and a rejected program's error carries the verifier log.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import * as ffi from "ffi-rs";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { MAP_NAMES, PROGRAM_NAMES } from "../../src/bpf/fastpath/abi";
import { NETWORK_CIDRS_SPEC } from "../../src/bpf/fastpath/cluster";
import { conntrackUnavailable } from "../../src/bpf/fastpath/kernel-probe";
import { findFunctions } from "../../src/bpf/loader/btf";
import { readObject } from "../../src/bpf/loader/elf";
import { mapPin, mapsDir } from "../../src/bpf/loader/layout";
import { BpfMap } from "../../src/bpf/loader/maps";
import { ensureBpffs, isBpffs, pinObject } from "../../src/bpf/loader/pins";
import { loadProgram } from "../../src/bpf/loader/programs";
import { loadNodePrograms, type NodeMaps, openNodeMaps } from "../../src/bpf/node";
import { NAT_CHECKS, type NodeObjects } from "../../src/bpf/objects";
import { POD_STATE } from "../../src/bpf/pod-state";
import { POLICY_MAP_NAMES } from "../../src/bpf/policy/abi";
import { SOCK_MAP_NAMES } from "../../src/bpf/sock/abi";
import { SVC_MAP_NAMES } from "../../src/bpf/svc/abi";
import { ProgLoadError } from "../../src/sys/bpf-syscall";
import {
  ATTR,
  BPF_ATTACH_TYPE,
  BPF_CMD,
  BPF_MAP_TYPE,
  BPF_MISC,
  BPF_PROG_TYPE,
  SIZEOF,
  sysBpf,
} from "../../src/sys/bpf-uapi";
import { NativeBuffer } from "../../src/sys/native-memory";
import { buildObjects, repoRoot } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { mapId } from "./helpers/flows";
import { TEST_RUN_UAPI } from "./helpers/test-run";

let objects: NodeObjects;
beforeAll(() => {
  objects = buildObjects();
});

describe("uapi numbers and layouts", () => {
  it("match /usr/include/linux/bpf.h", () => {
    const bin = `/tmp/nkb-uapi-layout-${process.pid}`;
    try {
      const multiarch = execFileSync("gcc", ["-print-multiarch"], { encoding: "utf8" }).trim();
      execFileSync("clang", [
        "-idirafter",
        `/usr/include/${multiarch}`,
        "-o",
        bin,
        path.join(repoRoot, "test/bpf/uapi-layout.c"),
      ]);
      const fromHeader = JSON.parse(execFileSync(bin, { encoding: "utf8" })) as Record<string, number>;
      const ours: Record<string, number> = {};
      const tables = {
        BPF_CMD,
        BPF_MAP_TYPE,
        BPF_PROG_TYPE,
        BPF_ATTACH_TYPE,
        BPF_MISC,
        TCX_VERDICT: TEST_RUN_UAPI.TCX_VERDICT,
        SIZEOF: { ...SIZEOF, ...TEST_RUN_UAPI.SIZEOF },
        ATTR: { ...ATTR, ...TEST_RUN_UAPI.ATTR },
      };
      for (const [group, table] of Object.entries(tables)) {
        for (const [name, value] of Object.entries(table)) {
          if (typeof value === "number") ours[`${group}.${name}`] = value;
          else for (const [field, off] of Object.entries(value)) ours[`${group}.${name}.${field}`] = off as number;
        }
      }
      const expected = Object.fromEntries(Object.keys(ours).map((k) => [k, fromHeader[k]]));
      expect(ours).toEqual(expected);
      // netkit links share tcx's relative_fd slot in link_create.
      expect(fromHeader["netkit.relative_fd"]).toBe(ATTR.LINK_CREATE.relative_fd);
      expect(fromHeader["SYS.bpf"]).toBe(sysBpf());
    } finally {
      fs.rmSync(bin, { force: true });
    }
  });
});

describe("NativeBuffer", () => {
  it("is the same memory for JavaScript and C", () => {
    ffi.open({ library: "nkb-test-libc", path: "libc.so.6" });
    const buf = NativeBuffer.alloc(32);
    try {
      buf.bytes.write("netkit", 0, "ascii");
      // memset returns its first argument: the address we put into attrs.
      const addr = ffi.load({
        library: "nkb-test-libc",
        funcName: "strlen",
        retType: ffi.DataType.U64,
        paramsType: [ffi.DataType.BigInt],
        paramsValue: [buf.address],
      });
      expect(addr).toBe(6); // C read what JavaScript wrote, through the numeric address
      ffi.load({
        library: "nkb-test-libc",
        funcName: "memset",
        retType: ffi.DataType.BigInt,
        paramsType: [ffi.DataType.BigInt, ffi.DataType.I32, ffi.DataType.U64],
        paramsValue: [buf.address, 0x41, 3],
      });
      expect(buf.bytes.toString("ascii", 0, 6)).toBe("AAAkit"); // JavaScript sees what C wrote
    } finally {
      buf.free();
    }
  });
});

describe("ELF objects", () => {
  it("pod-state.ts names every map keyed by a pod's host ifindex, so DEL and GC forget a pod everywhere", () => {
    // In the node's objects and the socket bypass's, every hash map keyed by a u32 is
    // keyed by a host ifindex (Service translation's are not: a backend's id is a u32).
    const object = (file: string) => readObject(fs.readFileSync(path.join(repoRoot, "dist/bpf", file)));
    const files = ["bpf_lxc.o", "bpf_lxc_ct.o", "bpf_host.o", "bpf_host_ct.o", "bpf_sock.o"];
    const hashes: number[] = [BPF_MAP_TYPE.HASH, BPF_MAP_TYPE.PERCPU_HASH];
    const byIfindex = new Set(
      files.flatMap((file) =>
        object(file)
          .maps.filter((m) => hashes.includes(m.type) && m.keySize === 4)
          .map((m) => m.name),
      ),
    );
    const listed = POD_STATE.filter((s) => s.byIfindex).map((s) => s.map);
    expect(listed).toContain(SVC_MAP_NAMES.pods);
    expect(listed.filter((name) => name !== SVC_MAP_NAMES.pods).sort()).toEqual([...byIfindex].sort());
    expect([...byIfindex]).toEqual(expect.arrayContaining([SOCK_MAP_NAMES.pods, SOCK_MAP_NAMES.stats]));
  });

  it("bpf_lxc.o has from_pod and src_check (a pod runs one of them), pod_ingress, pod_policy, the shared maps and a GPL license", () => {
    const spec = readObject(objects.variants.memory.lxc);
    expect(spec.license).toBe("GPL");
    expect(spec.programs.map((p) => [p.name, p.section])).toEqual([
      [PROGRAM_NAMES.fromPod, "tc/from_pod"],
      [PROGRAM_NAMES.sourceCheck, "tc/src_check"],
      [PROGRAM_NAMES.podPolicy, "tc/pod_policy"],
      [PROGRAM_NAMES.podIngress, "tc/pod_ingress"],
    ]);
    expect(spec.maps.find((m) => m.name === MAP_NAMES.bandwidth)).toMatchObject({
      type: BPF_MAP_TYPE.HASH,
      keySize: 4,
      valueSize: 88,
    });
    expect(spec.maps.map((m) => m.name).sort()).toEqual(
      [...Object.values(MAP_NAMES), ...Object.values(POLICY_MAP_NAMES)].sort(),
    );
    expect(spec.maps.find((m) => m.name === POLICY_MAP_NAMES.peers)).toMatchObject({
      type: BPF_MAP_TYPE.LPM_TRIE,
      keySize: 28,
      valueSize: 8,
      flags: BPF_MISC.F_NO_PREALLOC,
    });
    expect(spec.maps.find((m) => m.name === POLICY_MAP_NAMES.ports)).toMatchObject({
      type: BPF_MAP_TYPE.LPM_TRIE,
      keySize: 12,
      valueSize: 8,
    });
    expect(spec.maps.find((m) => m.name === POLICY_MAP_NAMES.tiers)).toMatchObject({
      type: BPF_MAP_TYPE.HASH,
      keySize: 8,
      valueSize: 40,
      maxEntries: 32768,
    });
    expect(spec.maps.find((m) => m.name === POLICY_MAP_NAMES.events)).toMatchObject({
      type: BPF_MAP_TYPE.QUEUE,
      keySize: 0,
      valueSize: 64,
      maxEntries: 4096,
    });
    const endpoints = spec.maps.find((m) => m.name === MAP_NAMES.endpoints);
    expect(endpoints).toEqual({
      name: "nkc_endpoints",
      type: BPF_MAP_TYPE.HASH,
      keySize: 20,
      valueSize: 8,
      maxEntries: 16384,
      flags: 0,
    });
    expect(spec.maps.find((m) => m.name === MAP_NAMES.cluster)).toMatchObject({
      type: BPF_MAP_TYPE.LPM_TRIE,
      keySize: 24,
      flags: BPF_MISC.F_NO_PREALLOC,
    });
    expect(spec.maps.find((m) => m.name === MAP_NAMES.flowTables)).toMatchObject({
      type: BPF_MAP_TYPE.ARRAY_OF_MAPS,
      keySize: 4,
      valueSize: 4,
      maxEntries: 16384,
    });
    expect(spec.maps.find((m) => m.name === MAP_NAMES.flowOwner)).toMatchObject({
      type: BPF_MAP_TYPE.HASH,
      keySize: 4,
      valueSize: 16,
    });
    expect(spec.maps.find((m) => m.name === MAP_NAMES.flowPool)).toMatchObject({
      type: BPF_MAP_TYPE.ARRAY,
      keySize: 4,
      valueSize: 16,
      maxEntries: 1,
    });
    expect(spec.maps.find((m) => m.name === MAP_NAMES.flowStats)).toMatchObject({
      type: BPF_MAP_TYPE.PERCPU_HASH,
      valueSize: 16,
    });
    expect(spec.maps.find((m) => m.name === MAP_NAMES.counters)).toMatchObject({
      type: BPF_MAP_TYPE.PERCPU_HASH,
      valueSize: 64,
    });
    const fromPod = spec.programs[0];
    expect(fromPod?.instructions.length).toBeGreaterThan(0);
    const relocatedMaps = new Set(fromPod?.relocations.map((r) => r.mapName));
    // Every shared map but the pools' bookkeeping, which only userspace reads.
    const programMaps = [...Object.values(MAP_NAMES), ...Object.values(POLICY_MAP_NAMES)].filter(
      (n) => n !== MAP_NAMES.flowPool && n !== POLICY_MAP_NAMES.ctPool,
    );
    expect([...relocatedMaps].sort()).toEqual(programMaps.sort());
    for (const r of fromPod?.relocations ?? []) expect(fromPod?.instructions[r.insnIndex * 8]).toBe(0x18); // ld_imm64
    expect(fromPod?.kfuncCalls).toEqual([]);
  });

  it("bpf_host.o has the uplink's programs (host_in; host_out for NetworkPolicy) and the WireGuard device's", () => {
    const spec = readObject(objects.variants.memory.host);
    expect(spec.programs.map((p) => p.name)).toEqual([
      PROGRAM_NAMES.hostIn,
      PROGRAM_NAMES.hostOut,
      PROGRAM_NAMES.wgIn,
      PROGRAM_NAMES.wgOut,
    ]);
    expect(spec.programs[0]?.relocations.length).toBeGreaterThan(0);
    expect(spec.programs[2]?.relocations.length).toBeGreaterThan(0);
  });

  it("the conntrack objects call the conntrack kfuncs, found as calls to undefined symbols", () => {
    for (const object of [objects.variants.conntrack.lxc, objects.variants.conntrack.host]) {
      const [program] = readObject(object).programs;
      const names = new Set(program?.kfuncCalls.map((c) => c.name));
      expect([...names].sort()).toEqual(["bpf_ct_release", "bpf_skb_ct_lookup"]);
      for (const c of program?.kfuncCalls ?? []) expect(program?.instructions[c.insnIndex * 8]).toBe(0x85); // call
    }
  });

  it("finds kernel functions by name in BTF, and in split (module) BTF after its base", () => {
    // A two-type BTF: INT "int" (id 1), FUNC "f1" (id 2); a split BTF on it: FUNC "f2" (id 3).
    const btf = (types: Buffer, strings: string) => {
      const str = Buffer.from(strings);
      const hdr = Buffer.alloc(24);
      hdr.writeUInt16LE(0xeb9f, 0);
      hdr.writeUInt8(1, 2);
      hdr.writeUInt32LE(24, 4);
      hdr.writeUInt32LE(0, 8);
      hdr.writeUInt32LE(types.length, 12);
      hdr.writeUInt32LE(types.length, 16);
      hdr.writeUInt32LE(str.length, 20);
      return Buffer.concat([hdr, types, str]);
    };
    const type = (nameOff: number, kind: number, extra: number) => {
      const t = Buffer.alloc(12 + extra);
      t.writeUInt32LE(nameOff, 0);
      t.writeUInt32LE(kind << 24, 4);
      return t;
    };
    const base = btf(Buffer.concat([type(1, 1, 4), type(5, 12, 0)]), "\0int\0f1\0");
    const found = findFunctions(base, new Set(["f1", "f2"]));
    expect(found.ids).toEqual(new Map([["f1", 2]]));
    expect(found.base).toEqual({ typeCount: 2, stringsLength: 8 });
    const split = btf(type(8 + 1, 12, 0), "\0f2\0");
    expect(findFunctions(split, new Set(["f2"]), found.base).ids).toEqual(new Map([["f2", 3]]));
  });

  it("rejects what is not a BPF object", () => {
    expect(() => readObject(Buffer.from("hello"))).toThrow(/not an ELF file/);
    expect(() => readObject(fs.readFileSync("/bin/true"))).toThrow(/not a BPF object/);
  });
});

describe("maps and programs in a private bpffs", () => {
  let bpffs: TestBpffs | undefined;
  afterEach(() => {
    bpffs?.release();
    bpffs = undefined;
  });

  it("loads every program against maps pinned under <root>/maps and reuses them on the next load", () => {
    bpffs = TestBpffs.mount();
    const first = loadNodePrograms(bpffs.root, objects, { clusterCidrs: ["10.244.0.0/16"] });
    const ids: number[] = [];
    try {
      const pinned = [...Object.values(MAP_NAMES), ...Object.values(POLICY_MAP_NAMES), NETWORK_CIDRS_SPEC.name];
      expect(fs.readdirSync(mapsDir(bpffs.root)).sort()).toEqual(pinned.sort());
      ids.push(...pinnedIds(bpffs.root));
      expectHandlesArePins(first.maps, bpffs.root);
      first.endpoints.upsert("10.244.1.10", { hostIfindex: 7, datapath: "veth" });
    } finally {
      first.close();
    }
    const second = loadNodePrograms(bpffs.root, objects, { clusterCidrs: ["10.244.0.0/16", "fd00:244::/48"] });
    try {
      expect(pinnedIds(bpffs.root)).toEqual(ids);
      expectHandlesArePins(second.maps, bpffs.root);
      expect(second.endpoints.get("10.244.1.10")).toEqual({ hostIfindex: 7, datapath: "veth" });
      expect(second.programs.fromPod.fd).toBeGreaterThan(0);
    } finally {
      second.close();
    }
    const maps = openNodeMaps(bpffs.root);
    try {
      expect([...maps.endpoints.keys()].length).toBe(1);
    } finally {
      maps.close();
    }
  });

  it("gets every program through the verifier in less than half of what it allows one (1,000,000 instructions)", () => {
    // A change that multiplies the verifier's paths fails here, with room to spare, rather
    // than on a kernel that counts a little differently. NetworkPolicy's judgment is a
    // subprogram for this (bpf/lib/policy.h): inlined twice into nkc_pod_policy it took 714k.
    for (const natCheck of conntrackUnavailable() ? (["memory"] as const) : NAT_CHECKS) {
      bpffs = TestBpffs.mount();
      const node = loadNodePrograms(bpffs.root, objects, { clusterCidrs: ["10.244.0.0/16"], natChecks: [natCheck] });
      try {
        const counts = Object.entries(node.programs).map(([name, p]) => [name, p.verifiedInstructions()] as const);
        expect(
          counts.filter(([, n]) => n > 500_000),
          `${natCheck}: ${JSON.stringify(counts)}`,
        ).toEqual([]);
        expect(counts.every(([, n]) => n > 0)).toBe(true);
      } finally {
        node.close();
        bpffs.release();
        bpffs = undefined;
      }
    }
  });

  it("loads the programs again when a map pin is gone, so no program keeps a map nobody else sees", () => {
    bpffs = TestBpffs.mount();
    const opts = { clusterCidrs: ["10.244.0.0/16"] };
    const first = loadNodePrograms(bpffs.root, objects, opts);
    const before = { prog: first.programs.fromPod.id(), map: idOf(first.maps.endpoints) };
    first.close();
    // The pinned programs alone keep the old endpoint map alive; its pin is gone.
    fs.unlinkSync(path.join(mapsDir(bpffs.root), MAP_NAMES.endpoints));
    const second = loadNodePrograms(bpffs.root, objects, opts);
    const after = { prog: second.programs.fromPod.id(), map: idOf(second.maps.endpoints) };
    second.close();
    expect(after.map).not.toBe(before.map);
    expect(after.prog).not.toBe(before.prog);
    // And the next load, with everything pinned, opens those same programs and maps.
    const third = loadNodePrograms(bpffs.root, objects, opts);
    try {
      expect({ prog: third.programs.fromPod.id(), map: idOf(third.maps.endpoints) }).toEqual(after);
    } finally {
      third.close();
    }
  });

  it("refuses a pinned map whose layout differs", () => {
    bpffs = TestBpffs.mount();
    const wrong = BpfMap.create({
      name: "nkc_endpoints",
      type: BPF_MAP_TYPE.LRU_HASH,
      keySize: 8,
      valueSize: 8,
      maxEntries: 16384,
      flags: 0,
    });
    try {
      pinObject(wrong.fd, path.join(mapsDir(bpffs.root), "nkc_endpoints"));
    } finally {
      wrong.close();
    }
    expect(() => loadNodePrograms(bpffs?.root ?? "", objects, { clusterCidrs: [] })).toThrow(
      /nkc_endpoints does not match this version: type 9 \(want 1\), keySize 8 \(want 20\)/,
    );
  });

  it("puts the verifier log into a load failure", () => {
    // "exit" alone: R0 is never written, which the verifier rejects.
    const exitOnly = Buffer.from([0x95, 0, 0, 0, 0, 0, 0, 0]);
    let error: unknown;
    try {
      loadProgram(
        { name: "nkb_bad", section: "tc", instructions: exitOnly, relocations: [], kfuncCalls: [] },
        { license: "GPL", maps: new Map() },
      );
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ProgLoadError);
    expect((error as ProgLoadError).code).toBe("EACCES");
    expect((error as ProgLoadError).message).toMatch(/nkb_bad: verifier log:[\s\S]*R0 !read_ok/);
  });
});

function idOf(map: BpfMap): number {
  return mapId(map.fd);
}

/** The ids of the node's maps as pinned, in MAP_NAMES order. */
function pinnedIds(root: string): number[] {
  return Object.values(MAP_NAMES).map((name) => {
    const map = BpfMap.openPinned(mapPin(root, name));
    try {
      return idOf(map);
    } finally {
      map.close();
    }
  });
}

/** Every map the loaded programs hand out (NodeMaps' fields, named as in MAP_NAMES; the
 * flow-table pool's three sit in `flows`) is the one pinned under its name. */
function expectHandlesArePins(maps: NodeMaps, root: string): void {
  const { flows, policy, ...rest } = maps;
  const handles: Record<string, BpfMap> = {
    ...rest,
    flowTables: flows.tables,
    flowOwner: flows.owners,
    flowPool: flows.pool,
  };
  const named = Object.entries(MAP_NAMES).filter(([field]) => handles[field] !== undefined);
  expect(named.length).toBe(Object.keys(handles).length);
  const policyNamed = Object.entries(POLICY_MAP_NAMES).map(([role, name]) => [
    policy[role as keyof typeof policy],
    name,
  ]);
  for (const [handle, name] of [...named.map(([field, name]) => [handles[field], name]), ...policyNamed]) {
    const pinned = BpfMap.openPinned(mapPin(root, name as string));
    try {
      expect(idOf(handle as BpfMap), name as string).toBe(idOf(pinned));
    } finally {
      pinned.close();
    }
  }
}

describe("bpffs", () => {
  it("mounts a private bpffs (mode 0700) once and nests roots inside an existing one", () => {
    const outer = TestBpffs.mount();
    try {
      expect(isBpffs(outer.root)).toBe(true);
      expect(fs.statSync(outer.root).mode & 0o777).toBe(0o700);
      expect(ensureBpffs(outer.root)).toBe(false); // already mounted: reused
      const nested = path.join(outer.root, "netkit-cni");
      expect(ensureBpffs(nested)).toBe(false); // a directory inside it, no new mount
      expect(isBpffs(nested)).toBe(true);
    } finally {
      outer.release();
    }
    expect(isBpffs(outer.root)).toBe(false);
  });
});
