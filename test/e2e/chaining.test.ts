/**
 * netkit-cni chained with the reference plugins portmap and bandwidth in one conflist,
 * driven by cnitool (libcni passes each plugin's result to the next as prevResult, and
 * runs DEL in reverse order). Two nodes in namespaces joined by a wire: a hostPort on
 * node A reaches the pod from node A itself, from node B, and from a pod on node B. The
 * last one matters: the pod's reply is addressed to a pod on another node, which the
 * fast path would forward straight to the wire; it must go through the stack instead so
 * conntrack reverses portmap's DNAT (else the client sees a reply from the wrong address
 * and the connection never completes). DEL removes portmap's chain, bandwidth's ifb
 * device and qdiscs, and our devices, pins, map entries and addresses.
 */
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { countersOf } from "../../src/datapath/node-state";
import { startServer, tcpRequest } from "../integration/tcp";
import { Fixture, inNs } from "../support/harness";
import { type ClusterNode, ifindexOf, makeCluster } from "../support/topology";
import { cnitoolPath, leftovers, NOTHING_LEFT, Sandbox } from "./sandbox";

const HOST_PORT = 8080;
const POD_PORT = 80;

interface ChainPod {
  node: ClusterNode;
  netns: string;
  v4: string;
  hostDevice: string;
}

describe("chained with portmap and bandwidth", () => {
  let fx: Fixture;
  let a: ClusterNode;
  let b: ClusterNode;
  const sandboxes = new Map<ClusterNode, Sandbox>();
  let cnitool: string;

  beforeEach(async () => {
    cnitool = cnitoolPath();
    fx = new Fixture();
    [a, b] = makeCluster(fx);
    for (const node of [a, b]) {
      const sb = new Sandbox(fx, node.netns);
      await sb.start();
      const { cniVersion: _v, name: _n, ...plugin } = node.conf;
      sb.writeConflist("10-chain", {
        cniVersion: "1.0.0",
        name: "chain",
        plugins: [
          plugin,
          { type: "portmap", capabilities: { portMappings: true } },
          { type: "bandwidth", capabilities: { bandwidth: true } },
        ],
      });
      sandboxes.set(node, sb);
    }
  });

  afterEach(() => {
    sandboxes.clear();
    fx.cleanup();
  });

  const capArgs = (portMappings: unknown[]) =>
    JSON.stringify({
      portMappings,
      // bits/s and bits: 1 Gbit/s with a generous burst, so shaping does not slow the test.
      bandwidth: {
        ingressRate: 1_000_000_000,
        ingressBurst: 100_000_000,
        egressRate: 1_000_000_000,
        egressBurst: 100_000_000,
      },
    });

  const cni = (node: ClusterNode, verb: string, pod: string, portMappings: unknown[] = []) =>
    (sandboxes.get(node) as Sandbox).run(cnitool, [verb, "chain", `/run/netns/${pod}`], {
      env: {
        NETCONFPATH: "/etc/cni/net.d",
        CNI_PATH: "/opt/cni/bin",
        CNI_IFNAME: "eth0",
        CAP_ARGS: capArgs(portMappings),
      },
    });

  function addPod(node: ClusterNode, portMappings: unknown[] = []): ChainPod {
    const netns = fx.makeNetns("nkp");
    const r = cni(node, "add", netns, portMappings);
    if (r.status !== 0) throw new Error(`cnitool add on ${node.name}: ${r.stderr}${r.stdout}`);
    const result = JSON.parse(r.stdout) as {
      ips: { address: string }[];
      interfaces: { name: string; sandbox?: string }[];
    };
    const v4 = result.ips.find((i) => !i.address.includes(":"))?.address.split("/")[0] ?? "";
    const hostDevice = result.interfaces.find((i) => !i.sandbox && i.name.startsWith("nk"))?.name ?? "";
    return { node, netns, v4, hostDevice };
  }

  const natRules = (node: ClusterNode) => inNs(node.netns, "iptables-save", ["-t", "nat"]);

  it("hostPort reaches the pod from the node, another node and a remote pod; DEL cleans up", async () => {
    const mapping = [{ hostPort: HOST_PORT, containerPort: POD_PORT, protocol: "tcp" }];
    const t0 = Date.now();
    const server = addPod(a, mapping);
    const client = addPod(b);
    const addMs = (Date.now() - t0) / 2;
    await startServer(fx, server.netns, "0.0.0.0", POD_PORT);

    // The chain ran: portmap's DNAT chain and bandwidth's shaping exist.
    expect(natRules(a)).toMatch(/CNI-DN-[0-9a-f]+/);
    expect(natRules(a)).toContain(`--to-destination ${server.v4}:${POD_PORT}`);
    expect(inNs(a.netns, "tc", ["qdisc", "show", "dev", server.hostDevice])).toMatch(/tbf|ingress/);
    expect(inNs(a.netns, "ip", ["-o", "link", "show"])).toMatch(/bwp[0-9a-f]+/);

    // CHECK through the whole chain (each plugin checks with the cached result). Debian's
    // portmap 1.1.1 fails CHECK for any pod with port mappings wherever ip6tables exists
    // (it looks for its IPv4 rules in the IPv6 table: containernetworking/plugins#819), so
    // for the server only that exact failure is tolerated; ours ran before it and passed.
    const check = cni(b, "check", client.netns);
    expect(check.status, check.stderr).toBe(0);
    const checkServer = cni(a, "check", server.netns, mapping);
    if (checkServer.status !== 0)
      expect(checkServer.stderr).toMatch(/^could not check ipv6 dnat: rule .* not found in table nat/);

    // From node A itself (OUTPUT DNAT), from node B, from a pod on node B.
    expect(tcpRequest(a.netns, a.wireV4, HOST_PORT)).toMatch(/^from /);
    expect(tcpRequest(b.netns, a.wireV4, HOST_PORT)).toBe(`from ${b.wireV4}`);
    const before = countersOf(a.bpffsRoot, ifindexOf(a.netns, server.hostDevice));
    const t1 = Date.now();
    for (let i = 0; i < 5; i++) expect(tcpRequest(client.netns, a.wireV4, HOST_PORT)).toBe(`from ${client.v4}`);
    const connectMs = (Date.now() - t1) / 5;
    // The replies of those connections left through the stack (reverse DNAT), counted.
    const after = countersOf(a.bpffsRoot, ifindexOf(a.netns, server.hostDevice));
    expect(Number(after?.passedStackUnproven ?? 0)).toBeGreaterThan(Number(before?.passedStackUnproven ?? 0));
    // Pod to pod without NAT still works across nodes.
    expect(tcpRequest(client.netns, server.v4, POD_PORT)).toBe(`from ${client.v4}`);

    // DEL (libcni: bandwidth, portmap, then netkit-cni).
    const t2 = Date.now();
    for (const [node, pod] of [
      [a, server],
      [b, client],
    ] as const) {
      const del = cni(node, "del", pod.netns, node === a ? mapping : []);
      expect(del.status, del.stderr).toBe(0);
    }
    const delMs = (Date.now() - t2) / 2;
    for (const node of [a, b]) {
      const nat = natRules(node);
      expect(nat).not.toMatch(/CNI-DN-/);
      expect(nat).not.toMatch(/--to-destination/);
      const links = inNs(node.netns, "ip", ["-o", "link", "show"]);
      expect(links).not.toMatch(/bwp[0-9a-f]+/);
      expect(inNs(node.netns, "tc", ["qdisc", "show"])).not.toMatch(/tbf/);
      const ipamDir = path.join((node.conf.ipam as { dataDir: string }).dataDir, "chain");
      expect(leftovers(node.netns, node.bpffsRoot, ipamDir)).toEqual(NOTHING_LEFT);
    }
    console.log(
      `chain: ADD ${addMs.toFixed(0)} ms per pod, hostPort connection from a remote pod ${connectMs.toFixed(0)} ms, DEL ${delMs.toFixed(0)} ms per pod`,
    );
  });
});
