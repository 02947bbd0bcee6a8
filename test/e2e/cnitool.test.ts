/**
 * cnitool (libcni 1.1.2, built from Debian's source) drives the installed plugin from a
 * conflist: ADD gives each pod its addresses, pods reach each other and the node, CHECK
 * passes with the cached prevResult, DEL cleans up, and a second DEL (libcni has dropped
 * its cache, so no prevResult) succeeds with nothing left behind.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Fixture, ping } from "../support/harness";
import { cnitoolPath, leftovers, NOTHING_LEFT, Sandbox } from "./sandbox";

const NODE_V4 = "10.231.0.1";
const SUBNET4 = "10.231.1.0/24";
const SUBNET6 = "fd31:1::/64";

describe("cnitool drives netkit-cni", () => {
  let fx: Fixture;
  let sb: Sandbox;
  let node: string;
  let ipamDir: string;
  let cnitool: string;

  beforeEach(async () => {
    cnitool = cnitoolPath();
    fx = new Fixture();
    node = fx.makeNode(NODE_V4, "fd31::1");
    sb = new Sandbox(fx, node);
    await sb.start();
    const dataDir = path.join(sb.dir, "ipam");
    ipamDir = path.join(dataDir, "nke2e");
    sb.writeConflist("10-nke2e", {
      cniVersion: "1.0.0",
      name: "nke2e",
      plugins: [
        {
          type: "netkit-cni",
          datapath: "auto",
          bpffsRoot: fx.bpffsRoot,
          hostInterface: "uplink0",
          clusterCIDRs: [SUBNET4, SUBNET6],
          logFile: path.join(sb.dir, "plugin.log"),
          logLevel: "debug",
          ipam: { type: "netkit-cni", ranges: [[{ subnet: SUBNET4 }], [{ subnet: SUBNET6 }]], dataDir },
        },
      ],
    });
  });

  afterEach(() => fx.cleanup());

  const cni = (verb: string, pod: string) =>
    sb.run(cnitool, [verb, "nke2e", `/run/netns/${pod}`], {
      env: { NETCONFPATH: sb.confDir, CNI_PATH: sb.binDir, CNI_IFNAME: "eth0" },
    });

  it("ADD, reach, CHECK, DEL, DEL again: nothing left", () => {
    const pods = [fx.makeNetns("nkp"), fx.makeNetns("nkp")];
    const t0 = Date.now();
    const results = pods.map((pod) => {
      const r = cni("add", pod);
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as {
        cniVersion: string;
        interfaces: { name: string; sandbox?: string }[];
        ips: { address: string; interface: number }[];
      };
    });
    const addMs = (Date.now() - t0) / pods.length;

    const [a, b] = results.map((r) => {
      expect(r.cniVersion).toBe("1.0.0");
      expect(r.ips.map((i) => i.address)).toEqual([
        expect.stringMatching(/^10\.231\.1\.\d+\/32$/),
        expect.stringMatching(/^fd31:1::[0-9a-f]+\/128$/),
      ]);
      expect(r.interfaces.find((i) => i.sandbox)?.name).toBe("eth0");
      return r.ips.map((i) => i.address.split("/")[0] as string);
    }) as [string[], string[]];

    // Each pod has its address on eth0, reaches the other (v4 and v6) and the node.
    expect(ping(pods[0] as string, b[0] as string)).toBe(true);
    expect(ping(pods[0] as string, b[1] as string)).toBe(true);
    expect(ping(pods[1] as string, a[0] as string)).toBe(true);
    expect(ping(pods[1] as string, NODE_V4)).toBe(true);

    // libcni cached each result; CHECK sends it as prevResult.
    const cached = fs.readdirSync(path.join(sb.cacheDir, "results"));
    expect(cached).toHaveLength(2);
    for (const pod of pods) expect(cni("check", pod).status).toBe(0);

    const left = leftovers(node, fx.bpffsRoot, ipamDir);
    expect(left.devices).toHaveLength(2);
    expect(left.pins).toHaveLength(2);
    expect(left.mapEntries).toHaveLength(4);
    expect(left.ipFiles).toHaveLength(4);

    const t1 = Date.now();
    for (const pod of pods) expect(cni("del", pod).status).toBe(0);
    const delMs = (Date.now() - t1) / pods.length;
    expect(fs.readdirSync(path.join(sb.cacheDir, "results"))).toEqual([]);
    // A second DEL: no cached result, so no prevResult; still success.
    for (const pod of pods) expect(cni("del", pod).status).toBe(0);
    expect(leftovers(node, fx.bpffsRoot, ipamDir)).toEqual(NOTHING_LEFT);
    console.log(`cnitool: ADD ${addMs.toFixed(0)} ms, DEL ${delMs.toFixed(0)} ms per pod`);
  });

  it("CHECK fails once the pod's device is gone", () => {
    const pod = fx.makeNetns("nkp");
    expect(cni("add", pod).status).toBe(0);
    const [dev] = leftovers(node, fx.bpffsRoot, ipamDir).devices;
    sb.must("ip", ["link", "del", dev as string]);
    const check = cni("check", pod);
    expect(check.status).not.toBe(0);
    expect(check.stderr).toMatch(/eth0|nk[0-9a-f]+|device/);
    expect(cni("del", pod).status).toBe(0);
    expect(leftovers(node, fx.bpffsRoot, ipamDir)).toEqual(NOTHING_LEFT);
  });
});
