/**
 * Builds meeting on one node. The next ADD of a newer build pins its programs and
 * switches the uplink's link and every pod's link with BPF_LINK_UPDATE: the link (and so
 * the hook) stays the same object, only its program changes, with no moment when the
 * device has none. An older build still running during the upgrade uses the newer
 * programs and removes nothing of them.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { MAX_ENDPOINTS } from "../../src/bpf/fastpath/abi";
import type { MapSpec } from "../../src/bpf/loader/elf";
import { mapPin } from "../../src/bpf/loader/layout";
import { attachTcx, BpfLink } from "../../src/bpf/loader/links";
import { BpfMap } from "../../src/bpf/loader/maps";
import { pinObject } from "../../src/bpf/loader/pins";
import { loadNodePrograms, RETIRED_MAP_PINS } from "../../src/bpf/node";
import { buildName, type NodeObjects } from "../../src/bpf/objects";
import { POLICY_MAP_NAMES } from "../../src/bpf/policy/abi";
import { POLICY_CT_SPEC } from "../../src/bpf/policy/ct";
import { attachUplink, switchEndpoints } from "../../src/datapath/node-datapath";
import { BPF_MAP_TYPE } from "../../src/sys/bpf-uapi";
import { inNetns } from "../../src/sys/netns";
import { buildObjects } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { TestNetns } from "./helpers/test-netns";

let ns: TestNetns;
let built: NodeObjects;

/** Another build of the same code: `epoch`, and objects that hash differently. */
function build(epoch: number, tag: number): NodeObjects {
  const mark = (b: Buffer) => Buffer.concat([b, Buffer.from([tag])]);
  const { conntrack, memory } = built.variants;
  return {
    variants: {
      conntrack: { lxc: mark(conntrack.lxc), host: mark(conntrack.host) },
      memory: { lxc: mark(memory.lxc), host: mark(memory.host) },
    },
    epoch,
  };
}

beforeAll(() => {
  built = buildObjects();
  ns = TestNetns.create("up");
  ns.ip("link", "add", "nkbup0", "type", "veth", "peer", "name", "nkbup1");
  ns.ip("link", "set", "nkbup0", "up");
  ns.ip("link", "add", "nkbpod0", "type", "veth", "peer", "name", "nkbpod1");
  ns.ip("link", "set", "nkbpod0", "up");
}, 60_000);

afterAll(() => ns?.destroy());

/** The pinned link's own id and its program's: an in-place switch keeps the first. */
function linkState(pin: string): { linkId: number; programId: number } {
  const link = BpfLink.openPinned(pin);
  try {
    return { linkId: link.id(), programId: link.programId() };
  } finally {
    link.close();
  }
}

const pinnedSets = (root: string) => fs.readdirSync(path.join(root, "programs")).sort();

function withBpffs(fn: (root: string) => void): void {
  const bpffs = TestBpffs.mount();
  try {
    fn(bpffs.root);
  } finally {
    bpffs.release();
  }
}

it("switches the uplink link to a newer build's program atomically and drops the older pins", () =>
  withBpffs((root) => {
    const v1 = build(100, 1);
    const v2 = build(200, 2);
    const uplink = { name: "nkbup0", index: ns.link("nkbup0").ifindex };
    const pin = path.join(root, "uplink", "nkbup0", "ingress");
    const first = loadNodePrograms(root, v1, { clusterCidrs: [] });
    expect(first.loaded).toBe(true);
    inNetns(ns.path, () => attachUplink(root, uplink, "ingress", first.programs.hostIn));
    const before = linkState(pin);
    expect(before.programId).toBe(first.programs.hostIn.id());

    // The same build again: nothing changes, programs come from their pins.
    const again = loadNodePrograms(root, v1, { clusterCidrs: [] });
    expect(again.loaded).toBe(false);
    expect(again.programs.hostIn.id()).toBe(first.programs.hostIn.id());
    inNetns(ns.path, () => attachUplink(root, uplink, "ingress", again.programs.hostIn));
    expect(linkState(pin)).toEqual(before);

    const second = loadNodePrograms(root, v2, { clusterCidrs: [] });
    expect(second.programs.hostIn.id()).not.toBe(first.programs.hostIn.id());
    inNetns(ns.path, () => attachUplink(root, uplink, "ingress", second.programs.hostIn));
    const after = linkState(pin);
    expect(after.linkId).toBe(before.linkId);
    expect(after.programId).toBe(second.programs.hostIn.id());
    expect(pinnedSets(root)).toEqual([`${buildName(v2)}-${second.natCheck}`]);
    for (const n of [first, again, second]) n.close();
  }));

it("moves every pod's link to the newer build's program in place", () =>
  withBpffs((root) => {
    const pin = path.join(root, "endpoints", "nkbpod0", "from_pod");
    const first = loadNodePrograms(root, build(100, 1), { clusterCidrs: [] });
    const ifindex = ns.link("nkbpod0").ifindex;
    const link = inNetns(ns.path, () => attachTcx(first.programs.fromPod, ifindex, "ingress"));
    link.pin(pin);
    const linkId = link.id();
    link.close();
    expect(linkState(pin)).toEqual({ linkId, programId: first.programs.fromPod.id() });

    const next = loadNodePrograms(root, build(200, 2), { clusterCidrs: [] });
    expect(next.loaded).toBe(true);
    expect(next.programs.fromPod.id()).not.toBe(first.programs.fromPod.id());
    switchEndpoints(root, next);
    expect(linkState(pin)).toEqual({ linkId, programId: next.programs.fromPod.id() });
    for (const n of [first, next]) n.close();
  }));

it("an older build running beside a newer one uses the newer programs and removes nothing", () =>
  withBpffs((root) => {
    const newer = loadNodePrograms(root, build(200, 2), { clusterCidrs: [] });
    const newerSet = pinnedSets(root);
    const older = loadNodePrograms(root, build(100, 1), { clusterCidrs: [] });
    try {
      expect(older.loaded).toBe(false);
      expect(older.superseded).toBe(true);
      expect(older.programs.fromPod.id()).toBe(newer.programs.fromPod.id());
      expect(older.programs.hostIn.id()).toBe(newer.programs.hostIn.id());
      expect(pinnedSets(root)).toEqual(newerSet);
      // And the newer build, loading again, finds its programs where it left them.
      const again = loadNodePrograms(root, build(200, 2), { clusterCidrs: [] });
      expect(again.loaded).toBe(false);
      expect(again.superseded).toBe(false);
      again.close();
    } finally {
      older.close();
      newer.close();
    }
  }));

it("takes new names for maps whose layout changed, and drops an older build's pins of the old ones", () =>
  withBpffs((root) => {
    // What a build of 32-byte policy flow entries pinned: the tables' map of maps (its
    // inner template 32 bytes a value), their owners and the pool.
    const inner: MapSpec = { ...POLICY_CT_SPEC, valueSize: 32 };
    const olderTables = BpfMap.create({
      name: "nkc_pol_ct_tables",
      type: BPF_MAP_TYPE.ARRAY_OF_MAPS,
      keySize: 4,
      valueSize: 4,
      maxEntries: MAX_ENDPOINTS,
      flags: 0,
      inner,
    });
    const olderOwner = BpfMap.create({ ...POLICY_CT_SPEC, name: "nkc_pol_ct_owner", type: BPF_MAP_TYPE.HASH });
    const olderPool = BpfMap.create({ ...POLICY_CT_SPEC, name: "nkc_pol_ct_pool", type: BPF_MAP_TYPE.HASH });
    try {
      for (const [m, name] of [
        [olderTables, "nkc_pol_ct_tables"],
        [olderOwner, "nkc_pol_ct_owner"],
        [olderPool, "nkc_pol_ct_pool"],
      ] as const)
        pinObject(m.fd, mapPin(root, name));
      expect(RETIRED_MAP_PINS).toEqual(["nkc_pol_ct_tables", "nkc_pol_ct_owner", "nkc_pol_ct_pool"]);
      // Under the old names this build's programs would meet 32-byte entries: the verifier
      // refuses them, and every ADD of the upgrade would fail.
      const node = loadNodePrograms(root, build(300, 3), { clusterCidrs: [] });
      try {
        expect(node.loaded).toBe(true);
        for (const name of RETIRED_MAP_PINS) expect(fs.existsSync(mapPin(root, name)), name).toBe(false);
        expect(fs.existsSync(mapPin(root, POLICY_MAP_NAMES.ctTables))).toBe(true);
      } finally {
        node.close();
      }
    } finally {
      for (const m of [olderTables, olderOwner, olderPool]) m.close();
    }
  }));
