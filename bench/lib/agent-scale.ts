/**
 * The agent at cluster scale: one `netkit-cni agent` against a stand-in API holding N
 * objects (test/support/kube-apiserver.ts), in a node namespace of its own, measured as a
 * cluster would meet it:
 *
 *   services  N Services × E endpoints, --service-translation: the first sync (start until
 *             the tables hold every Service, from the agent's log line), then one change
 *             at a time, each timed from the API write until a pod's connect shows it:
 *             a new Service (until a connect to its ClusterIP reaches its backend pod),
 *             and that backend withdrawn for another (until a connect reaches the other:
 *             from then on the withdrawn one gets no new connection); the agent's RSS
 *             right after the sync, settled, and its peak (VmHWM)
 *   nodes     N Nodes: the first sync (start until synced: conflist and every route), then
 *             a Node added, moved (its InternalIP) and deleted, each timed from the API
 *             write until the route change arrives (rtnetlink, `ip monitor route`)
 *
 * The probes run in the client pod: a connect to a ClusterIP not (yet) translated fails
 * at once on a `prohibit` route for the Service range in the pod (translation at connect
 * comes before the route lookup, so a translated connect never meets it).
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { cgroup2Root } from "../../src/datapath/sockbypass";
import { BINARY, inNs, runPlugin } from "../../test/support/harness";
import { netnsForwarder, StandInApiServer } from "../../test/support/kube-apiserver";
import { type BenchFixture, newFixture, onCleanup, tick } from "./cleanup";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface AgentRss {
  /** VmRSS right after the first sync, MB. */
  afterSyncMb: number;
  /** VmRSS `settleSeconds` later. */
  settledMb: number;
  /** VmHWM at the end: the most it held at once. */
  peakMb: number;
}

export interface ServiceScale {
  services: number;
  endpoints: number;
  firstSyncMs: number;
  /** API write of a new Service until a pod's connect reaches its backend, ms, per change. */
  addMs: number[];
  /** API write of a slice moving the Service to another backend until a connect reaches it. */
  withdrawMs: number[];
  rss: AgentRss;
}

export interface NodeScale {
  nodes: number;
  firstSyncMs: number;
  /** API write until the route is there / replaced / gone, ms, per change. */
  addMs: number[];
  moveMs: number[];
  deleteMs: number[];
  rss: AgentRss;
}

export interface AgentScaleRun {
  settleSeconds: number;
  services: ServiceScale[];
  nodes: NodeScale[];
  errors: string[];
}

export const SERVICE_SIZES: readonly (readonly [number, number])[] = [
  [500, 10],
  [5000, 10],
  [15000, 4],
];
export const NODE_SIZES = [1000, 4000] as const;

const API_PORT = 6443;
const METRICS = "127.0.0.1:9968";
export const SELF = "self";
const CLUSTER = "10.64.0.0/10";
export const SELF_PODS = "10.64.0.0/24";
const SERVICE_RANGE = "10.96.0.0/12";
const PORT = 80;
const TARGET_PORT = 8080;

/** The i-th address of 10.96.0.0/12 (i < 2^20). */
const clusterIp = (i: number) => `10.${96 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;
/** The j-th endpoint address: 10.65.0.0/16 and up, never a pod of ours. */
const endpointIp = (j: number) => `10.${65 + (j >> 16)}.${(j >> 8) & 255}.${j & 255}`;
/** The i-th node's pod CIDR and InternalIP (i ≥ 1). */
const nodePods = (i: number) => `10.${64 + (i >> 8)}.${i & 255}.0/24`;
const nodeIp = (i: number) => `10.30.${i >> 8}.${i & 255}`;

const service = (name: string, ip: string) => ({
  metadata: { namespace: "bench", name, labels: { app: name }, annotations: { "bench/padding": "x".repeat(200) } },
  spec: {
    type: "ClusterIP",
    clusterIP: ip,
    clusterIPs: [ip],
    ports: [{ name: "http", port: PORT, protocol: "TCP", targetPort: TARGET_PORT }],
  },
});
const slice = (name: string, svc: string, ips: string[]) => ({
  metadata: { namespace: "bench", name, labels: { "kubernetes.io/service-name": svc } },
  addressType: "IPv4",
  ports: [{ name: "http", port: TARGET_PORT, protocol: "TCP" }],
  endpoints: ips.map((ip, k) => ({
    addresses: [ip],
    conditions: { ready: true, serving: true, terminating: false },
    nodeName: `node-${k}`,
    targetRef: { kind: "Pod", namespace: "bench", name: `${svc}-${k}`, uid: `00000000-0000-4000-8000-${k}` },
  })),
});

export const mb = (kb: number) => Math.round(kb / 102.4) / 10;

export function vm(pid: number, field: "VmRSS" | "VmHWM"): number {
  const text = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? Number.NaN);
}

/** A node namespace with an uplink on 10.30.0.0/16 (both ends inside). */
export function makeNode(fx: BenchFixture): string {
  const netns = fx.makeNetns("nkba");
  inNs(netns, "ip", ["link", "set", "lo", "up"]);
  inNs(netns, "ip", ["link", "add", "uplink0", "type", "veth", "peer", "name", "uplink0p"]);
  inNs(netns, "ip", ["addr", "add", "10.30.0.1/16", "dev", "uplink0"]);
  inNs(netns, "ip", ["link", "set", "uplink0p", "up"]);
  inNs(netns, "ip", ["link", "set", "uplink0", "up"]);
  return netns;
}

/** `netkit-cni agent` in `netns` against the stand-in `api`; also the control plane's verb agent. */
export class Agent {
  readonly proc: ChildProcess;
  log = "";
  private readonly lines: { at: number; text: string }[] = [];
  readonly started = Date.now();

  constructor(
    readonly fx: BenchFixture,
    readonly netns: string,
    readonly dir: string,
    api: StandInApiServer,
    extra: string[],
  ) {
    const forwarder = netnsForwarder(netns, API_PORT, api.socketPath);
    fx.processes.push({ kill: () => forwarder.kill("SIGKILL") });
    const args = [
      ...["agent", "--kubeconfig", api.kubeconfig(`kc-${path.basename(dir)}`, `https://127.0.0.1:${API_PORT}`)],
      ...["--node-name", SELF, "--cluster-cidr", CLUSTER, "--metrics-address", METRICS, "--skip-binary"],
      ...["--conf-dir", path.join(dir, "net.d"), "--state-dir", path.join(dir, "state")],
      ...["--data-dir", path.join(dir, "ipam"), "--log-file", path.join(dir, "plugin.log")],
      ...["--bpffs-root", fx.bpffsRoot, "--host-interface", "uplink0", ...extra],
    ];
    this.proc = spawn("nsenter", [`--net=/run/netns/${netns}`, BINARY, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    fx.processes.push({ kill: () => this.proc.kill("SIGKILL") });
    let rest = "";
    const take = (d: Buffer) => {
      const at = Date.now();
      this.log += d.toString();
      rest += d.toString();
      for (let nl = rest.indexOf("\n"); nl >= 0; nl = rest.indexOf("\n")) {
        this.lines.push({ at, text: rest.slice(0, nl) });
        rest = rest.slice(nl + 1);
      }
    };
    this.proc.stdout?.on("data", take);
    this.proc.stderr?.on("data", take);
  }

  /** When the first log line matching `re` arrived (waiting up to `ms`). */
  async lineAt(re: RegExp, ms: number): Promise<number> {
    const end = Date.now() + ms;
    for (;;) {
      const line = this.lines.find((l) => re.test(l.text));
      if (line) return line.at;
      if (this.proc.exitCode !== null)
        throw new Error(`the agent exited (${this.proc.exitCode}): ${this.log.slice(-500)}`);
      if (Date.now() > end) throw new Error(`no log line ${re} in ${ms} ms: ${this.log.slice(-500)}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  async stop(): Promise<void> {
    this.proc.kill("SIGTERM");
    await new Promise((r) => this.proc.once("exit", r));
  }
}

/** The agent's RSS after its first sync, `settleSeconds` later, and its peak. */
async function rssOf(agent: Agent, settleSeconds: number): Promise<AgentRss> {
  const pid = agent.proc.pid as number;
  const afterSyncMb = mb(vm(pid, "VmRSS"));
  await new Promise((r) => setTimeout(r, settleSeconds * 1000));
  return { afterSyncMb, settledMb: mb(vm(pid, "VmRSS")), peakMb: mb(vm(pid, "VmHWM")) };
}

const PROBE = [
  "import socket, sys, time",
  "host, port, want = sys.argv[1], int(sys.argv[2]), sys.argv[3] + ' '",
  "print('ready', flush=True)",
  "deadline = time.time() + 30",
  "while time.time() < deadline:",
  "    s = socket.socket()",
  "    s.settimeout(1)",
  "    try:",
  "        s.connect((host, port))",
  "        if s.recv(64).decode().startswith(want):",
  "            print(f'{time.time():.6f}', flush=True)",
  "            sys.exit(0)",
  "    except OSError:",
  "        pass",
  "    finally:",
  "        s.close()",
  "print('timeout', flush=True)",
].join("\n");

/** Runs `write` once the probe in `client` is connecting; ms from the write until a connect reached `want`. */
async function probe(client: Pod, cgroup: string, ip: string, want: string, write: () => void): Promise<number> {
  const child = spawn(
    "sh",
    [
      "-c",
      `echo $$ > ${cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${client.netns} python3 -c "$0" "$@"`,
      PROBE,
      ip,
      String(PORT),
      want,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let out = "";
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString();
  });
  const exited = new Promise((r) => child.once("exit", r));
  while (!out.startsWith("ready")) await new Promise((r) => setTimeout(r, 2));
  await new Promise((r) => setTimeout(r, 20)); // its first connects are refused
  const wrote = Date.now();
  write();
  await exited;
  const at = Number(out.split("\n")[1]);
  if (!Number.isFinite(at)) throw new Error(`probe for ${want} at ${ip}: ${out.trim()}`);
  return Math.max(0, at * 1000 - wrote);
}

interface Pod {
  netns: string;
  ip: string;
}

/** A pod made by the plugin with the agent's conflist, its Service translation on `cgroup`. */
function addPod(fx: BenchFixture, node: string, conf: Record<string, unknown>, id: string): Pod {
  const netns = fx.makeNetns("nkbp");
  const r = runPlugin(node, "ADD", { containerId: id, netns: `/run/netns/${netns}`, ifname: "eth0" }, conf);
  if (r.status !== 0) throw new Error(`ADD ${id}: ${r.stdout}`);
  const ip = ((r.json?.ips ?? []) as { address: string }[])[0]?.address.split("/")[0] ?? "";
  inNs(netns, "ip", ["route", "add", "prohibit", SERVICE_RANGE]);
  return { netns, ip };
}

/** A TCP server in `pod` answering each connection "NAME <peer>"; resolves once it listens. */
async function serve(fx: BenchFixture, pod: Pod, name: string): Promise<void> {
  const code = [
    "import socket, sys",
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
    `s.bind(('0.0.0.0', ${TARGET_PORT})); s.listen(512); print('up', flush=True)`,
    "while True:",
    "    c, a = s.accept()",
    "    try:",
    "        c.sendall(f'{sys.argv[1]} {a[0]}\\n'.encode())",
    "    except OSError:",
    "        pass",
    "    c.close()",
  ].join("\n");
  const child = spawn("nsenter", [`--net=/run/netns/${pod.netns}`, "python3", "-c", code, name], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  fx.processes.push({ kill: () => child.kill("SIGKILL") });
  let out = "";
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString();
  });
  const end = Date.now() + 30_000;
  while (!out.startsWith("up")) {
    if (child.exitCode !== null || Date.now() > end) throw new Error(`server ${name} in ${pod.netns} did not start`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function measureServiceScale(
  services: number,
  endpoints: number,
  opts: { changes: number; settleSeconds: number },
): Promise<ServiceScale> {
  const fx = newFixture(`agent-svc-${services}`);
  const dir = fx.tempDir("nkb-agent-");
  const api = new StandInApiServer(dir, "bench-token", 60_000);
  await api.start();
  onCleanup(() => void api.stop());
  api.addNode({ name: SELF, podCIDRs: [SELF_PODS], internalIPs: ["10.30.0.1"] });
  let j = 0;
  for (let i = 0; i < services; i++) {
    api.put("services", service(`s${i}`, clusterIp(i)));
    api.put(
      "endpointslices",
      slice(
        `s${i}-a`,
        `s${i}`,
        Array.from({ length: endpoints }, () => endpointIp(j++)),
      ),
    );
    if (i % 1000 === 999) await tick();
  }
  const netns = makeNode(fx);
  const agent = new Agent(fx, netns, dir, api, ["--service-translation"]);
  const synced = await agent.lineAt(/services: synced/, 120_000);
  const firstSyncMs = synced - agent.started;
  const rss = await rssOf(agent, opts.settleSeconds);

  // The pods: a client, and two backends the probes tell apart.
  const root = cgroup2Root();
  if (!root) throw new Error("agent bench: no cgroup v2 hierarchy on this machine");
  // One cgroup per size, gone with it: a name shared by the sizes would be removed once
  // and then missed by every other size's cleanup.
  const cgroup = path.join(root, `netkit-cni-bench-${process.pid}-agent-${services}`);
  fs.mkdirSync(cgroup);
  const removeCgroup = () => fs.existsSync(cgroup) && fs.rmdirSync(cgroup);
  onCleanup(removeCgroup);
  const conflist = JSON.parse(fs.readFileSync(path.join(dir, "net.d", "10-netkit-cni.conflist"), "utf8"));
  const conf = { ...conflist.plugins[0], cniVersion: "1.1.0", name: conflist.name, serviceTranslationCgroup: cgroup };
  const client = addPod(fx, netns, conf, "client");
  const a = addPod(fx, netns, conf, "backend-a");
  const b = addPod(fx, netns, conf, "backend-b");
  // Listening before the first change is timed: a server still starting would be
  // counted as the agent's latency.
  await Promise.all([serve(fx, a, "a"), serve(fx, b, "b")]);

  const addMs: number[] = [];
  const withdrawMs: number[] = [];
  for (let c = 0; c < opts.changes; c++) {
    await tick();
    const name = `probe${c}`;
    const ip = clusterIp(services + c);
    addMs.push(
      await probe(client, cgroup, ip, "a", () => {
        api.put("services", service(name, ip));
        api.put("endpointslices", slice(`${name}-a`, name, [a.ip]));
      }),
    );
    withdrawMs.push(
      await probe(client, cgroup, ip, "b", () => api.put("endpointslices", slice(`${name}-a`, name, [b.ip]))),
    );
    api.remove("endpointslices", "bench", `${name}-a`);
    api.remove("services", "bench", name);
  }
  rss.peakMb = mb(vm(agent.proc.pid as number, "VmHWM"));
  await agent.stop();
  await api.stop();
  for (const pod of [client, a, b])
    runPlugin(netns, "DEL", { containerId: "", netns: `/run/netns/${pod.netns}`, ifname: "eth0" }, conf);
  fx.cleanup();
  removeCgroup();
  return { services, endpoints, firstSyncMs, addMs, withdrawMs, rss };
}

/** Route changes as rtnetlink announces them in `netns`: the time each line for `dst` arrives. */
class RouteMonitor {
  private readonly proc: ChildProcess;
  private readonly lines: { at: number; text: string }[] = [];

  constructor(fx: BenchFixture, netns: string) {
    this.proc = spawn("ip", ["-n", netns, "monitor", "route"], { stdio: ["ignore", "pipe", "ignore"] });
    fx.processes.push({ kill: () => this.proc.kill("SIGKILL") });
    let rest = "";
    this.proc.stdout?.on("data", (d: Buffer) => {
      const at = Date.now();
      rest += d.toString();
      for (let nl = rest.indexOf("\n"); nl >= 0; nl = rest.indexOf("\n")) {
        this.lines.push({ at, text: rest.slice(0, nl) });
        rest = rest.slice(nl + 1);
      }
    });
  }

  /**
   * Resolves once `ip monitor` is subscribed: a route change made before that is never
   * announced to it, and would be waited for in vain. A canary route, added and taken out.
   */
  async ready(netns: string): Promise<void> {
    const canary = "198.51.100.1/32";
    const shown = this.time(/^blackhole 198\.51\.100\.1 /, () => undefined);
    for (let i = 0; i < 300; i++) {
      inNs(netns, "ip", ["route", "replace", "blackhole", canary]);
      const seen = await Promise.race([shown.then(() => true), sleep(100).then(() => false)]);
      if (seen) break;
    }
    await shown;
    inNs(netns, "ip", ["route", "del", "blackhole", canary]);
  }

  /** ms from `write` until a route line matching `re` arrives. */
  async time(re: RegExp, write: () => void): Promise<number> {
    const from = this.lines.length;
    const wrote = Date.now();
    write();
    const end = wrote + 30_000;
    for (;;) {
      const line = this.lines.slice(from).find((l) => re.test(l.text));
      if (line) return line.at - wrote;
      if (Date.now() > end) throw new Error(`no route change ${re} in 30 s`);
      await new Promise((r) => setTimeout(r, 1));
    }
  }

  stop(): void {
    this.proc.kill("SIGKILL");
  }
}

async function measureNodeScale(nodes: number, opts: { changes: number; settleSeconds: number }): Promise<NodeScale> {
  const fx = newFixture(`agent-nodes-${nodes}`);
  const dir = fx.tempDir("nkb-agent-");
  const api = new StandInApiServer(dir, "bench-token", 60_000);
  await api.start();
  onCleanup(() => void api.stop());
  api.addNode({ name: SELF, podCIDRs: [SELF_PODS], internalIPs: ["10.30.0.1"] });
  for (let i = 1; i <= nodes; i++) {
    api.addNode({ name: `node-${i}`, podCIDRs: [nodePods(i)], internalIPs: [nodeIp(i + 1)] });
    if (i % 1000 === 0) await tick();
  }
  const netns = makeNode(fx);
  const agent = new Agent(fx, netns, dir, api, []);
  const synced = await agent.lineAt(/synced: conflist written/, 120_000);
  const firstSyncMs = synced - agent.started;
  const rss = await rssOf(agent, opts.settleSeconds);
  const monitor = new RouteMonitor(fx, netns);
  await monitor.ready(netns);
  const addMs: number[] = [];
  const moveMs: number[] = [];
  const deleteMs: number[] = [];
  for (let c = 0; c < opts.changes; c++) {
    await tick();
    const i = nodes + 1 + c;
    const dst = nodePods(i).replace(/\./g, "\\.");
    addMs.push(
      await monitor.time(new RegExp(`^${dst} via ${nodeIp(i + 1)}`), () =>
        api.addNode({ name: `node-${i}`, podCIDRs: [nodePods(i)], internalIPs: [nodeIp(i + 1)] }),
      ),
    );
    const moved = nodeIp(i + 2000);
    moveMs.push(
      await monitor.time(new RegExp(`^${dst} via ${moved}`), () =>
        api.addNode({ name: `node-${i}`, podCIDRs: [nodePods(i)], internalIPs: [moved] }),
      ),
    );
    deleteMs.push(await monitor.time(new RegExp(`^Deleted ${dst}`), () => api.deleteNode(`node-${i}`)));
  }
  monitor.stop();
  rss.peakMb = mb(vm(agent.proc.pid as number, "VmHWM"));
  await agent.stop();
  await api.stop();
  fx.cleanup();
  return { nodes, firstSyncMs, addMs, moveMs, deleteMs, rss };
}

export async function measureAgentScale(opts: {
  changes: number;
  settleSeconds: number;
  serviceSizes?: readonly (readonly [number, number])[];
  nodeSizes?: readonly number[];
  log: (msg: string) => void;
}): Promise<AgentScaleRun> {
  const run: AgentScaleRun = { settleSeconds: opts.settleSeconds, services: [], nodes: [], errors: [] };
  for (const [n, e] of opts.serviceSizes ?? SERVICE_SIZES) {
    opts.log(`agent: ${n} Services × ${e} endpoints, ${opts.changes} changes`);
    try {
      const r = await measureServiceScale(n, e, opts);
      run.services.push(r);
      opts.log(
        `  first sync ${r.firstSyncMs} ms; add ${r.addMs.map(Math.round).join(",")} ms; withdraw ${r.withdrawMs.map(Math.round).join(",")} ms; RSS ${r.rss.afterSyncMb}/${r.rss.settledMb}/${r.rss.peakMb} MB`,
      );
    } catch (e) {
      run.errors.push(`${n} Services: ${(e as Error).message}`);
    }
  }
  for (const n of opts.nodeSizes ?? NODE_SIZES) {
    opts.log(`agent: ${n} Nodes, ${opts.changes} changes`);
    try {
      const r = await measureNodeScale(n, opts);
      run.nodes.push(r);
      opts.log(
        `  first sync ${r.firstSyncMs} ms; add ${r.addMs.map(Math.round).join(",")} ms; move ${r.moveMs.map(Math.round).join(",")}; delete ${r.deleteMs.map(Math.round).join(",")}; RSS ${r.rss.afterSyncMb}/${r.rss.settledMb}/${r.rss.peakMb} MB`,
      );
    } catch (e) {
      run.errors.push(`${n} Nodes: ${(e as Error).message}`);
    }
  }
  return run;
}
