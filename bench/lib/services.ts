/**
 * Service traffic: a client pod reaching a ClusterIP, three ways side by side on one
 * two-node cluster (veth pods, the fast path on):
 *
 *   translated   a pod of a network with "serviceTranslation": the socket is given the
 *                backend at connect (bpf_svc.c), so the flow is pod to pod
 *   kube-proxy   a pod of a network without it, through DNAT rules in the node as
 *                kube-proxy's nftables mode writes them: the flow is NAT'd, so the fast
 *                path rightly leaves it to the stack
 *   pod          the same client to the backend pod's own address: what translation
 *                should equal
 *
 * Measured: backlog-queue crossings per TCP_RR packet (exact) and netperf TCP_RR and
 * TCP_CRR, interleaved round by round, across nodes and on one node. netperf's control
 * connection (12865) and its data connection (12866, fixed with -P) both go through the
 * Service. Then real applications across nodes, through a ClusterIP each: nginx with wrk
 * (the small page) and Redis with redis-benchmark (GET), the same rounds.
 */

import * as fs from "node:fs";
import * as path from "node:path";
import { openSvcMaps, ServiceTable, svcTables } from "../../src/bpf/index";
import { cgroup2Root } from "../../src/datapath/sockbypass";
import { inNs } from "../../test/support/harness";
import { type NetperfResult, netperf, startNetserver } from "../../test/support/netperf";
import { addPod, type ClusterNode, makeCluster, type Pod } from "../../test/support/topology";
import { redisBench, wrk } from "./apps/clients";
import type { Place } from "./apps/exec";
import { FILES, PORTS, startNginx, startRedis } from "./apps/servers";
import { type BenchFixture, newFixture, onCleanup, tick } from "./cleanup";
import { type NetifRxCounter, type PerPacket, RR_REQUEST, RR_RESPONSE, rrCrossings } from "./crossings";
import type { Placement } from "./paths";

export const SERVICE_MODES = ["translated", "kube-proxy", "pod"] as const;
export type ServiceMode = (typeof SERVICE_MODES)[number];
export const SERVICE_TESTS = ["TCP_RR", "TCP_CRR"] as const;
export const SERVICE_APPS = ["nginx", "redis"] as const;
export type ServiceApp = (typeof SERVICE_APPS)[number];
export type ServiceTest = (typeof SERVICE_TESTS)[number];

const CONTROL_PORT = 12865;
const DATA_PORT = 12866;
const CLUSTER_IP: Record<Placement, string> = { across: "10.96.0.11", same: "10.96.0.12" };
/** TCP_CRR runs a fixed number of connections: with a time limit netperf waits out
 * netserver's 4 s padding timer after each test. */
const CRR_CONNECTIONS = 4000;

export interface ServiceCrossing {
  mode: ServiceMode;
  placement: Placement;
  rrRequest: PerPacket;
  rrResponse: PerPacket;
}

export interface ServicesRun {
  rounds: number;
  seconds: number;
  crossings: ServiceCrossing[];
  /** mode → placement → test → per-round rates (transactions or connections per second). */
  samples: Record<ServiceMode, Record<Placement, Record<ServiceTest, number[]>>>;
  /** Across nodes: mode → application → per-round rates (requests or GETs per second). */
  apps?: Record<ServiceMode, Record<ServiceApp, number[]>>;
  errors: string[];
}

const PLACEMENTS = ["across", "same"] as const;

/** Where a mode's client runs and the address it asks for. */
type Route = (mode: ServiceMode, placement: Placement) => { client: string; server: string };
/** One netperf test of a mode and placement (a length as netperf's -l takes it). */
type Rr = (mode: ServiceMode, placement: Placement, test: ServiceTest, length: number) => NetperfResult;

export async function measureServices(
  counter: NetifRxCounter,
  opts: { rounds: number; seconds: number; transactions: number },
): Promise<ServicesRun> {
  const fx = newFixture("services");
  const { a, backends, translated, plain } = servicePods(fx);
  for (const pod of Object.values(backends)) startNetserver(fx, pod.netns);
  writeServices(a, backends);
  writeKubeProxyRules(a, backends);

  const route: Route = (mode, placement) => ({
    client: mode === "kube-proxy" ? plain.netns : translated.netns,
    server: mode === "pod" ? backends[placement].v4 : CLUSTER_IP[placement],
  });
  const rr: Rr = (mode, placement, test, length) => {
    const { client, server } = route(mode, placement);
    return netperf(client, server, test, length, ["-r", `${RR_REQUEST},${RR_RESPONSE}`, "-P", `,${DATA_PORT}`]);
  };

  const crossings = await measureCrossings(counter, rr, opts.transactions);
  const errors: string[] = [];
  const samples = await measureRates(rr, opts, errors);
  const apps = await measureApps(fx, backends.across.netns, route, opts, errors);
  fx.cleanup();
  return { rounds: opts.rounds, seconds: opts.seconds, crossings, samples, apps, errors };
}

/**
 * Two nodes with translation, a backend on each, the client on node a, and a pod of a
 * network without translation beside it (its own range of the node's subnet).
 */
function servicePods(fx: BenchFixture) {
  // Translation on the node's cgroup v2 root: only the recorded pods' sockets are touched.
  const [a, b] = makeCluster(fx, { logLevel: "info", serviceTranslation: true });
  const backends: Record<Placement, Pod> = {
    across: addPod(fx, b, "srv-b"),
    same: addPod(fx, a, "srv-a"),
  };
  const translated = addPod(fx, a, "cli");
  const ipam = a.conf.ipam as Record<string, unknown>;
  const plain = addPod(fx, a, "plain", {
    ...a.conf,
    name: "plain",
    serviceTranslation: false,
    ipam: { ...ipam, ranges: [[{ subnet: a.podSubnet4, rangeStart: "10.221.1.200", rangeEnd: "10.221.1.250" }]] },
  });
  return { a, backends, translated, plain };
}

/** The Services in node a's tables: each ClusterIP's ports to its backend. */
function writeServices(a: ClusterNode, backends: Record<Placement, Pod>): void {
  const maps = openSvcMaps(a.bpffsRoot);
  if (!maps) throw new Error("services: no Service tables on node a");
  try {
    const table = new ServiceTable(svcTables(maps));
    for (const placement of PLACEMENTS) {
      for (const port of [CONTROL_PORT, DATA_PORT, PORTS.nginx, PORTS.redis]) {
        table.write({
          frontend: { ip: CLUSTER_IP[placement], port, protocol: "TCP" },
          backends: [{ ip: backends[placement].v4, port }],
        });
      }
    }
  } finally {
    maps.close();
  }
}

/** The same Services as kube-proxy's DNAT rules in node a, for the pod without translation. */
function writeKubeProxyRules(a: ClusterNode, backends: Record<Placement, Pod>): void {
  const nft = (...args: string[]) => inNs(a.netns, "nft", args);
  nft("add", "table", "ip", "kube-proxy-stand-in");
  nft("add", "chain", "ip", "kube-proxy-stand-in", "pre", "{ type nat hook prerouting priority -100; }");
  for (const placement of PLACEMENTS) {
    nft(
      "add",
      "rule",
      "ip",
      "kube-proxy-stand-in",
      "pre",
      "ip",
      "daddr",
      CLUSTER_IP[placement],
      "tcp",
      "dport",
      `{ ${CONTROL_PORT}, ${DATA_PORT}, ${PORTS.nginx}, ${PORTS.redis} }`,
      "dnat",
      "to",
      backends[placement].v4,
    );
  }
}

/** Backlog-queue crossings per TCP_RR packet, each mode and placement once (after a warm-up). */
async function measureCrossings(counter: NetifRxCounter, rr: Rr, transactions: number): Promise<ServiceCrossing[]> {
  const crossings: ServiceCrossing[] = [];
  for (const placement of PLACEMENTS) {
    for (const mode of SERVICE_MODES) {
      await tick();
      const run = (n: number) => rr(mode, placement, "TCP_RR", -n);
      const { lost: _, ...counted } = rrCrossings(counter, run, transactions, `services, ${mode} ${placement}`);
      const c: ServiceCrossing = { mode, placement, ...counted };
      crossings.push(c);
      process.stderr.write(
        `  services crossings ${mode.padEnd(10)} ${placement.padEnd(6)} request ${c.rrRequest.total.toFixed(3)}, response ${c.rrResponse.total.toFixed(3)}\n`,
      );
    }
  }
  return crossings;
}

/** TCP_RR and TCP_CRR rates, every mode and placement interleaved round by round. */
async function measureRates(
  rr: Rr,
  opts: { rounds: number; seconds: number },
  errors: string[],
): Promise<ServicesRun["samples"]> {
  const empty = () => ({ TCP_RR: [] as number[], TCP_CRR: [] as number[] });
  const samples = Object.fromEntries(
    SERVICE_MODES.map((m) => [m, { across: empty(), same: empty() }]),
  ) as ServicesRun["samples"];
  for (let round = 0; round < opts.rounds; round++) {
    for (const test of SERVICE_TESTS) {
      for (const placement of PLACEMENTS) {
        for (const mode of SERVICE_MODES) {
          await tick();
          const r = rr(mode, placement, test, test === "TCP_CRR" ? -CRR_CONNECTIONS : opts.seconds);
          if (r.error) errors.push(`round ${round + 1} ${mode} ${placement} ${test}: ${r.error}`);
          samples[mode][placement][test].push(r.value);
        }
      }
    }
    process.stderr.write(`  services round ${round + 1}/${opts.rounds}\n`);
  }
  return samples;
}

/** nginx and Redis in the backend pod across nodes, reached each way in turn, round by round. */
async function measureApps(
  fx: BenchFixture,
  serverNetns: string,
  route: Route,
  opts: { rounds: number; seconds: number },
  errors: string[],
): Promise<ServicesRun["apps"]> {
  const root = cgroup2Root();
  if (!root) throw new Error("services: no cgroup v2 hierarchy on this machine");
  // The applications' tools run each process in a cgroup (for their CPU counts elsewhere).
  const cgroup = path.join(root, `netkit-cni-bench-${process.pid}-svc`);
  fs.mkdirSync(cgroup);
  onCleanup(() => fs.rmdirSync(cgroup));
  const dir = fs.mkdtempSync("/dev/shm/netkit-cni-bench-svc-");
  onCleanup(() => fs.rmSync(dir, { recursive: true, force: true }));
  fs.chmodSync(dir, 0o755);
  const place = (netns: string): Place => ({ netns, cgroup });
  startNginx(fx, place(serverNetns), path.join(dir, "nginx"), path.join(dir, "nginx.log"));
  startRedis(fx, place(serverNetns), path.join(dir, "redis"), path.join(dir, "redis.log"));
  const out = Object.fromEntries(SERVICE_MODES.map((m) => [m, { nginx: [], redis: [] }])) as unknown as NonNullable<
    ServicesRun["apps"]
  >;
  for (let round = 0; round < opts.rounds; round++) {
    for (const mode of SERVICE_MODES) {
      await tick();
      const { client, server } = route(mode, "across");
      const web = wrk(place(client), server, FILES.small, opts.seconds);
      if (web.error) errors.push(`apps round ${round + 1} ${mode}: ${web.error}`);
      out[mode].nginx.push(web.rate);
      const kv = redisBench(place(client), server, opts.seconds, 1).GET;
      if (kv?.error) errors.push(`apps round ${round + 1} ${mode}: ${kv.error}`);
      out[mode].redis.push(kv?.rate ?? Number.NaN);
    }
    process.stderr.write(`  services applications round ${round + 1}/${opts.rounds}\n`);
  }
  return out;
}
