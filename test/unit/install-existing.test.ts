/**
 * install's reading of a bridge/ptp config it takes over, and its advice: reuse the
 * network name and store, or addresses collide and the old pods' DEL releases nothing.
 */
import { describe, expect, it } from "vitest";
import { describe as describeConfig, takeoverAdvice } from "../../src/install/existing";

const bridgeList = {
  cniVersion: "1.0.0",
  name: "podnet",
  plugins: [
    {
      type: "bridge",
      isGateway: true,
      ipam: { type: "host-local", ranges: [[{ subnet: "10.231.90.0/24" }], [{ subnet: "fd31:90::/64" }]] },
    },
  ],
};

describe("recognising a config to take over", () => {
  it("reads a bridge conflist: its bridge (cni0 by default), IPAM, store (host-local's default) and subnets", () => {
    expect(describeConfig("10-bridge.conflist", bridgeList)).toEqual({
      file: "10-bridge.conflist",
      type: "bridge",
      network: "podnet",
      bridge: "cni0",
      ipamType: "host-local",
      dataDir: "/var/lib/cni/networks",
      subnets: ["10.231.90.0/24", "fd31:90::/64"],
    });
  });

  it("reads a single-plugin ptp .conf with the old subnet field", () => {
    const conf = {
      name: "p2p",
      type: "ptp",
      ipam: { type: "host-local", subnet: "10.1.0.0/24", dataDir: "/srv/ipam" },
    };
    expect(describeConfig("20-ptp.conf", conf)).toMatchObject({
      type: "ptp",
      bridge: undefined,
      dataDir: "/srv/ipam",
      subnets: ["10.1.0.0/24"],
    });
  });

  it("ignores other plugins and ours", () => {
    expect(describeConfig("a.conflist", { name: "x", plugins: [{ type: "macvlan" }] })).toBeUndefined();
    expect(describeConfig("a.conflist", { name: "x", plugins: [{ type: "netkit-cni" }] })).toBeUndefined();
    expect(describeConfig("a.conflist", "junk")).toBeUndefined();
  });
});

describe("advice", () => {
  const theirs = describeConfig("10-bridge.conflist", bridgeList);
  if (!theirs) throw new Error("not recognised");

  it("names the flags to pass when the name or store differ", () => {
    const a = takeoverAdvice(theirs, {
      name: "k8s-pod-network",
      dataDir: undefined,
      podCidrs: ["10.231.90.0/24", "fd31:90::/64"],
    });
    expect(a.notes).toEqual([
      'found 10-bridge.conflist: bridge network "podnet" (on cni0, host-local IPAM, store /var/lib/cni/networks, 10.231.90.0/24, fd31:90::/64)',
    ]);
    expect(a.warnings).toEqual([
      "to keep addresses disjoint from 10-bridge.conflist's pods and release theirs on DEL, reuse its network name and store: --network-name podnet --data-dir /var/lib/cni/networks",
    ]);
  });

  it("confirms the reuse when both match, and points at a subnet --pod-cidr leaves out", () => {
    const a = takeoverAdvice(theirs, {
      name: "podnet",
      dataDir: "/var/lib/cni/networks/",
      podCidrs: ["10.231.90.0/24"],
    });
    expect(a.notes[1]).toMatch(/^reusing its network name "podnet" and store \/var\/lib\/cni\/networks/);
    expect(a.warnings).toEqual(["10-bridge.conflist's pods are in fd31:90::/64, which --pod-cidr does not name"]);
  });

  it("warns when the old IPAM keeps no store we can share", () => {
    const dhcp = describeConfig("10-bridge.conflist", {
      name: "podnet",
      plugins: [{ type: "bridge", ipam: { type: "dhcp" } }],
    });
    if (!dhcp) throw new Error("not recognised");
    expect(takeoverAdvice(dhcp, { name: "podnet", dataDir: undefined, podCidrs: [] }).warnings[0]).toMatch(
      /uses dhcp IPAM, whose store netkit-cni cannot share/,
    );
  });
});
