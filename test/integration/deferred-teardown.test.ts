/**
 * `"teardown": "deferred"`: DEL cuts the pod off and frees what it held at once, and
 * leaves its device pair retired (down, relabelled) for the pod netns's teardown, GC or
 * an ADD of the same attachment to delete (src/datapath/retired.ts). On the suite's
 * datapath, with the built executable and host-local IPAM.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { ErrorCode } from "../../src/cni/errors";
import { endpointMapEntries, pinnedEndpointDevices } from "../../src/datapath/node-state";
import { deleteRetiredDevices } from "../../src/datapath/retired";
import { RtnlSocket } from "../../src/netlink/socket";
import { openNetns } from "../../src/sys/netns";
import { useTestNode } from "../support/fixtures";
import {
  allocatedIps,
  BINARY,
  type Fixture,
  hostDev,
  inNs,
  type PluginRun,
  ping,
  pluginLinks,
  podIps,
  runPlugin,
  vethConf,
  waitUntil,
} from "../support/harness";

const NODE_V4 = "10.212.255.1";
const NODE_V6 = "fd10:212::1";
/** The only IPv4 address the network hands out: a DEL'd pod's next owner gets it. */
const ONLY_V4 = "10.212.0.7";

let fx: Fixture;
let node: string;
let conf: Record<string, unknown>;
let dataDir: string;

useTestNode({ v4: NODE_V4, v6: NODE_V6, dataDirPrefix: "nkt-ipam-" }, (test) => {
  ({ fx, node, dataDir } = test);
  conf = vethConf({
    bpffsRoot: fx.bpffsRoot,
    subnet4: "10.212.0.0/24",
    rangeStart4: ONLY_V4,
    subnet6: "fd10:212:0:1::/64",
    dataDir,
    logFile: path.join(dataDir, "plugin.log"),
    extra: { teardown: "deferred" },
  });
});

const attachment = (containerId: string, netns: string) => ({
  containerId,
  netns: `/run/netns/${netns}`,
  ifname: "eth0",
});

function add(containerId: string, netns: string, c = conf): PluginRun {
  return runPlugin(node, "ADD", attachment(containerId, netns), c);
}

function del(containerId: string, netns: string, added: PluginRun, c = conf): PluginRun {
  return runPlugin(node, "DEL", attachment(containerId, netns), { ...c, prevResult: added.json });
}

/** The node's view of a device: up or not, its alias, and the routes through it. */
function device(name: string) {
  const [link] = JSON.parse(inNs(node, "ip", ["-j", "link", "show", "dev", name])) as {
    flags: string[];
    ifalias?: string;
  }[];
  const routes = [
    ...(JSON.parse(inNs(node, "ip", ["-j", "route", "show", "dev", name])) as unknown[]),
    ...(JSON.parse(inNs(node, "ip", ["-j", "-6", "route", "show", "dev", name])) as { dst: string }[]).filter(
      (r) => !r.dst.startsWith("fe80:"),
    ),
  ];
  return { up: link?.flags.includes("UP") ?? false, alias: link?.ifalias ?? "", routes };
}

const deviceOf = (address: string) =>
  (JSON.parse(inNs(node, "ip", ["-j", "route", "get", address])) as { dev: string }[])[0]?.dev;

describe('DEL with "teardown": "deferred"', () => {
  it("cuts the pod off and frees its addresses, pins and entries at once, and leaves the pair to its netns's teardown", () => {
    const pod = fx.makeNetns();
    const a = add("pod-a", pod);
    expect(a.status, a.stdout).toBe(0);
    const dev = hostDev(a);
    const ips = podIps(a);
    expect(ping(node, ips.v4)).toBe(true);
    expect(ping(node, ips.v6)).toBe(true);

    const d = del("pod-a", pod, a);
    expect(d.status, d.stdout).toBe(0);
    // Retired: still there, but down, relabelled, with no route through it.
    const retired = device(dev);
    expect(retired.up).toBe(false);
    expect(retired.alias).toBe("netkit-del:nktest/eth0/pod-a");
    expect(retired.routes).toEqual([]);
    expect(ping(node, ips.v4)).toBe(false);
    expect(ping(node, ips.v6)).toBe(false);
    // What the pod held is free: its addresses, its pins, its endpoint entries.
    expect(allocatedIps(dataDir)).toEqual([]);
    expect(pinnedEndpointDevices(fx.bpffsRoot)).not.toContain(dev);
    expect([...endpointMapEntries(fx.bpffsRoot).keys()]).toEqual([]);
    // The pod end is down with it: nothing the pod sends leaves.
    expect(inNs(pod, "ip", ["-o", "link", "show", "eth0"])).toContain("NO-CARRIER");
    // `netkit-cni status` counts it, apart from the live pods' devices.
    const status = JSON.parse(inNs(node, BINARY, ["status", "--bpffs-root", fx.bpffsRoot, "--json"])) as {
      endpoints: { devices: number; retired: number };
    };
    expect(status.endpoints).toMatchObject({ devices: 0, retired: 1 });

    // The runtime's teardown of the pod's netns takes the pair along.
    fx.deleteNetns(pod);
    waitUntil(`${dev} gone with its netns`, () => !pluginLinks(node).includes(dev));
  });

  it("lets a new pod take the DEL'd pod's address at once, while the old pair still exists", () => {
    const oldPod = fx.makeNetns();
    const old = add("old", oldPod);
    expect(old.status, old.stdout).toBe(0);
    expect(podIps(old).v4).toBe(ONLY_V4);
    expect(del("old", oldPod, old).status).toBe(0);

    const newPod = fx.makeNetns();
    const next = add("new", newPod);
    expect(next.status, next.stdout).toBe(0);
    expect(podIps(next).v4).toBe(ONLY_V4);
    // The old pair lives on (its netns does), and the address leads to the new pod only.
    expect(pluginLinks(node).sort()).toEqual([hostDev(old), hostDev(next)].sort());
    expect(deviceOf(ONLY_V4)).toBe(hostDev(next));
    expect(ping(node, ONLY_V4)).toBe(true);
    expect(ping(node, podIps(next).v6)).toBe(true);
    expect(ping(newPod, NODE_V4)).toBe(true);
  });

  it("is idempotent, and an ADD of the same attachment in the same netns takes its names back", () => {
    const pod = fx.makeNetns();
    const first = add("again", pod);
    expect(first.status, first.stdout).toBe(0);
    const dev = hostDev(first);
    expect(del("again", pod, first).status).toBe(0);
    const second = del("again", pod, first);
    expect(second.status, second.stdout).toBe(0);
    expect(device(dev).alias).toBe("netkit-del:nktest/eth0/again");
    // CHECK of a DEL'd attachment fails: its device is no longer labelled as the pod's.
    const check = runPlugin(node, "CHECK", attachment("again", pod), { ...conf, prevResult: first.json });
    expect(check.json?.code, check.stdout).toBe(ErrorCode.CheckMismatch);
    expect(check.json?.msg).toContain("retired by a DEL of again/eth0");

    // A runtime reconnecting a live container: the same ID, ifname and netns.
    const readded = add("again", pod);
    expect(readded.status, readded.stdout).toBe(0);
    expect(hostDev(readded)).toBe(dev);
    const live = device(dev);
    expect(live.up).toBe(true);
    expect(live.alias).toBe("netkit-cni:nktest/eth0/again");
    expect(ping(node, podIps(readded).v4)).toBe(true);
    expect(inNs(pod, "ip", ["-o", "link"]).match(/ eth0@/g)).toHaveLength(1);
  });

  it("the sweep lets the event loop run between devices: the agent's handed verbs share its thread", async () => {
    const pods = ["sweep-a", "sweep-b", "sweep-c"].map((id) => {
      const netns = fx.makeNetns();
      const added = add(id, netns);
      expect(added.status, added.stdout).toBe(0);
      expect(del(id, netns, added).status).toBe(0);
      return hostDev(added);
    });
    expect(pluginLinks(node).sort()).toEqual([...pods].sort());
    const netnsFd = openNetns(`/run/netns/${node}`);
    const host = RtnlSocket.open(netnsFd);
    try {
      // What a turn of the event loop finds left: a verb handed over mid-sweep runs then.
      const leftAtTurns: number[] = [];
      let swept = false;
      const sweeping = deleteRetiredDevices(host);
      const watch = () => {
        if (swept) return;
        leftAtTurns.push(pluginLinks(node).length);
        setImmediate(watch);
      };
      setImmediate(watch);
      const sweep = await sweeping;
      swept = true;
      expect(sweep.deleted.sort()).toEqual([...pods].sort());
      expect(leftAtTurns.slice(0, 2)).toEqual([2, 1]);
    } finally {
      host.close();
      fs.closeSync(netnsFd);
    }
  });

  it("GC deletes this network's retired pairs and leaves another network's", () => {
    const other = {
      ...conf,
      name: "other",
      ipam: { ...(conf.ipam as object), ranges: [[{ subnet: "10.213.0.0/24" }]] },
    };
    const ours = fx.makeNetns();
    const theirs = fx.makeNetns();
    const a = add("ours", ours);
    const b = add("theirs", theirs, other);
    expect(a.status, a.stdout).toBe(0);
    expect(b.status, b.stdout).toBe(0);
    expect(del("ours", ours, a).status).toBe(0);
    expect(del("theirs", theirs, b, other).status).toBe(0);
    expect(pluginLinks(node).sort()).toEqual([hostDev(a), hostDev(b)].sort());

    const gc = runPlugin(node, "GC", {}, { ...conf, "cni.dev/valid-attachments": [] });
    expect(gc.status, gc.stdout).toBe(0);
    expect(pluginLinks(node)).toEqual([hostDev(b)]);
    // The pod end went with it.
    expect(inNs(ours, "ip", ["-o", "link"])).not.toContain("eth0");
  });
});
