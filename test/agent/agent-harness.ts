/**
 * Running the built `netkit-cni agent` as a node runs it: in the DaemonSet's container as
 * install/daemonset.yaml describes it (container.ts), in the node's network namespace,
 * against the stand-in API server reached through a forwarder in that namespace with the
 * service account's credentials, the API allowing it only what the manifest's ClusterRole
 * grants. Its log is kept for the test's failure messages.
 */
import { type ChildProcess, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { ensureBpffs } from "../../src/bpf/loader/pins";
import { BINARY, type Fixture, inNs, sh, uniqueName } from "../support/harness";
import { netnsForwarder, type StandInApiServer } from "../support/kube-apiserver";
import { spawnAgentContainer } from "./container";
import { type AgentPodSpec, readDaemonSet } from "./daemonset";

export const API_PORT = 6443;
const METRICS_PORT = 9968;

let manifest: AgentPodSpec | undefined;
/** The manifest, read once per test file. */
const daemonSet = (): AgentPodSpec => {
  manifest ??= readDaemonSet();
  return manifest;
};

export interface AgentNode {
  netns: string;
  name: string;
  dir: string;
  confDir: string;
  binDir: string;
  /** Where the agent's state is, the same path inside its container and on the node. */
  stateDir: string;
  /** The node's /var/lib/netkit-cni (its WireGuard key under agent/). */
  dataDir: string;
  /** The service account's files (token, ca.crt, namespace). */
  serviceAccountDir: string;
  /** The node's own mount namespace (a sandbox's), when it has one. */
  mountNs?: string;
}

/**
 * A node's directories and its way to the API (call once per node netns). `dirs`: CNI
 * directories a runtime already reads; `mountNs`: the node's mount namespace, whose
 * /opt/cni/bin, /etc/cni/net.d and /run the agent's hostPaths are then, as on a real node.
 */
export function agentNode(
  fx: Fixture,
  api: StandInApiServer,
  netns: string,
  name: string,
  dirs: { confDir?: string; binDir?: string; mountNs?: string } = {},
): AgentNode {
  const dir = fx.tempDir(`nkt-agent-${name}-`);
  const forwarder = netnsForwarder(netns, API_PORT, api.socketPath);
  fx.processes.push({ kill: () => forwarder.kill("SIGKILL") });
  api.restrictTo(daemonSet().rules);
  nodeBpffs(dirs.mountNs);
  const serviceAccountDir = path.join(dir, "serviceaccount");
  fs.mkdirSync(serviceAccountDir);
  fs.writeFileSync(path.join(serviceAccountDir, "token"), api.token);
  fs.copyFileSync(api.caFile, path.join(serviceAccountDir, "ca.crt"));
  fs.writeFileSync(path.join(serviceAccountDir, "namespace"), "kube-system");
  let stateDir = "/run/netkit-cni/agent"; // the manifest's default, inside the node's own /run
  if (!dirs.mountNs) {
    // On this machine's /run, beside other tests: a directory of this node's own, under
    // the manifest's /run/netkit-cni volume so the plugin finds it at the same path.
    const run = path.join("/run/netkit-cni", uniqueName(`nkt-agent-${name}`));
    // 0700, as the plugin makes /run/netkit-cni: made here first, it must not be wider
    // (test/integration/security.test.ts holds the plugin's files to root alone).
    fs.mkdirSync(run, { recursive: true, mode: 0o700 });
    fx.dirs.push(run);
    stateDir = path.join(run, "agent");
  }
  return {
    netns,
    name,
    dir,
    confDir: dirs.confDir ?? path.join(dir, "net.d"),
    binDir: dirs.binDir ?? path.join(dir, "bin"),
    dataDir: path.join(dir, "var-lib"),
    stateDir,
    serviceAccountDir,
    mountNs: dirs.mountNs,
  };
}

/**
 * The node's bpffs at /sys/fs/bpf, mounted as systemd mounts it at boot (kubelet does
 * not). Without it, the first agent mounts one inside its own container, where its
 * HostToContainer volume keeps it: a bpffs the plugin never sees, so the agent writes
 * policies into maps no pod's program reads (and, on this machine, whose mounts are
 * private, a bpffs mounted on the host later never reaches a container started before).
 */
function nodeBpffs(mountNs: string | undefined): void {
  if (!mountNs) {
    ensureBpffs("/sys/fs/bpf");
    return;
  }
  const mounted = '[ "$(stat -f -c %T /sys/fs/bpf)" = bpf_fs ] || mount -t bpf -o mode=0700 bpf /sys/fs/bpf';
  sh("nsenter", [`--mount=${mountNs}`, "sh", "-c", mounted]);
}

export class AgentProcess {
  log = "";
  exited: Promise<number | null>;
  private readonly proc: ChildProcess;

  constructor(
    readonly node: AgentNode,
    args: string[],
    configMap: Record<string, string> = {},
    extraEnv: Record<string, string> = {},
  ) {
    this.proc = spawnAgentContainer({
      extraEnv,
      pod: daemonSet(),
      netns: node.netns,
      nodeName: node.name,
      hostMountNs: node.mountNs,
      hostPaths: node.mountNs
        ? {}
        : { "/opt/cni/bin": node.binDir, "/etc/cni/net.d": node.confDir, "/var/lib/netkit-cni": node.dataDir },
      configMap,
      serviceAccountDir: node.serviceAccountDir,
      apiHost: "127.0.0.1",
      apiPort: API_PORT,
      binary: BINARY,
      rootDir: path.join(node.dir, "container-root"),
      extraArgs: [
        ...(node.mountNs ? [] : [`--state-dir=${node.stateDir}`]),
        `--log-file=${path.join(node.dir, "plugin.log")}`,
        ...args,
      ],
    });
    const take = (d: Buffer) => {
      this.log += d.toString();
    };
    this.proc.stdout?.on("data", take);
    this.proc.stderr?.on("data", take);
    this.exited = new Promise((resolve) => this.proc.on("exit", (code) => resolve(code)));
  }

  /** `configMap`: the ConfigMap's keys that differ from the manifest's (cluster-cidr, masquerade, …). */
  static start(
    fx: Fixture,
    node: AgentNode,
    args: string[] = [],
    configMap: Record<string, string> = {},
    extraEnv: Record<string, string> = {},
  ): AgentProcess {
    const agent = new AgentProcess(node, args, configMap, extraEnv);
    fx.processes.push({ kill: () => agent.proc.kill("SIGKILL") });
    return agent;
  }

  kill(signal: NodeJS.Signals): Promise<number | null> {
    this.proc.kill(signal);
    return this.exited;
  }
}

/** GET one of the agent's endpoints from inside its node: [HTTP status, body]. */
export function scrape(node: AgentNode, what: string): [number, string] {
  const r = spawnSync(
    "nsenter",
    [`--net=/run/netns/${node.netns}`, "curl", "-s", "-w", "\n%{http_code}", `http://127.0.0.1:${METRICS_PORT}${what}`],
    { encoding: "utf8", timeout: 10_000 },
  );
  const text = r.stdout ?? "";
  const cut = text.lastIndexOf("\n");
  return [Number(text.slice(cut + 1)), text.slice(0, cut)];
}

/** Our routes in a node, "dst via gw", sorted (`ip route show proto 235`, both families). */
export function agentRoutes(netns: string): string[] {
  const out: string[] = [];
  for (const family of ["-4", "-6"]) {
    const r = spawnSync("ip", ["-n", netns, family, "route", "show", "proto", "235"], { encoding: "utf8" });
    for (const line of r.stdout.split("\n").filter(Boolean)) {
      const m = line.match(/^(\S+) via (\S+)/);
      if (m) out.push(`${m[1]} via ${m[2]}`);
    }
  }
  return out.sort();
}

export async function eventually(what: string, ok: () => boolean, ms = 15_000, log?: () => string): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${log ? `\n--- agent log ---\n${log()}` : ""}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export const readJson = (file: string) => JSON.parse(fs.readFileSync(file, "utf8"));

/** A node netns with an uplink on 10.30.0.0/24 and fd30::/64 (both ends inside: no host device). */
export function makeNode(fx: Fixture, prefix: string): string {
  const netns = fx.makeNetns(prefix);
  inNs(netns, "ip", ["link", "set", "lo", "up"]);
  inNs(netns, "ip", ["link", "add", "uplink0", "type", "veth", "peer", "name", "uplink0p"]);
  inNs(netns, "ip", ["addr", "add", "10.30.0.1/24", "dev", "uplink0"]);
  inNs(netns, "ip", ["-6", "addr", "add", "fd30::1/64", "dev", "uplink0", "nodad"]);
  inNs(netns, "ip", ["link", "set", "uplink0p", "up"]);
  inNs(netns, "ip", ["link", "set", "uplink0", "up"]);
  return netns;
}

/** A ClusterIP Service as the API would hold it (namespace "default"). */
export const service = (
  name: string,
  clusterIP: string,
  ports: Record<string, unknown>[],
  extra: Record<string, unknown> = {},
) => ({
  metadata: { namespace: "default", name },
  spec: { type: "ClusterIP", clusterIP, clusterIPs: [clusterIP], ports, ...extra },
});

/** An EndpointSlice of Service `svc` (namespace "default"). */
export const slice = (
  name: string,
  svc: string,
  addressType: string,
  ports: Record<string, unknown>[],
  endpoints: Record<string, unknown>[],
) => ({
  metadata: { namespace: "default", name, labels: { "kubernetes.io/service-name": svc } },
  addressType,
  ports,
  endpoints,
});
