import type { V1Node } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { nodeFacts } from "../../src/agent/kube/node-facts";
import { masqueradeRuleset } from "../../src/agent/masquerade/table";
import { counterPath } from "../../src/agent/metrics";
import { AGENT_USAGE, AgentUsageError, parseAgentOptions } from "../../src/agent/options";
import { type ConnectedRoute, planRoutes } from "../../src/agent/routes/plan";
import { parseListenAddress } from "../../src/agent/server";
import { parseSubnet } from "../../src/cni/address";

const node = (name: string, podCIDRs: unknown, ips: unknown[]): V1Node =>
  ({
    metadata: { name },
    spec: { podCIDRs },
    status: { addresses: ips.map((address) => ({ type: "InternalIP", address })) },
  }) as V1Node;

const facts = (n: V1Node) => {
  const f = nodeFacts(n);
  if (!f) throw new Error("no facts");
  return f;
};

const link = (cidr: string, ifindex: number): ConnectedRoute => {
  const s = parseSubnet(cidr);
  if (!s.ok) throw new Error(cidr);
  return { subnet: s.subnet, ifindex };
};

describe("a Node as the agent reads it", () => {
  it("keeps well-formed pod CIDRs and InternalIPs, canonical, and names the rest", () => {
    const f = facts(
      node("n", ["10.1.2.0/24", "FD00:0:0:1::/64", "10.1.3.1/24", "x", 5], ["10.0.0.2", "fd00::0002", "1.2.3"]),
    );
    expect(f.podCidrs.map((c) => c.text)).toEqual(["10.1.2.0/24", "fd00:0:0:1::/64"]);
    expect(f.internalIPs.map((a) => a.text)).toEqual(["10.0.0.2", "fd00::2"]);
    expect(f.problems).toEqual([
      'pod CIDR "10.1.3.1/24" is malformed',
      'pod CIDR "x" is malformed',
      "pod CIDR 5 is malformed",
      'InternalIP "1.2.3" is malformed',
    ]);
    // The older single spec.podCIDR; a node without a name is none.
    expect(facts({ metadata: { name: "m" }, spec: { podCIDR: "10.9.0.0/24" } } as V1Node).podCidrs).toHaveLength(1);
    expect(nodeFacts({ metadata: {} } as V1Node)).toBeUndefined();
  });
});

describe("the routes to other nodes", () => {
  const self = facts(node("self", ["10.1.1.0/24", "fd01:1::/64"], ["10.0.0.1"]));
  const connected = [link("10.0.0.0/24", 2), link("fd00::/64", 2), link("10.0.0.0/16", 3)];
  const cluster = [link("10.1.0.0/16", 0).subnet, link("fd01::/16", 0).subnet];

  it("routes each pod CIDR via the InternalIP of its family on the most specific link", () => {
    const plan = planRoutes(
      self,
      [facts(node("b", ["10.1.2.0/24", "fd01:2::/64"], ["10.0.0.2", "fd00::2"]))],
      connected,
      cluster,
    );
    expect(plan.routes).toEqual([
      { node: "b", dst: "10.1.2.0/24", family: 2, gateway: "10.0.0.2", ifindex: 2 },
      { node: "b", dst: "fd01:2::/64", family: 10, gateway: "fd00::2", ifindex: 2 },
    ]);
    expect(plan.peers).toEqual([{ node: "b", state: "routed", why: [] }]);
  });

  it("reports instead of routing: off-link, no address of the family, overlaps, no pod CIDR", () => {
    const plan = planRoutes(
      self,
      [
        facts(node("far", ["10.1.4.0/24"], ["192.0.2.4"])),
        facts(node("v4only", ["fd01:5::/64"], ["10.0.0.5"])),
        facts(node("mine", ["10.1.1.128/25"], ["10.0.0.6"])),
        facts(node("twin1", ["10.1.7.0/24"], ["10.0.0.7"])),
        facts(node("twin2", ["10.1.7.0/25"], ["10.0.0.8"])),
        facts(node("new", [], ["10.0.0.9"])),
        facts(node("astray", ["10.2.0.0/24", "fd01:9::/64"], ["10.0.0.10", "fd00::10"])),
      ],
      connected,
      cluster,
    );
    expect(plan.routes).toEqual([
      // The part of a node's ranges that is the cluster's is still routed.
      { node: "astray", dst: "fd01:9::/64", family: 10, gateway: "fd00::10", ifindex: 2 },
    ]);
    expect(Object.fromEntries(plan.peers.map((p) => [p.node, p.state]))).toEqual({
      far: "unreachable",
      v4only: "no-address",
      mine: "conflict",
      twin1: "conflict",
      twin2: "conflict",
      new: "no-pod-cidr",
      astray: "outside-cluster",
    });
    expect(plan.peers.find((p) => p.node === "astray")?.why).toEqual([
      "pod CIDR 10.2.0.0/24 lies outside the cluster CIDRs (--cluster-cidr)",
    ]);
  });
});

describe("masquerade", () => {
  it("masquerades pod sources to anything outside the cluster and the exceptions, per family", () => {
    const text = masqueradeRuleset(["10.244.0.0/16", "fd00:10::/56"], ["192.0.2.0/24"]);
    expect(text).toContain("elements = { 10.244.0.0/16, 192.0.2.0/24 }");
    expect(text).toContain("ip saddr @pods4 ip daddr != @direct4 masquerade");
    expect(text).toContain("ip6 saddr @pods6 ip6 daddr != @direct6 masquerade");
    expect(masqueradeRuleset(["10.244.0.0/16"], [])).not.toContain("ip6 saddr");
  });
});

describe("agent options and small parts", () => {
  it("reads its flags, passes install's on, and refuses what it cannot use", () => {
    const o = parseAgentOptions(
      ["--cluster-cidr=10.0.0.0/8", "--datapath", "veth", "--no-portmap"],
      { NODE_NAME: "n1" },
      "h",
    );
    expect(o).toMatchObject({
      nodeName: "n1",
      clusterCidrs: ["10.0.0.0/8"],
      installArgs: ["--datapath=veth", "--no-portmap"],
    });
    expect(parseAgentOptions(["--cluster-cidr=10.0.0.0/8"], {}, "host-1").nodeName).toBe("host-1");
    // NetworkPolicy is enforced unless the admin turns it off; Service translation is opt-in.
    expect(parseAgentOptions(["--cluster-cidr=10.0.0.0/8"], {}, "h")).toMatchObject({
      networkPolicy: true,
      serviceTranslation: false,
    });
    expect(parseAgentOptions(["--cluster-cidr=10.0.0.0/8", "--network-policy=false"], {}, "h").networkPolicy).toBe(
      false,
    );
    expect(() => parseAgentOptions(["--cluster-cidr=10.0.0.0/8", "--network-policy=maybe"], {}, "h")).toThrow(
      /true or false/,
    );
    expect(() => parseAgentOptions([], {}, "h")).toThrow(/--cluster-cidr/);
    expect(() => parseAgentOptions(["--cluster-cidr=10.0.0.0/8", "--masquerade=no"], {}, "h")).toThrow(AgentUsageError);
    expect(() => parseAgentOptions(["--cluster-cidr=10.0.0.0/8", "--datapath=x"], {}, "h")).toThrow(/datapath/);
    expect(() => parseAgentOptions(["--cluster-cidr=10.0.0.0/8", "--pod-cidr=10.1.0.0/24"], {}, "h")).toThrow(
      /unknown option/,
    );
  });

  it("declares every flag once: parsed as its usage says, install's passed on in the order typed", () => {
    const o = parseAgentOptions(
      ["--cluster-cidr=10.0.0.0/8,fd00::/48", "--force", "--mtu", "1400", "--skip-binary", "--resync-seconds=5"],
      {},
      "h",
    );
    expect(o).toMatchObject({
      clusterCidrs: ["10.0.0.0/8", "fd00::/48"],
      installArgs: ["--force", "--mtu=1400"],
      installBinary: false,
      resyncSeconds: 5,
    });
    // A list default is never shared: what one parse passed on is not in the next.
    expect(parseAgentOptions(["--cluster-cidr=10.0.0.0/8"], {}, "h").installArgs).toEqual([]);
    expect(() => parseAgentOptions(["--cluster-cidr=10.0.0.0/8", "--resync-seconds=0"], {}, "h")).toThrow(
      "--resync-seconds must be a positive number",
    );
    expect(() => parseAgentOptions(["--cluster-cidr=10.0.0.0/8", "--encryption=ipsec"], {}, "h")).toThrow(
      "--encryption must be none or wireguard",
    );
    for (const line of [
      "  --encryption-strict true|false  never send",
      "  --skip-binary  ",
      "--no-portmap, --force",
      "--teardown is deferred here",
    ]) {
      expect(AGENT_USAGE.replace(/\s+/g, " ")).toContain(line.replace(/\s+/g, " "));
    }
  });

  it("names each counter's path and reason; reads listen addresses", () => {
    expect(counterPath("redirectedFib")).toEqual({ path: "redirected", reason: "fib" });
    expect(counterPath("passedStackUnproven")).toEqual({ path: "stack", reason: "unproven" });
    expect(counterPath("passedStack")).toEqual({ path: "stack", reason: "default" });
    expect(counterPath("droppedSpoofed")).toEqual({ path: "dropped", reason: "spoofed" });
    expect(parseListenAddress(":9968")).toEqual({ host: undefined, port: 9968 });
    expect(parseListenAddress("[::1]:80")).toEqual({ host: "::1", port: 80 });
    expect(() => parseListenAddress("9968")).toThrow();
  });
});
