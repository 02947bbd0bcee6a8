/**
 * A node running an older build of our programs: the next ADD pins the new version's
 * programs and switches the uplink's links and every pod's link with BPF_LINK_UPDATE. The
 * link (and so the hook) stays the same object throughout; only its program changes,
 * with no moment when the device has none.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { attachTcx, BpfLink } from "../../src/bpf/links";
import { loadNodePrograms, type NodeObjects, objectsVersion } from "../../src/bpf/node";
import { attachUplink, switchEndpoints } from "../../src/datapath/fastpath";
import { inNetns } from "../../src/sys/netns";
import { TestBpffs } from "./helpers/bpffs";
import { TestNetns } from "./helpers/netns";
import { buildObjects } from "./helpers/objects";

let ns: TestNetns;
let bpffs: TestBpffs;
let v1: NodeObjects;
let v2: NodeObjects;

beforeAll(() => {
  v1 = buildObjects();
  // A different build: the same code with one byte appended changes the version hash.
  v2 = { lxc: v1.lxc, host: Buffer.concat([v1.host, Buffer.from([0])]) };
  ns = TestNetns.create("up");
  bpffs = TestBpffs.mount();
  ns.ip("link", "add", "nkbup0", "type", "veth", "peer", "name", "nkbup1");
  ns.ip("link", "set", "nkbup0", "up");
  ns.ip("link", "add", "nkbpod0", "type", "veth", "peer", "name", "nkbpod1");
  ns.ip("link", "set", "nkbpod0", "up");
}, 60_000);

/** The pinned link's own id and its program's: an in-place switch keeps the first. */
function linkState(pin: string): { linkId: number; programId: number } {
  const link = BpfLink.openPinned(pin);
  try {
    return { linkId: link.id(), programId: link.programId() };
  } finally {
    link.close();
  }
}

afterAll(() => {
  bpffs?.release();
  ns?.destroy();
});

it("switches the uplink link to the new version's program atomically and drops the old pins", () => {
  const uplink = { name: "nkbup0", index: ns.link("nkbup0").ifindex };
  const pin = path.join(bpffs.root, "uplink", "nkbup0", "ingress");
  const first = loadNodePrograms(bpffs.root, v1, { clusterCidrs: [] });
  expect(first.loaded).toBe(true);
  inNetns(ns.path, () => attachUplink(bpffs.root, uplink, "ingress", first.programs.hostIn));
  const before = linkState(pin);
  expect(before.programId).toBe(first.programs.hostIn.id());

  // The same version again: nothing changes, programs come from their pins.
  const again = loadNodePrograms(bpffs.root, v1, { clusterCidrs: [] });
  expect(again.loaded).toBe(false);
  expect(again.programs.hostIn.id()).toBe(first.programs.hostIn.id());
  inNetns(ns.path, () => attachUplink(bpffs.root, uplink, "ingress", again.programs.hostIn));
  expect(linkState(pin)).toEqual(before);

  const second = loadNodePrograms(bpffs.root, v2, { clusterCidrs: [] });
  expect(second.programs.hostIn.id()).not.toBe(first.programs.hostIn.id());
  inNetns(ns.path, () => attachUplink(bpffs.root, uplink, "ingress", second.programs.hostIn));
  const after = linkState(pin);
  expect(after.linkId).toBe(before.linkId);
  expect(after.programId).toBe(second.programs.hostIn.id());
  expect(fs.readdirSync(path.join(bpffs.root, "programs"))).toEqual([objectsVersion(v2)]);
  for (const n of [first, again, second]) n.close();
});

it("moves every pod's link to the new build's program in place", () => {
  const v3 = { lxc: Buffer.concat([v1.lxc, Buffer.from([0])]), host: v1.host };
  const pin = path.join(bpffs.root, "endpoints", "nkbpod0", "from_pod");
  const first = loadNodePrograms(bpffs.root, v1, { clusterCidrs: [] });
  const link = inNetns(ns.path, () => attachTcx(first.programs.fromPod, ns.link("nkbpod0").ifindex, "ingress"));
  link.pin(pin);
  const linkId = link.id();
  link.close();
  expect(linkState(pin)).toEqual({ linkId, programId: first.programs.fromPod.id() });

  const next = loadNodePrograms(bpffs.root, v3, { clusterCidrs: [] });
  expect(next.loaded).toBe(true);
  expect(next.programs.fromPod.id()).not.toBe(first.programs.fromPod.id());
  switchEndpoints(bpffs.root, next.programs.fromPod);
  expect(linkState(pin)).toEqual({ linkId, programId: next.programs.fromPod.id() });
  for (const n of [first, next]) n.close();
  fs.rmSync(path.dirname(pin), { recursive: true });
});
