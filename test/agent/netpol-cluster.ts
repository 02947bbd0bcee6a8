/**
 * A cluster for NetworkPolicy's agent tests: nodes on one wire (each a netns with the
 * agent in its DaemonSet container, --network-policy=true, against the stand-in API),
 * namespaces, and pods made as kubelet makes them (the Pod in the API, ADD with the
 * agent's conflist, then its addresses), each serving TCP and UDP on PORTS with
 * tools/netpol-probe.py. Used by the truth tables (netpol.test.ts) and the second-day
 * tests (netpol-second-day.test.ts).
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as path from "node:path";
import type { V1Namespace, V1Pod } from "@kubernetes/client-node";
import { ceiling, inGuest } from "../support/ceiling";
import { BINARY, Fixture, inNs, runPlugin, TEST_DATAPATH } from "../support/harness";
import { StandInApiServer } from "../support/kube-apiserver";
import { NETPOL_PROBE, probeOutput } from "../support/netpol-probe";
import type { RawPolicy } from "../support/policy-model";
import { type AgentNode, AgentProcess, agentNode, eventually, readJson, scrape } from "./agent-harness";

export const CLUSTER = ["10.40.0.0/16", "fd40::/48"];
export const PROBE = NETPOL_PROBE;
export const PORTS = [80, 81] as const;
/** How long a probe waits for an answer before it counts as denied: an emulated guest
 * answers an allowed probe in seconds when nine probe processes run at once. */
const PROBE_TIMEOUT_S = inGuest ? 4 : 0.8;

export interface PolicyNode {
  name: string;
  netns: string;
  /** This node's number (1, 2, ...): its addresses and bpffs root follow it. */
  n: number;
  agentNode: AgentNode;
  agent: AgentProcess;
}

export interface PodHere {
  key: string;
  netns: string;
  node: PolicyNode;
  v4: string;
  v6: string;
  containerId: string;
  server: ChildProcess;
}

export const policy = (namespace: string, name: string, spec: Record<string, unknown>): RawPolicy =>
  ({ metadata: { namespace, name }, spec }) as RawPolicy;

export function podObject(key: string, node: string, labels: Record<string, string>, ips: string[] = []): V1Pod {
  const [namespace, name] = key.split("/") as [string, string];
  return {
    metadata: { namespace, name, labels },
    spec: {
      nodeName: node,
      containers: [
        {
          name: "c",
          ports: PORTS.flatMap((p) => [
            { name: `serve-${p}-tcp`, containerPort: p, protocol: "TCP" },
            { name: `serve-${p}-udp`, containerPort: p, protocol: "UDP" },
          ]),
        },
      ],
    },
    status: { phase: "Running", podIPs: ips.map((ip) => ({ ip })) },
  };
}

export class PolicyCluster {
  readonly fx = new Fixture();
  api!: StandInApiServer;
  nodes: PolicyNode[] = [];
  namespaces: V1Namespace[] = [];
  readonly pods = new Map<string, PodHere>();
  /** The pods as the API holds them now. */
  readonly currentPods = new Map<string, V1Pod>();
  /** The conflist's `fastPath` for the pods made from now on. */
  fastPath = true;
  /** More flags for every agent started from now on (the DaemonSet's args an admin adds). */
  agentFlags: string[] = [];

  /** `nodes` nodes on a wire, an agent each (the DaemonSet's container), the namespaces. */
  async start(nodes: number, namespaces: readonly string[]): Promise<void> {
    this.api = new StandInApiServer(this.fx.tempDir("nkt-api-"), "agent-token", 500);
    await this.api.start();
    const netnses = Array.from({ length: nodes }, (_, i) => this.fx.makeNetns(`nkp${String.fromCharCode(97 + i)}`));
    // One wire: a veth pair for two nodes (what a kernel without bridges has too).
    if (nodes !== 2) throw new Error("the wire joins two nodes");
    inNs(netnses[0] as string, "ip", [
      "link",
      "add",
      "wire0",
      "type",
      "veth",
      "peer",
      "name",
      "wire0",
      "netns",
      `/run/netns/${netnses[1]}`,
    ]);
    this.nodes = netnses.map((netns, i) => {
      const n = i + 1;
      inNs(netns, "ip", ["link", "set", "lo", "up"]);
      inNs(netns, "sysctl", ["-qw", "net.ipv6.conf.wire0.accept_dad=0"]);
      inNs(netns, "ip", ["addr", "add", `10.30.0.${n}/24`, "dev", "wire0"]);
      inNs(netns, "ip", ["-6", "addr", "add", `fd30::${n}/64`, "dev", "wire0", "nodad"]);
      inNs(netns, "ip", ["link", "set", "wire0", "up"]);
      const name = `node-${n}`;
      this.api.addNode({
        name,
        podCIDRs: [`10.40.${n}.0/24`, `fd40:0:0:${n}::/64`],
        internalIPs: [`10.30.0.${n}`, `fd30::${n}`],
      });
      const an = agentNode(this.fx, this.api, netns, name);
      this.fx.extraBpffsRoots.push(this.bpffsRootOf(n));
      return { name, netns, n, agentNode: an, agent: this.startAgent(n, an, true) };
    });
    for (const node of this.nodes) await this.agentSynced(node);
    this.namespaces = namespaces.map((ns) => ({
      metadata: { name: ns, labels: { ns, "kubernetes.io/metadata.name": ns } },
    }));
    for (const ns of this.namespaces) this.api.put("namespaces", ns as unknown as Record<string, unknown>);
  }

  async stop(): Promise<void> {
    await this.api?.stop();
    this.fx.cleanup();
  }

  bpffsRootOf(n: number): string {
    return `${this.fx.bpffsRoot}-${n}`;
  }

  /** Node n's agent in its DaemonSet container, enforcing NetworkPolicy or told not to. */
  startAgent(n: number, an: AgentNode, networkPolicy: boolean): AgentProcess {
    return AgentProcess.start(
      this.fx,
      an,
      [
        "--skip-binary",
        `--network-policy=${networkPolicy}`,
        "--host-interface",
        "wire0",
        "--bpffs-root",
        this.bpffsRootOf(n),
        "--data-dir",
        path.join(an.dir, "ipam"),
        "--resync-seconds",
        "2",
        ...this.agentFlags,
      ],
      { "cluster-cidr": CLUSTER.join(","), datapath: TEST_DATAPATH === "netkit" ? "netkit" : "veth" },
    );
  }

  async agentSynced(node: PolicyNode): Promise<void> {
    await eventually(
      "synced",
      () => scrape(node.agentNode, "/readyz")[0] === 200,
      // An agent's first start in a guest reads its executable through the shared folder.
      ceiling(60_000),
      () => node.agent.log,
    );
  }

  /** Every node's agent stopped (SIGTERM), `between` done, then started again and synced. */
  async restartAgents(networkPolicy = true, between: () => void | Promise<void> = () => {}): Promise<void> {
    for (const node of this.nodes) await node.agent.kill("SIGTERM");
    await between();
    for (const node of this.nodes) node.agent = this.startAgent(node.n, node.agentNode, networkPolicy);
    for (const node of this.nodes) await this.agentSynced(node);
  }

  /** The conflist's network as the agent wrote it, with `fastPath` as set. */
  confOf(node: PolicyNode): Record<string, unknown> {
    const conflist = readJson(path.join(node.agentNode.confDir, "10-netkit-cni.conflist"));
    return { ...conflist.plugins[0], cniVersion: "1.1.0", name: conflist.name, fastPath: this.fastPath };
  }

  putPod(pod: V1Pod): void {
    this.currentPods.set(`${pod.metadata?.namespace}/${pod.metadata?.name}`, pod);
    this.api.put("pods", pod as unknown as Record<string, unknown>);
  }

  /** The pods as the API holds them now, in the order they were made. */
  podObjects(): V1Pod[] {
    return [...this.pods.values()].map((p) => this.currentPods.get(p.key) as V1Pod);
  }

  /**
   * A pod made as kubelet makes one: scheduled in the API, ADD, then its addresses; its
   * server started. `ipam`: the IPAM the ADD asks (to hand out chosen addresses).
   */
  async addPod(
    key: string,
    node: PolicyNode,
    opts: { labels?: Record<string, string>; ipam?: Record<string, unknown> } = {},
  ): Promise<PodHere> {
    const [namespace, name] = key.split("/") as [string, string];
    const labels = opts.labels ?? { pod: name };
    this.putPod(podObject(key, node.name, labels));
    const netns = this.fx.makeNetns("nkpp");
    inNs(netns, "ip", ["link", "set", "lo", "up"]); // the runtime's part: a pod reaches itself
    const conf = this.confOf(node);
    if (opts.ipam) conf.ipam = { ...(conf.ipam as Record<string, unknown>), ...opts.ipam };
    const containerId = `${namespace}-${name}-${this.fx.netnses.length}`;
    const r = runPlugin(node.netns, "ADD", { containerId, netns: `/run/netns/${netns}`, ifname: "eth0" }, conf, {
      CNI_ARGS: `K8S_POD_NAMESPACE=${namespace};K8S_POD_NAME=${name}`,
    });
    if (r.status !== 0) throw new Error(`ADD ${key}: ${r.stdout}`);
    const ips = ((r.json?.ips ?? []) as { address: string }[]).map((i) => i.address.split("/")[0] as string);
    const v4 = ips.find((ip) => !ip.includes(":")) ?? "";
    const v6 = ips.find((ip) => ip.includes(":")) ?? "";
    this.putPod(podObject(key, node.name, labels, [v4, v6]));
    const server = spawn("nsenter", [`--net=/run/netns/${netns}`, "python3", PROBE, "serve", ...PORTS.map(String)], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    this.fx.processes.push({ kill: () => server.kill("SIGKILL") });
    await new Promise<void>((resolve) => server.stdout?.once("data", () => resolve()));
    const pod = { key, netns, node, v4, v6, containerId, server };
    this.pods.set(key, pod);
    return pod;
  }

  /** A pod deleted as kubelet deletes one: its server stopped, DEL, its netns gone, then the API forgets it. */
  deletePod(key: string): void {
    const pod = this.pods.get(key);
    if (!pod) throw new Error(`no pod ${key}`);
    pod.server.kill("SIGKILL");
    const r = runPlugin(
      pod.node.netns,
      "DEL",
      { containerId: pod.containerId, netns: `/run/netns/${pod.netns}`, ifname: "eth0" },
      this.confOf(pod.node),
      { CNI_ARGS: `K8S_POD_NAMESPACE=${key.split("/")[0]};K8S_POD_NAME=${key.split("/")[1]}` },
    );
    if (r.status !== 0) throw new Error(`DEL ${key}: ${r.stdout}`);
    this.fx.deleteNetns(pod.netns);
    this.pods.delete(key);
    this.currentPods.delete(key);
    const [namespace, name] = key.split("/") as [string, string];
    this.api.remove("pods", namespace, name);
  }

  /** Relabels a pod in the API (a live label change). */
  labelPod(key: string, labels: Record<string, string>): void {
    const pod = structuredClone(this.currentPods.get(key) as V1Pod);
    pod.metadata = { ...pod.metadata, labels };
    this.putPod(pod);
  }

  /** What a failed table shows beside its grids: the API requests about `what`, each agent's policy status and log. */
  diagnostics(what: string): string {
    let out = `\n--- requests ---\n${JSON.stringify(this.api.requests.filter((r) => r.path.includes(what)).slice(-6))}`;
    for (const n of this.nodes) {
      const status = JSON.parse(scrape(n.agentNode, "/status")[1] || "{}").networkPolicy;
      out += `\n--- ${n.name} status ---\n${JSON.stringify(status)}\n--- log ---\n${n.agent.log.slice(-3000)}`;
    }
    return out;
  }

  /**
   * The drops `netkit-cni monitor --json` shows for a pod (on its node) while `traffic`
   * runs: started first, given a moment to open the queue, stopped by its --for-seconds.
   */
  async monitorWhile(pod: PodHere, traffic: () => Promise<unknown>): Promise<Record<string, unknown>[]> {
    const node = pod.node;
    const monitor = spawn(
      "nsenter",
      [
        `--net=/run/netns/${node.netns}`,
        BINARY,
        "monitor",
        "--json",
        "--for-seconds",
        String(inGuest ? 20 : 4),
        "--bpffs-root",
        this.bpffsRootOf(node.n),
        "--state-dir",
        node.agentNode.stateDir,
        "--pod",
        pod.key,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    let out = "";
    monitor.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const done = new Promise((resolve) => monitor.on("close", resolve));
    await new Promise((resolve) => setTimeout(resolve, 500));
    await traffic();
    await done;
    return out
      .trim()
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l));
  }

  /** Runs a probe process in `netns` on its targets ("HOST PORT tcp|udp"); its output. */
  probeFrom(netns: string, targets: string[]): Promise<string> {
    return probeOutput(netns, PROBE_TIMEOUT_S, targets);
  }

  /** Whether `from` gets an answer from `to`'s address of `family` on port/protocol now. */
  async reaches(from: string, to: string, port: number, protocol: "tcp" | "udp", family: 4 | 6): Promise<boolean> {
    const target = this.pods.get(to) as PodHere;
    const out = await this.probeFrom((this.pods.get(from) as PodHere).netns, [
      `${family === 4 ? target.v4 : target.v6} ${port} ${protocol}`,
    ]);
    return out.trim().endsWith(" yes");
  }
}

/** Connects to ip:80 again and again for `seconds`: how many got an answer. */
export function hammer(netns: string, ip: string, seconds: number): Promise<{ through: number; tries: number }> {
  const code = [
    "import socket, sys, time",
    "end = time.time() + float(sys.argv[2]); through = tries = 0",
    "while time.time() < end:",
    "    s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET); s.settimeout(0.05); tries += 1",
    "    try:",
    "        s.connect((sys.argv[1], 80)); through += s.recv(4).startswith(b'ok')",
    "    except OSError: pass",
    "    finally: s.close()",
    "print(through, tries)",
  ].join("\n");
  return new Promise((resolve) => {
    const child = spawn("nsenter", [`--net=/run/netns/${netns}`, "python3", "-c", code, ip, String(seconds)], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.on("close", () => {
      const [through, tries] = out.trim().split(" ").map(Number);
      resolve({ through: through ?? -1, tries: tries ?? 0 });
    });
  });
}
