/**
 * A cluster network with no hand-made routes: three node namespaces on one wire (a
 * bridge in a switch namespace), each with containerd's CRI (kubelet's path, cri/) and
 * `netkit-cni agent` against the stand-in API server. The agents write each node's
 * conflist and the routes between nodes; sandboxes on every node reach each other and the
 * nodes; a pod reaches a host outside the cluster CIDRs, which sees the node's address
 * (masquerade); a node deleted from the API loses its routes everywhere; an agent killed
 * with SIGKILL leaves traffic flowing, and when it comes back it removes the route of a
 * node deleted meanwhile; /metrics counts a ping's packets for the pod by its name.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type AgentNode, AgentProcess, agentNode, agentRoutes, eventually, scrape } from "../agent/agent-harness";
import { startServer, tcpRequest } from "../integration/tcp";
import { Fixture, inNs, TEST_DATAPATH, uniqueName } from "../support/harness";
import { StandInApiServer } from "../support/kube-apiserver";
import type { SandboxStatus } from "./cri/client";
import { buildPauseImage, CriContainerd } from "./cri/containerd";
import { Sandbox } from "./sandbox";

const CLUSTER = ["10.235.0.0/16", "fd35:0:0:100::/56"];
/** The DaemonSet's ConfigMap for this cluster. */
const CONFIG = {
  "cluster-cidr": CLUSTER.join(","),
  datapath: TEST_DATAPATH === "netkit" ? "netkit" : "auto",
};
const OUTSIDE4 = "10.236.0.100";
const OUTSIDE6 = "fd36::100";

interface ClusterNode {
  name: string;
  netns: string;
  v4: string;
  v6: string;
  pods4: string;
  pods6: string;
  agentNode: AgentNode;
  agentArgs: string[];
  agent: AgentProcess;
  cri: CriContainerd;
  cgroupParent: string;
}

interface Pod {
  id: string;
  name: string;
  v4: string;
  v6: string;
  netns: string;
}

function pings(nsPath: string, address: string): boolean {
  for (let i = 0; i < 3; i++) {
    const r = spawnSync("nsenter", [`--net=${nsPath}`, "ping", "-c1", "-W3", address], { encoding: "utf8" });
    if (r.status === 0) return true;
  }
  return false;
}

function podOf(name: string, s: SandboxStatus): Pod {
  const pid = (JSON.parse(s.info.info ?? "{}") as { pid?: number }).pid ?? 0;
  const ips = [s.status.network?.ip ?? "", ...(s.status.network?.additionalIps ?? []).map((a) => a.ip)];
  return {
    id: s.status.id,
    name,
    v4: ips.find((ip) => ip.includes(".")) ?? "",
    v6: ips.find((ip) => ip.includes(":")) ?? "",
    netns: `/proc/${pid}/ns/net`,
  };
}

let imageFx: Fixture;
let pauseImage: string;
beforeAll(() => {
  imageFx = new Fixture();
  pauseImage = buildPauseImage(imageFx);
});
afterAll(() => imageFx.cleanup());

describe("three nodes, a containerd and an agent each, no hand-made routes", () => {
  let fx: Fixture;
  let api: StandInApiServer;
  let nodes: ClusterNode[];
  let outside: string;

  const agentArgs = (fxRoot: string, dataDir: string) => [
    "--host-interface",
    "wire0",
    "--bpffs-root",
    fxRoot,
    "--data-dir",
    dataDir,
    "--resync-seconds",
    "2",
  ];

  beforeEach(async () => {
    fx = new Fixture();
    api = new StandInApiServer(fx.tempDir("nke2e-api-"), "cluster-token", 1000);
    await api.start();
    // The wire: a bridge in a switch namespace, a port per node and one for a host
    // outside the cluster (its own subnet, no routes to any pod).
    const sw = fx.makeNetns("nksw");
    inNs(sw, "ip", ["link", "add", "br0", "type", "bridge"]);
    inNs(sw, "ip", ["link", "set", "br0", "up"]);
    const plug = (netns: string, port: string, v4: string, v6: string) => {
      inNs(sw, "ip", ["link", "add", port, "type", "veth", "peer", "name", "wire0", "netns", `/run/netns/${netns}`]);
      inNs(sw, "ip", ["link", "set", port, "master", "br0", "up"]);
      inNs(netns, "ip", ["link", "set", "lo", "up"]);
      inNs(netns, "sysctl", ["-qw", "net.ipv6.conf.wire0.accept_dad=0"]);
      inNs(netns, "ip", ["addr", "add", v4, "dev", "wire0"]);
      inNs(netns, "ip", ["-6", "addr", "add", v6, "dev", "wire0", "nodad"]);
      inNs(netns, "ip", ["link", "set", "wire0", "up"]);
    };
    outside = fx.makeNetns("nkout");
    plug(outside, "out", `${OUTSIDE4}/24`, `${OUTSIDE6}/64`);

    nodes = [];
    for (const i of [1, 2, 3]) {
      const name = `node-${i}`;
      const netns = fx.makeNetns(`nkn${i}`);
      const v4 = `10.236.0.${i}`;
      const v6 = `fd36::${i}`;
      plug(netns, `port${i}`, `${v4}/24`, `${v6}/64`);
      const pods4 = `10.235.${i}.0/24`;
      const pods6 = `fd35:0:0:10${i}::/64`;
      api.addNode({ name, podCIDRs: [pods4, pods6], internalIPs: [v4, v6] });

      const sb = new Sandbox(fx, netns);
      await sb.start({ privateRun: true });
      const binDir = path.join(sb.dir, "opt/cni/bin");
      const confDir = path.join(sb.dir, "etc-cni/net.d");
      fs.rmSync(path.join(binDir, "netkit-cni")); // the agent installs it, as on a node
      const an = agentNode(fx, api, netns, name, { confDir, binDir, mountNs: sb.mountNsPath });
      const root = `${fx.bpffsRoot}-${i}`;
      fx.extraBpffsRoots.push(root);
      const args = agentArgs(root, path.join(sb.dir, "ipam"));
      const agent = AgentProcess.start(fx, an, args, CONFIG);
      const cgroupParent = uniqueName("nkcri");
      sb.ownCgroup(cgroupParent);
      const cri = new CriContainerd(fx, sb, { binDir, confDir, pauseImage });
      nodes.push({ name, netns, v4, v6, pods4, pods6, agentNode: an, agentArgs: args, agent, cri, cgroupParent });
    }
    // The agents install the plugin and the conflist; then CRI finds its network ready.
    for (const n of nodes) {
      await eventually(
        `${n.name} synced`,
        () => scrape(n.agentNode, "/readyz")[0] === 200,
        60_000,
        () => n.agent.log,
      );
    }
    await Promise.all(nodes.map((n) => n.cri.start()));
  }, 300_000);

  afterEach(async () => {
    try {
      await Promise.all((nodes ?? []).map((n) => n.cri.kill("SIGTERM").catch(() => undefined)));
    } finally {
      await api.stop();
      fx.cleanup();
    }
  });

  async function runPod(n: ClusterNode, name: string): Promise<Pod> {
    const id = await n.cri.client.runPodSandbox({
      metadata: { name, uid: `uid-${name}`, namespace: "nke2e-agent", attempt: 0 },
      hostname: name,
      linux: { cgroupParent: `/${n.cgroupParent}` },
    });
    return podOf(name, await n.cri.client.podSandboxStatus(id));
  }

  it("pods reach each other, the nodes and the outside (masqueraded); routes follow the API; a dead agent stops nothing", async () => {
    const [n1, n2, n3] = nodes as [ClusterNode, ClusterNode, ClusterNode];
    // Every node routes the two others' pod CIDRs, both families, via their wire addresses.
    for (const n of nodes) {
      const others = nodes.filter((o) => o !== n);
      expect(agentRoutes(n.netns)).toEqual(
        others.flatMap((o) => [`${o.pods4} via ${o.v4}`, `${o.pods6} via ${o.v6}`]).sort(),
      );
    }
    const [p1, p2, p3] = await Promise.all([runPod(n1, "p1"), runPod(n2, "p2"), runPod(n3, "p3")]);
    expect(p1.v4.startsWith("10.235.1.") && p2.v4.startsWith("10.235.2.") && p3.v4.startsWith("10.235.3.")).toBe(true);

    // Pod to pod across nodes (no NAT: the server sees the pod's own address), both families.
    await startServer(fx, p2.netns, "::", 8080);
    expect(tcpRequest(p1.netns, p2.v4, 8080)).toBe(`from ${p1.v4}`);
    expect(tcpRequest(p3.netns, p2.v6, 8080)).toBe(`from ${p3.v6}`);
    expect(pings(p1.netns, p3.v4)).toBe(true);
    expect(pings(p3.netns, p1.v6)).toBe(true);
    // Node to remote pod, pod to remote node. The node's own TCP connection, both
    // families: its address is outside the cluster CIDRs, so node 2's masquerade of its
    // pods' traffic leaving the cluster must know the pod's answers for what they are.
    expect(pings(`/run/netns/${n1.netns}`, p3.v4)).toBe(true);
    expect(pings(p2.netns, n3.v4)).toBe(true);
    expect(tcpRequest(`/run/netns/${n1.netns}`, p2.v4, 8080)).toBe(`from ${n1.v4}`);
    expect(tcpRequest(`/run/netns/${n3.netns}`, p2.v6, 8080)).toBe(`from ${n3.v6}`);

    // Out of the cluster: the outside host has no route to any pod, and sees the node.
    await startServer(fx, `/run/netns/${outside}`, "::", 8081);
    expect(tcpRequest(p1.netns, OUTSIDE4, 8081)).toBe(`from ${n1.v4}`);
    expect(tcpRequest(p2.netns, OUTSIDE6, 8081)).toBe(`from ${n2.v6}`);

    // /metrics on node 1 counts the packets of a ping from p1, by the pod's name.
    const count = (text: string) =>
      text
        .split("\n")
        .filter((l) => l.startsWith('netkit_cni_pod_packets_total{pod="nke2e-agent/p1"'))
        .reduce((sum, l) => sum + Number(l.split(" ").at(-1)), 0);
    const before = count(scrape(n1.agentNode, "/metrics")[1]);
    spawnSync("nsenter", [`--net=${p1.netns}`, "ping", "-c5", "-i0.2", "-W2", p2.v4]);
    const after = count(scrape(n1.agentNode, "/metrics")[1]);
    expect(after - before).toBeGreaterThanOrEqual(5);

    // Node 3 leaves the API: its routes go on both other nodes within seconds.
    const t0 = Date.now();
    api.deleteNode("node-3");
    for (const n of [n1, n2]) {
      await eventually(
        `${n.name} without node-3's routes`,
        () => !agentRoutes(n.netns).some((r) => r.includes(n3.v4) || r.includes(n3.v6)),
        10_000,
      );
    }
    const removalMs = Date.now() - t0;
    expect(removalMs).toBeLessThan(10_000);
    console.log(`node-3's routes gone from both nodes ${removalMs} ms after its deletion`);

    // Node 1's agent dies hard: traffic goes on.
    await n1.agent.kill("SIGKILL");
    expect(tcpRequest(p1.netns, p2.v4, 8080)).toBe(`from ${p1.v4}`);
    expect(tcpRequest(p1.netns, OUTSIDE4, 8081)).toBe(`from ${n1.v4}`);
    // Node 2 is deleted while node 1 has no agent: its route stays there until one comes back.
    api.deleteNode("node-2");
    await new Promise((r) => setTimeout(r, 3000)); // a resync's time: nothing on node 1 acts
    expect(agentRoutes(n1.netns)).toEqual([`${n2.pods4} via ${n2.v4}`, `${n2.pods6} via ${n2.v6}`]);
    const restarted = AgentProcess.start(fx, n1.agentNode, n1.agentArgs, CONFIG);
    await eventually(
      "the stale routes gone",
      () => agentRoutes(n1.netns).length === 0,
      20_000,
      () => restarted.log,
    );

    await Promise.all(
      [
        [n1, p1],
        [n2, p2],
        [n3, p3],
      ].map(async ([n, p]) => {
        const node = n as ClusterNode;
        await node.cri.client.stopPodSandbox((p as Pod).id);
        await node.cri.client.removePodSandbox((p as Pod).id);
      }),
    );
    expect(await restarted.kill("SIGTERM")).toBe(0);
  }, 400_000);
});
