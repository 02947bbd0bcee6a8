/**
 * The bandwidth capability through a real runtime library: cnitool (libcni) with
 * CAP_ARGS, a chained conflist whose netkit-cni declares `capabilities: {"bandwidth":
 * true}` (as `netkit-cni install` writes it) and portmap after it. libcni hands the
 * capability only to plugins that declare it, as runtimeConfig.bandwidth: netkit-cni
 * puts the pod's limits in its map, CHECK finds them, DEL removes them; bad values fail
 * the ADD with code 7 naming the field and leave nothing behind.
 */
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openNodeMaps, podLimits } from "../../src/bpf/index";
import { ifindexHolders } from "../../src/bpf/pod-state";
import { Fixture } from "../support/harness";
import { ifindexOf } from "../support/topology";
import { cnitoolPath, leftovers, NOTHING_LEFT, Sandbox } from "./sandbox";

const SUBNET4 = "10.232.1.0/24";
/**
 * What containerd sends for kubernetes.io/{ingress,egress}-bandwidth 10M and 20M:
 * go-cni's BandWidth struct has no JSON tags, so the keys are capitalised (the reference
 * plugin reads them through Go's case-insensitive matching), and its burst is 2^32 - 1.
 */
const CONTAINERD = {
  IngressRate: 10_000_000,
  IngressBurst: 4294967295,
  EgressRate: 20_000_000,
  EgressBurst: 4294967295,
};

describe("the bandwidth capability through cnitool", () => {
  let fx: Fixture;
  let sb: Sandbox;
  let node: string;
  let ipamDir: string;
  let cnitool: string;

  beforeEach(async () => {
    cnitool = cnitoolPath();
    fx = new Fixture();
    node = fx.makeNode("10.232.0.1", "fd32::1");
    sb = new Sandbox(fx, node);
    await sb.start();
    const dataDir = path.join(sb.dir, "ipam");
    ipamDir = path.join(dataDir, "nkbw");
    sb.writeConflist("10-nkbw", {
      cniVersion: "1.0.0",
      name: "nkbw",
      plugins: [
        {
          type: "netkit-cni",
          capabilities: { bandwidth: true },
          datapath: "auto",
          bpffsRoot: fx.bpffsRoot,
          hostInterface: "uplink0",
          clusterCIDRs: [SUBNET4],
          logFile: path.join(sb.dir, "plugin.log"),
          ipam: { type: "netkit-cni", ranges: [[{ subnet: SUBNET4 }]], dataDir },
        },
        { type: "portmap", capabilities: { portMappings: true } },
      ],
    });
  });

  afterEach(() => fx.cleanup());

  const cni = (verb: string, pod: string, bandwidth: unknown) =>
    sb.run(cnitool, [verb, "nkbw", `/run/netns/${pod}`], {
      env: {
        NETCONFPATH: sb.confDir,
        CNI_PATH: sb.binDir,
        CNI_IFNAME: "eth0",
        CAP_ARGS: JSON.stringify({ bandwidth, portMappings: [] }),
      },
    });

  const limitsOf = (hostIfindex: number) => {
    const maps = openNodeMaps(fx.bpffsRoot);
    try {
      return { pod: podLimits(maps.bandwidth, hostIfindex), all: ifindexHolders(maps.bandwidth) };
    } finally {
      maps.close();
    }
  };

  it("ADD puts the runtime's limits in the map, CHECK finds them, DEL removes them", () => {
    const pod = fx.makeNetns("nkp");
    const add = cni("add", pod, CONTAINERD);
    expect(add.status, add.stderr).toBe(0);
    const result = JSON.parse(add.stdout) as { interfaces: { name: string; sandbox?: string }[] };
    const hostDevice = result.interfaces.find((i) => !i.sandbox)?.name ?? "";
    const limits = limitsOf(ifindexOf(node, hostDevice));
    expect(limits.pod).toMatchObject({
      mode: "police",
      ingress: { rate: 10_000_000, burst: 4294967295 },
      egress: { rate: 20_000_000, burst: 4294967295 },
    });

    const check = cni("check", pod, CONTAINERD);
    expect(check.status, check.stderr).toBe(0);
    // The runtime asking other limits than the pod was given: CHECK says so.
    const differs = cni("check", pod, { ...CONTAINERD, EgressRate: 30_000_000 });
    expect(differs.status).not.toBe(0);
    expect(differs.stderr + differs.stdout).toContain("egress is 20000000 bit/s");

    const del = cni("del", pod, CONTAINERD);
    expect(del.status, del.stderr).toBe(0);
    expect(leftovers(node, fx.bpffsRoot, ipamDir)).toEqual(NOTHING_LEFT);
    expect(limitsOf(0).all).toEqual([]);
  });

  it("refuses a rate without a burst with code 7 naming the field, leaving nothing behind", () => {
    const pod = fx.makeNetns("nkp");
    const add = cni("add", pod, { egressRate: 20_000_000 });
    expect(add.status).not.toBe(0);
    // cnitool prints the plugin's message only (the code, 7, is the integration tests').
    expect(add.stderr).toContain('failed (add): "runtimeConfig.bandwidth.egressBurst" must be set');
    expect(leftovers(node, fx.bpffsRoot, ipamDir)).toEqual(NOTHING_LEFT);
  });
});
