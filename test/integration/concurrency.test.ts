/**
 * Verbs racing each other on one node, as kubelet's runtime makes them: an ADD while a
 * DEL or GC prunes the endpoint entries of vanished devices, and an older build of the
 * executable still running while a newer one takes over the node (an upgrade in
 * progress). No interleaving may drop a live pod's entries, and no older build may take
 * the node back from a newer one.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { BpfLink } from "../../src/bpf/loader/links";
import { pinnedProgramSets } from "../../src/bpf/node";
import { buildName } from "../../src/bpf/objects";
import { endpointMapEntries } from "../../src/datapath/node-state";
import { readObjectsDir } from "../bpf/helpers/bpf-objects";
import { useCluster } from "../support/fixtures";
import {
  type Fixture,
  ping,
  pluginLinks,
  runPlugin,
  runPluginAsync,
  waitForFile,
  waitUntil,
  withPluginBinary,
} from "../support/harness";
import { addPod, type ClusterNode, delPod, ifindexOf, type Pod } from "../support/topology";

const OLDER = path.resolve(__dirname, "../../dist/older/netkit-cni");
const ITERATIONS = process.env.NETKIT_VM ? 8 : 30;

let fx: Fixture;
let a: ClusterNode;
let b: ClusterNode;

useCluster((cluster) => {
  ({ fx, a, b } = cluster);
});

/** The pod's addresses are in the endpoint map, pointing at its device. */
function expectEntries(pod: Pod): void {
  const entries = endpointMapEntries(pod.node.bpffsRoot);
  const ifindex = ifindexOf(pod.node.netns, pod.hostDevice);
  expect(entries.get(pod.v4)?.hostIfindex, `${pod.containerId} ${pod.v4}`).toBe(ifindex);
  expect(entries.get(pod.v6)?.hostIfindex, `${pod.containerId} ${pod.v6}`).toBe(ifindex);
}

describe("ADD racing DEL and GC", () => {
  it(`keeps every new pod's entries while vanished pods are pruned (${ITERATIONS} rounds)`, async () => {
    const live: Pod[] = [];
    for (let i = 0; i < ITERATIONS; i++) {
      // A pod whose netns vanished without a DEL: its device is gone, its entries are not.
      const ghost = addPod(fx, a, `ghost${i}`);
      fx.deleteNetns(ghost.netns);
      const netns = fx.makeNetns("nkp");
      const att = { containerId: `live${i}`, netns: `/run/netns/${netns}`, ifname: "eth0" };
      const valid = [...live, { containerId: att.containerId }].map((p) => ({
        containerID: p.containerId,
        ifname: "eth0",
      }));
      // DEL of the ghost without prevResult or netns (the runtime lost both) prunes dead
      // entries; GC does too. Both run while the new pod's ADD writes its entries.
      const [added, deleted, collected] = await Promise.all([
        runPluginAsync(a.netns, "ADD", att, a.conf),
        runPluginAsync(a.netns, "DEL", { containerId: ghost.containerId, netns: "", ifname: "eth0" }, a.conf),
        runPluginAsync(a.netns, "GC", {}, { ...a.conf, "cni.dev/valid-attachments": valid }),
      ]);
      expect(added.status, added.stdout).toBe(0);
      expect(deleted.status, deleted.stdout).toBe(0);
      expect(collected.status, collected.stdout).toBe(0);
      const ips = (added.json?.ips ?? []) as { address: string }[];
      const ip = (v6: boolean) => ips.find((x) => x.address.includes(":") === v6)?.address.split("/")[0] ?? "";
      const hostDevice = ((added.json?.interfaces ?? []) as { name: string }[])[0]?.name ?? "";
      const pod: Pod = {
        node: a,
        netns,
        containerId: att.containerId,
        v4: ip(false),
        v6: ip(true),
        hostDevice,
        add: added,
      };
      live.push(pod);
      for (const p of live) expectEntries(p);
    }
    // Exactly the live pods remain.
    expect(endpointMapEntries(a.bpffsRoot).size).toBe(2 * live.length);
    expect(ping((live[0] as Pod).netns, (live[live.length - 1] as Pod).v4)).toBe(true);
  }, 600_000);
});

describe("an ADD in the middle of a prune", () => {
  it("GC paused after listing the endpoint map: a pod added meanwhile keeps its entries, the vanished one loses its", async () => {
    const ghost = addPod(fx, a, "ghost");
    fx.deleteNetns(ghost.netns);
    // The kernel removes a deleted netns's devices in the background.
    waitUntil("the ghost's pair to go with its netns", () => !pluginLinks(a.netns).includes(ghost.hostDevice));
    const pause = path.join(fx.tempDir("nkt-pause-"), "prune-listed");
    const collecting = runPluginAsync(
      a.netns,
      "GC",
      {},
      { ...a.conf, "cni.dev/valid-attachments": [{ containerID: "late", ifname: "eth0" }] },
      { NETKIT_CNI_PAUSE_AT: "prune-listed", NETKIT_CNI_PAUSE_FILE: pause },
    );
    await waitForFile(pause);
    // GC has the map's entries (the ghost's) and not yet the live devices: the ADD's
    // device and entries both appear in between, the order a prune must survive.
    const late = addPod(fx, a, "late");
    fs.rmSync(pause);
    const collected = await collecting;
    expect(collected.status, collected.stdout).toBe(0);

    expectEntries(late);
    const entries = endpointMapEntries(a.bpffsRoot);
    expect(entries.has(ghost.v4)).toBe(false);
    expect(entries.has(ghost.v6)).toBe(false);
    const remote = addPod(fx, b, "remote");
    expect(ping(late.netns, remote.v4)).toBe(true);
  }, 120_000);
});

/** The program a pinned link runs. */
function programOf(pin: string): number {
  const link = BpfLink.openPinned(pin);
  try {
    return link.programId();
  } finally {
    link.close();
  }
}

/** ADDs of both executables at once on node A, as on a node mid-upgrade; each must succeed. */
async function mixedAdds(count: number): Promise<void> {
  const runs = await Promise.all(
    Array.from({ length: count }, (_, i) => {
      const netns = fx.makeNetns("nkp");
      const att = { containerId: `mixed${i}`, netns: `/run/netns/${netns}`, ifname: "eth0" };
      return i % 2
        ? runPluginAsync(a.netns, "ADD", att, a.conf)
        : withPluginBinary(OLDER, () => runPluginAsync(a.netns, "ADD", att, a.conf));
    }),
  );
  for (const r of runs) expect(r.status, r.stdout).toBe(0);
}

describe("an older build beside a newer one", () => {
  const uplinkPin = () => path.join(a.bpffsRoot, "uplink", "wire0", "ingress");
  const podLinkPins = () =>
    fs
      .readdirSync(path.join(a.bpffsRoot, "endpoints"))
      .map((dev) => path.join(a.bpffsRoot, "endpoints", dev, "from_pod"));

  it("the newer build taking over a node the older one runs, while older ADDs still arrive: every pod and the uplink end on the newer programs", async () => {
    if (!fs.existsSync(OLDER)) throw new Error(`${OLDER} is missing: make build-older`);
    const old0 = withPluginBinary(OLDER, () => addPod(fx, a, "old0"));
    const [older] = pinnedProgramSets(a.bpffsRoot);
    expect(older?.epoch).toBe(1);
    const olderUplinkProgram = programOf(uplinkPin());

    await mixedAdds(6);

    // The newer build's set is the only one left, and everything runs it.
    const sets = pinnedProgramSets(a.bpffsRoot);
    expect(sets).toHaveLength(1);
    expect(sets[0]?.epoch).toBeGreaterThan(1);
    const uplinkProgram = programOf(uplinkPin());
    expect(uplinkProgram).not.toBe(olderUplinkProgram);
    const pods = podLinkPins();
    expect(pods).toHaveLength(7);
    expect(new Set(pods.map(programOf)).size).toBe(1);
    // An older ADD after the takeover changes nothing of that.
    const old1 = withPluginBinary(OLDER, () => addPod(fx, a, "old1"));
    expect(pinnedProgramSets(a.bpffsRoot).map((s) => s.dir)).toEqual(sets.map((s) => s.dir));
    expect(programOf(uplinkPin())).toBe(uplinkProgram);
    expect(new Set(podLinkPins().map(programOf)).size).toBe(1);
    const remote = addPod(fx, b, "remote");
    expect(ping(old0.netns, old1.v4)).toBe(true);
    expect(ping(old1.netns, remote.v6)).toBe(true);
  }, 300_000);

  it("the older build's ADDs use the newer programs and never take the node back", async () => {
    if (!fs.existsSync(OLDER)) throw new Error(`${OLDER} is missing: make build-older`);
    const first = addPod(fx, a, "new1");
    const [newer] = pinnedProgramSets(a.bpffsRoot);
    expect(newer).toBeDefined();
    // The executable names its build by the digest the build computed and embedded; the
    // objects' own bytes give the same name.
    expect(newer?.build).toBe(buildName(readObjectsDir(path.resolve(__dirname, "../../dist/bpf"))));
    const uplinkProgram = programOf(uplinkPin());

    // Mid-upgrade: the older executable and the newer one add pods at the same time.
    await mixedAdds(6);
    const older = withPluginBinary(OLDER, () => addPod(fx, a, "old1"));

    // The newer build's programs are still the node's, pinned and running everywhere.
    expect(pinnedProgramSets(a.bpffsRoot).map((s) => s.dir)).toEqual([newer?.dir]);
    expect(programOf(uplinkPin())).toBe(uplinkProgram);
    const pods = podLinkPins();
    expect(pods).toHaveLength(8);
    const podPrograms = new Set(pods.map(programOf));
    expect(podPrograms.size).toBe(1);
    expect(programOf(path.join(a.bpffsRoot, "endpoints", first.hostDevice, "from_pod"))).toBe([...podPrograms][0]);
    // Pods made by either build reach each other and the other node.
    const remote = addPod(fx, b, "remote");
    expect(ping(older.netns, first.v4)).toBe(true);
    expect(ping(first.netns, older.v6)).toBe(true);
    expect(ping(older.netns, remote.v4)).toBe(true);
    // And the older build still deletes what it made.
    expect(withPluginBinary(OLDER, () => delPod(older)).status).toBe(0);
    expect(
      runPlugin(
        a.netns,
        "DEL",
        { containerId: "new1", netns: `/run/netns/${first.netns}`, ifname: "eth0" },
        { ...a.conf, prevResult: first.add.json },
      ).status,
    ).toBe(0);
  }, 300_000);
});
