/**
 * Pod traffic between nodes encrypted by `netkit-cni agent --encryption=wireguard`, on the
 * kernel that has the WireGuard module (Debian's 6.12; this lane's guest). Two nodes
 * joined by a wire, an agent each in its DaemonSet container (the manifest's ClusterRole
 * enforced: publishing the key needs its `patch`), netkit pods added with the conflist
 * the agent wrote. A capture on the wire is the judge: it may hold WireGuard's UDP and
 * the nodes' own traffic, never a packet from or to a pod address, never a marker string
 * a pod sent, from the first packet on, through a key rotation, and towards a node whose
 * key is gone (strict mode).
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WIREGUARD_KEY_ANNOTATION } from "../../src/agent/kube/node-facts";
import type { NodeStatus } from "../../src/cli/status";
import { type AgentNode, AgentProcess, agentNode, eventually, readJson, scrape } from "../agent/agent-harness";
import { countNetifRx, pingMany } from "../integration/netif-rx";
import { BINARY, Fixture, inNs, runPlugin } from "../support/harness";
import { StandInApiServer } from "../support/kube-apiserver";
import { netperf, startNetserver } from "../support/netperf";
import { addPod, CLUSTER_CIDRS, type ClusterNode, makeCluster, type Pod } from "../support/topology";

const MARKER = "NKWGMARK";
const MARKER_HEX = Buffer.from(MARKER).toString("hex");
const PORT = 51871;
const CONFIG = { "cluster-cidr": CLUSTER_CIDRS.join(","), datapath: "netkit", masquerade: "false" };

let fx: Fixture;
let api: StandInApiServer;
let a: ClusterNode;
let b: ClusterNode;
const agents = new Map<string, { node: AgentNode; process: AgentProcess; cluster: ClusterNode }>();

const nodeName = (n: ClusterNode) => `node-${n.name}`;
const annotation = (n: ClusterNode): string | undefined => {
  const meta = api.node(nodeName(n))?.metadata as { annotations?: Record<string, string> } | undefined;
  return meta?.annotations?.[WIREGUARD_KEY_ANNOTATION];
};

function startAgent(n: ClusterNode, agentNodeOf: AgentNode): AgentProcess {
  const ipamDir = (n.conf.ipam as { dataDir: string }).dataDir;
  const process = AgentProcess.start(
    fx,
    agentNodeOf,
    [
      "--encryption=wireguard",
      "--host-interface=wire0",
      `--bpffs-root=${n.bpffsRoot}`,
      `--data-dir=${ipamDir}`,
      "--skip-binary",
      "--resync-seconds=5",
    ],
    CONFIG,
  );
  agents.set(n.name, { node: agentNodeOf, process, cluster: n });
  return process;
}

/** The node's conflist as the agent wrote it, as the plugin's config. */
function agentConf(n: ClusterNode): Record<string, unknown> {
  const node = agents.get(n.name)?.node;
  if (!node) throw new Error(`no agent on ${n.name}`);
  const conflist = readJson(path.join(node.confDir, "10-netkit-cni.conflist"));
  return { ...conflist.plugins[0], cniVersion: conflist.cniVersion, name: conflist.name };
}

function agentStatus(n: ClusterNode): {
  encryption: { peers: { node: string; state: string; publicKey?: string; lastHandshake?: number }[] };
} {
  const node = agents.get(n.name)?.node;
  if (!node) throw new Error(`no agent on ${n.name}`);
  const [code, body] = scrape(node, "/status");
  if (code !== 200) throw new Error(`/status: ${code}`);
  return JSON.parse(body);
}

/** tcpdump on node A's end of the wire, from now until stop(). */
function capture(): { stop(): Promise<{ raw: Buffer; lines: string[] }> } {
  const file = path.join(fx.tempDir("nkt-wg-pcap-"), "wire.pcap");
  const proc: ChildProcess = spawn(
    "nsenter",
    [`--net=/run/netns/${a.netns}`, "tcpdump", "-i", "wire0", "-U", "-n", "-w", file],
    {
      stdio: "ignore",
    },
  );
  fx.processes.push({ kill: () => proc.kill("SIGKILL") });
  const started = Date.now();
  while (!fs.existsSync(file) && Date.now() - started < 30_000) spawnSync("sleep", ["0.2"]);
  return {
    async stop() {
      const exited = new Promise((resolve) => proc.on("exit", resolve));
      proc.kill("SIGINT");
      await exited;
      const r = spawnSync("tcpdump", ["-r", file, "-nn"], { encoding: "utf8" });
      return { raw: fs.readFileSync(file), lines: r.stdout.split("\n").filter(Boolean) };
    },
  };
}

/** What the wire must never carry: a pod's address in clear, or the marker anywhere. */
function expectNothingInClear(seen: { raw: Buffer; lines: string[] }): void {
  const podAddresses = seen.lines.filter((l) => / (10\.221\.|fd21:)/.test(l));
  expect(podAddresses, "pod addresses on the wire in clear").toEqual([]);
  expect(seen.raw.includes(Buffer.from(MARKER)), "the marker on the wire").toBe(false);
}

/** A pod's marker: pings carrying it (v4 and v6) and a UDP datagram of it, to `to`. */
function sendMarkers(from: Pod, to: Pod): void {
  for (const target of [to.v4, to.v6]) {
    spawnSync("nsenter", [
      `--net=/run/netns/${from.netns}`,
      "ping",
      "-c",
      "2",
      "-i",
      "0.2",
      "-W",
      "1",
      "-p",
      MARKER_HEX,
      target,
    ]);
    spawnSync("nsenter", [`--net=/run/netns/${from.netns}`, "bash", "-c", `echo ${MARKER} >/dev/udp/${target}/9999`]);
  }
}

const reaches = (from: Pod, target: string) =>
  spawnSync("nsenter", [`--net=/run/netns/${from.netns}`, "ping", "-c", "1", "-W", "2", target]).status === 0;

let pa: Pod;
let pb: Pod;

/** `netkit-cni status --json` on the node. */
function nodeStatus(n: ClusterNode): NodeStatus {
  const r = spawnSync(
    "nsenter",
    [`--net=/run/netns/${n.netns}`, BINARY, "status", "--json", "--bpffs-root", n.bpffsRoot],
    { encoding: "utf8" },
  );
  return JSON.parse(r.stdout) as NodeStatus;
}

/** The program each of the WireGuard device's pinned links runs, by direction. */
function wireguardPrograms(st: NodeStatus): Record<string, string | undefined> {
  const names = new Map(Object.entries(st.programs.ids).map(([name, id]) => [id, name]));
  const links = st.uplinks.filter((l) => l.device === "netkit-wg0");
  return Object.fromEntries(links.map((l) => [path.basename(l.pin), names.get(l.programId)]));
}

/** What the node's WireGuard device dropped for want of a peer (its tx_errors). */
const wgDrops = (n: ClusterNode): number =>
  (
    JSON.parse(inNs(n.netns, "ip", ["-j", "-s", "link", "show", "dev", "netkit-wg0"]))[0] as {
      stats64: { tx: { errors: number } };
    }
  ).stats64.tx.errors;

/** What the first and last phases measured, compared at the end. */
const measured: {
  crossings?: { host: number; fast: number; stack: number };
  encrypted?: Throughput;
  plain?: Throughput;
} = {};

interface Throughput {
  rr: number;
  stream: number;
}

/** TCP_RR and TCP_STREAM from `from` to `to`'s netserver, a few seconds each (emulated: ratios only). */
function throughput(from: Pod, to: Pod): Throughput {
  const rr = netperf(from.netns, to.v4, "TCP_RR", 5);
  const stream = netperf(from.netns, to.v4, "TCP_STREAM", 5);
  if (rr.error || stream.error) throw new Error(rr.error ?? stream.error);
  return { rr: rr.value, stream: stream.value };
}

beforeAll(async () => {
  fx = new Fixture();
  api = new StandInApiServer(fx.tempDir("nkt-api-"), "agent-token", 1000);
  await api.start();
  [a, b] = makeCluster(fx);
  for (const n of [a, b]) {
    // The agent routes the other node's pods itself (through WireGuard).
    const peer = n === a ? b : a;
    inNs(n.netns, "ip", ["route", "del", peer.podSubnet4]);
    inNs(n.netns, "ip", ["-6", "route", "del", peer.podSubnet6]);
    api.addNode({ name: nodeName(n), podCIDRs: [n.podSubnet4, n.podSubnet6], internalIPs: [n.wireV4, n.wireV6] });
  }
});

afterAll(async () => {
  await api.stop();
  fx.cleanup();
});

describe("WireGuard between nodes (--encryption=wireguard)", () => {
  it("encrypts pod traffic both ways, both families, from the first packet after the agents start", async () => {
    const wire = capture();
    const conflistOf = async (n: ClusterNode) => {
      const agent = agents.get(n.name);
      await eventually(
        `${n.name}'s conflist`,
        () => fs.existsSync(path.join(agent?.node.confDir ?? "", "10-netkit-cni.conflist")),
        120_000,
        () => agent?.process.log ?? "",
      );
      return agentConf(n);
    };
    // Node a first: node b has no agent yet, so no key, and a's pod talks to b's pods'
    // range the moment it can (nothing answers; nothing may leave in clear either).
    startAgent(a, agentNode(fx, api, a.netns, nodeName(a)));
    pa = addPod(fx, a, "wg-a", await conflistOf(a));
    const early = { ...pa, v4: "10.221.2.200", v6: "fd21:2::200" };
    sendMarkers(pa, early);
    expect(wgDrops(a)).toBeGreaterThan(0);
    // Node b joins: a follows without a restart; b's pod talks at once.
    startAgent(b, agentNode(fx, api, b.netns, nodeName(b)));
    pb = addPod(fx, b, "wg-b", await conflistOf(b));
    sendMarkers(pb, pa);
    await eventually("both keys published", () => Boolean(annotation(a) && annotation(b)), 60_000);
    await eventually(
      "pod to pod over v4 and v6",
      () => reaches(pa, pb.v4) && reaches(pa, pb.v6) && reaches(pb, pa.v4),
      120_000,
    );
    sendMarkers(pa, pb);
    sendMarkers(pb, pa);
    const seen = await wire.stop();
    // The agent's conflist enforces NetworkPolicy (its default): a pod's packet leaving
    // through the device meets its egress rules there, as on the uplink.
    const st = nodeStatus(a);
    expect(wireguardPrograms(st)).toEqual({ ingress: "nkc_wg_in", egress: "nkc_wg_out" });
    // status shows the device ready and the peer as the kernel keeps it.
    expect(st.encryption?.ready).toBe(true);
    expect(st.encryption?.peers.map((p) => p.publicKey)).toEqual([annotation(b)]);
    expect(st.encryption?.peers[0]?.lastHandshake).toBeGreaterThan(0);
    expect(st.encryption?.peers[0]?.rxBytes).toBeGreaterThan(0);
    expectNothingInClear(seen);
    expect(seen.lines.filter((l) => l.includes(`.${PORT}:`)).length).toBeGreaterThan(0);

    // The key stays on the node, 0600; the pods' MTU leaves WireGuard's room.
    const keyFile = path.join(agents.get("a")?.node.dataDir ?? "", "agent", "wireguard.key");
    expect(fs.statSync(keyFile).mode & 0o777).toBe(0o600);
    expect(agentConf(a).mtu).toBe(1500 - 80);
    const peer = agentStatus(a).encryption.peers.find((p) => p.node === nodeName(b));
    expect(peer?.state).toBe("encrypted");
    expect(peer?.publicKey).toBe(annotation(b));
    expect(peer?.lastHandshake).toBeGreaterThan(0);
    const [, metrics] = scrape(agents.get("a")?.node as AgentNode, "/metrics");
    expect(metrics).toMatch(/netkit_cni_agent_wireguard_peers\{state="encrypted"\} 1/);

    // A device the agent has not made ready (after a reboot: none at all) gets no pod.
    const ready = inNs(a.netns, "ip", ["-j", "link", "show", "dev", "netkit-wg0"]);
    expect(JSON.parse(ready)[0].ifalias).toBe("netkit-cni: encrypting");
    inNs(a.netns, "ip", ["link", "set", "dev", "netkit-wg0", "alias", "being made"]);
    const podNs = fx.makeNetns("nkp");
    const refused = runPlugin(
      a.netns,
      "ADD",
      { containerId: "wg-early", netns: `/run/netns/${podNs}`, ifname: "eth0" },
      agentConf(a),
    );
    inNs(a.netns, "ip", ["link", "set", "dev", "netkit-wg0", "alias", "netkit-cni: encrypting"]);
    expect(refused.status).not.toBe(0);
    expect(refused.json?.code).toBe(11);
  });

  it("takes the fast path both ways: crossings per packet as without encryption", () => {
    pingMany(pa.netns, pb.v4, 5);
    const host = countNetifRx(() => pingMany(a.netns, b.wireV4, 100));
    const fast = countNetifRx(() => pingMany(pa.netns, pb.v4, 100));
    const plainA = addPod(fx, a, "wg-plain-a", { ...agentConf(a), fastPath: false });
    const plainB = addPod(fx, b, "wg-plain-b", { ...agentConf(b), fastPath: false });
    pingMany(plainA.netns, plainB.v4, 5);
    const plain = countNetifRx(() => pingMany(plainA.netns, plainB.v4, 100));
    console.log(`netif_rx per 100 pings: host↔host ${host}; encrypted pods: fast path ${fast}, stack ${plain}`);
    measured.crossings = { host, fast, stack: plain };
    // A host's ping crosses the backlog once per packet (the wire); so does an encrypted
    // pod's with the fast path (nkc_from_pod to the device, nkc_wg_in into the pod). A pod
    // without it pays its way out of the pod on every packet, and its way in on the
    // replies (nkc_wg_in still takes the requests in: an echo request opens its flow,
    // while a reply proves nothing for a pod whose program remembers no flows): 2.5.
    expect(fast).toBeLessThanOrEqual(host + 10);
    expect(plain).toBeGreaterThanOrEqual(host + 290);
    startNetserver(fx, pb.netns);
    measured.encrypted = throughput(pa, pb);
  });

  it("NetworkPolicy judges what arrives decrypted: a default deny in a pod's namespace refuses the other node's pod before it enters, counted; lifted, it passes", async () => {
    const namespace = "wg-policy";
    api.put("namespaces", { metadata: { name: namespace, labels: { name: namespace } } });
    const scheduled = (name: string, n: ClusterNode, pod?: Pod) => ({
      metadata: { namespace, name, labels: { pod: name } },
      spec: { nodeName: nodeName(n), containers: [{ name: "c" }] },
      status: { phase: "Running", podIPs: pod ? [{ ip: pod.v4 }, { ip: pod.v6 }] : [] },
    });
    const kubeletAdds = (name: string, n: ClusterNode): Pod => {
      api.put("pods", scheduled(name, n));
      const pod = addPod(fx, n, `wg-pol-${name}`, agentConf(n), {
        CNI_ARGS: `K8S_POD_NAMESPACE=${namespace};K8S_POD_NAME=${name}`,
      });
      api.put("pods", scheduled(name, n, pod));
      return pod;
    };
    const client = kubeletAdds("client", a);
    const server = kubeletAdds("server", b);
    await eventually("client to server, no policy yet", () => reaches(client, server.v4), 60_000);

    api.put("networkpolicies", {
      metadata: { namespace, name: "deny-ingress" },
      spec: { podSelector: { matchLabels: { pod: "server" } }, policyTypes: ["Ingress"] },
    });
    await eventually(
      "the server isolated, both families",
      () => !reaches(client, server.v4) && !reaches(client, server.v6),
      60_000,
    );
    // Refused on node b, by the server's ingress rules: the flow came through the tunnel.
    const agentB = agents.get("b")?.node as AgentNode;
    expect(scrape(agentB, "/metrics")[1]).toMatch(
      /^netkit_cni_pod_policy_flows_total\{pod="wg-policy\/server",interface="eth0",direction="ingress",verdict="denied"\} [1-9]\d*$/m,
    );
    // The client's own pod, not isolated, still answers what the server sends it.
    expect(reaches(server, client.v4)).toBe(true);

    api.remove("networkpolicies", namespace, "deny-ingress");
    await eventually("the policy lifted", () => reaches(client, server.v4) && reaches(client, server.v6), 60_000);
  });

  it("rotates a node's key (delete the file, restart): the other agent follows without a restart", async () => {
    const before = annotation(b);
    const agentB = agents.get("b");
    if (!agentB) throw new Error("no agent on b");
    await agentB.process.kill("SIGTERM");
    fs.rmSync(path.join(agentB.node.dataDir, "agent", "wireguard.key"));
    const wire = capture();
    startAgent(b, agentB.node);
    await eventually("a new key published", () => Boolean(annotation(b) && annotation(b) !== before), 120_000);
    await eventually(
      "node a's peer for b takes the new key",
      () => agentStatus(a).encryption.peers.find((p) => p.node === nodeName(b))?.publicKey === annotation(b),
      60_000,
    );
    await eventually("pod to pod again", () => reaches(pa, pb.v4) && reaches(pb, pa.v6), 120_000);
    sendMarkers(pa, pb);
    expectNothingInClear(await wire.stop());
  });

  it("strict: a node whose key is gone gets no clear traffic; its pods are unreachable, the drops counted", async () => {
    const agentB = agents.get("b");
    if (!agentB) throw new Error("no agent on b");
    await agentB.process.kill("SIGTERM");
    // A node that leaves takes its peer along; back without its key, it is reported.
    api.deleteNode(nodeName(b));
    await eventually(
      "node a forgets b",
      () => !agentStatus(a).encryption.peers.some((p) => p.node === nodeName(b)),
      60_000,
    );
    expect(inNs(a.netns, "ip", ["route", "show", "proto", "235"])).not.toContain(b.podSubnet4);
    api.addNode({ name: nodeName(b), podCIDRs: [b.podSubnet4, b.podSubnet6], internalIPs: [b.wireV4, b.wireV6] });
    await eventually(
      "node a reports b without a key",
      () => agentStatus(a).encryption.peers.find((p) => p.node === nodeName(b))?.state === "no-key",
      60_000,
    );
    expect(inNs(a.netns, "ip", ["route", "show", "proto", "235"])).toContain(`${b.podSubnet4} dev netkit-wg0`);
    const drops = () => wgDrops(a);
    const before = drops();
    const wire = capture();
    sendMarkers(pa, pb);
    expect(reaches(pa, pb.v4)).toBe(false);
    expectNothingInClear(await wire.stop());
    expect(drops()).toBeGreaterThan(before);
  });

  it("without --encryption an agent takes its device, routes, programs and key down; the same capture then sees the pods and the marker (the judge sees what it looks for)", async () => {
    for (const n of [a, b]) {
      const agent = agents.get(n.name);
      if (!agent) throw new Error(`no agent on ${n.name}`);
      await agent.process.kill("SIGTERM");
      const plain = AgentProcess.start(
        fx,
        agent.node,
        ["--host-interface=wire0", `--bpffs-root=${n.bpffsRoot}`, "--skip-binary", "--resync-seconds=5"],
        CONFIG,
      );
      agents.set(n.name, { ...agent, process: plain });
    }
    for (const n of [a, b]) {
      await eventually(`node ${n.name}'s key withdrawn from its Node`, () => annotation(n) === undefined, 120_000);
      expect(inNs(n.netns, "ip", ["-o", "link", "show"])).not.toContain("netkit-wg0");
      expect(inNs(n.netns, "ip", ["route", "show", "proto", "235"])).not.toContain("netkit-wg0");
      const st = nodeStatus(n);
      expect(wireguardPrograms(st)).toEqual({});
      expect(st.problems).toEqual([]);
    }
    // The agents route each other's pods via their InternalIPs again.
    await eventually("pod to pod in clear", () => reaches(pa, pb.v4) && reaches(pb, pa.v6), 120_000);
    const wire = capture();
    sendMarkers(pa, pb);
    const seen = await wire.stop();
    expect(seen.raw.includes(Buffer.from(MARKER))).toBe(true);
    expect(seen.lines.some((l) => l.includes(` ${pa.v4} > ${pb.v4}`))).toBe(true);

    pingMany(pa.netns, pb.v4, 5);
    const fast = countNetifRx(() => pingMany(pa.netns, pb.v4, 100));
    measured.plain = throughput(pa, pb);
    const { encrypted, plain, crossings } = measured;
    if (!encrypted || !plain || !crossings) throw new Error("an earlier phase measured nothing");
    console.log(
      `netif_rx per 100 pings, fast path: encrypted ${crossings.fast}, plain ${fast}; ` +
        `TCP_RR encrypted ÷ plain ${(encrypted.rr / plain.rr).toFixed(3)} (${encrypted.rr.toFixed(0)} / ${plain.rr.toFixed(0)}), ` +
        `TCP_STREAM ${(encrypted.stream / plain.stream).toFixed(3)} (${encrypted.stream.toFixed(0)} / ${plain.stream.toFixed(0)} Mbit/s)`,
    );
    // Encryption adds no crossing: the fast path's count is the plain one's.
    expect(Math.abs(crossings.fast - fast)).toBeLessThanOrEqual(10);
  });
});
