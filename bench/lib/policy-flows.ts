/**
 * Flow records' cost (docs/flows.md), on the NetworkPolicy section's selected pods (their
 * flows judged on both ends: the client's egress, the servers' ingress), three ways side
 * by side, interleaved round by round:
 *
 *   off    recording off: what every node without --flows runs
 *   on     recording on, nobody taking the records while netperf runs (they wait in
 *          the nodes' queues and are taken, counted, after each test): the programs' part
 *   read   recording on, and a reader taking them every 100 ms as the agent does (a
 *          process of its own, `bench.js drain-flows`), decoding each: the programs'
 *          part with the agent's reading beside it on the same two CPUs
 *
 * Crossings per TCP_RR packet are measured with recording on, against off: a record
 * must cost no trip through the backlog. The records taken must be every judged flow
 * (none lost), which the check after the runs holds them to. While recording, the pods'
 * flow tables count each packet: during the crossings run, each TCP_RR transaction must
 * add 4 (request and response, once in the client's table and once in the server's).
 * The reader also reads the tables every 2 s, as the agent does for flows' ends.
 *
 * Then a flood: an established TCP_RR flow across nodes is timed while the same client
 * opens new TCP_CRR connections to its server on the same node as fast as it can (two
 * records each), each variant. With nobody reading, the flood fills the queue and the
 * records past it are counted lost; the established flow's pace, on or read ÷ off, must
 * not fall for it.
 */
import { type ChildProcess, spawn } from "node:child_process";
import {
  decodePolicyEvent,
  listNodeCountedFlows,
  openPolicyMaps,
  type PolicyMaps,
  policyFlowTables,
  setFlowRecording,
  takeFlowEvents,
} from "../../src/bpf/index";
import { readFlowRecordsLost } from "../../src/bpf/policy/maps";
import type { ClusterNode } from "../../test/support/topology";
import { tick } from "./cleanup";
import { type NetifRxCounter, rrCrossings, WARM_UP_TRANSACTIONS } from "./crossings";
import {
  FLOW_VARIANTS,
  type FlowVariant,
  POLICY_PLACEMENTS,
  POLICY_TESTS,
  type PolicyFlowsRun,
  type PolicyModeSamples,
  type PolicyTest,
} from "./policy-result";
import { turnedBy } from "./stats";

type Rr = (placement: "across" | "same", test: PolicyTest, length: number) => { value: number; error?: string };
/** A netperf TCP_CRR run of `seconds` from the client to its server of `placement`, in the background: its connections per second. */
type Flood = (placement: "across" | "same", seconds: number) => Promise<{ value: number; error?: string }>;

/** Packets of the crossings run's two netperf connections (control and data, both runs)
 * beyond its transactions, counted once in each pod's table: 80 measured at 1000
 * transactions, any count. */
const NETPERF_OVERHEAD_PACKETS = 200;

/** `fn` on each node's policy maps in turn, closed after. */
function eachNodeMaps(nodes: readonly ClusterNode[], fn: (maps: PolicyMaps) => void): void {
  for (const node of nodes) {
    const maps = openPolicyMaps(node.bpffsRoot);
    if (!maps) throw new Error(`node ${node.name}: no policy maps`);
    try {
      fn(maps);
    } finally {
      maps.close();
    }
  }
}

/** Recording on or off on every node, the queues emptied: how many records they held. */
function switchAll(nodes: readonly ClusterNode[], on: boolean): { taken: number; lost: bigint } {
  let taken = 0;
  let lost = 0n;
  eachNodeMaps(nodes, (maps) => {
    setFlowRecording(maps, on);
    for (let batch = takeFlowEvents(maps, 65536); batch.length > 0; batch = takeFlowEvents(maps, 65536))
      taken += batch.length;
    lost += readFlowRecordsLost(maps);
  });
  return { taken, lost };
}

/** Packets every node's flow tables counted, both ways, summed. */
function countedPackets(nodes: readonly ClusterNode[]): bigint {
  let sum = 0n;
  eachNodeMaps(nodes, (maps) => {
    for (const flows of listNodeCountedFlows(policyFlowTables(maps)).values())
      for (const f of flows) sum += f.packets.egress + f.packets.ingress;
  });
  return sum;
}

/** `bench.js drain-flows ROOT...`: takes and decodes the nodes' records every 100 ms, and reads their flow tables' counts every 2 s, until killed, as the agent does. */
export function drainFlows(roots: string[]): void {
  const maps = roots.map((root) => {
    const m = openPolicyMaps(root);
    if (!m) throw new Error(`${root}: no policy maps`);
    return m;
  });
  let taken = 0;
  /** One turn; true when a node's queue gave a whole batch (the next turn then comes at once, as the agent's). */
  const turn = (): boolean => {
    let full = false;
    for (const m of maps) {
      const batch = takeFlowEvents(m, 4096);
      for (const raw of batch) taken += decodePolicyEvent(raw).proto > 0 ? 1 : 0;
      full ||= batch.length >= 4096;
    }
    return full;
  };
  let timer: NodeJS.Timeout;
  const schedule = (ms: number) => {
    timer = setTimeout(() => schedule(turn() ? 0 : 100), ms);
  };
  schedule(100);
  const tables = setInterval(() => {
    for (const m of maps) listNodeCountedFlows(policyFlowTables(m));
  }, 2000);
  process.once("SIGTERM", () => {
    clearTimeout(timer);
    clearInterval(tables);
    turn();
    process.stdout.write(`${taken}\n`);
    process.exit(0);
  });
  process.stdout.write("ready\n");
}

/**
 * The reader, started and settled before the test it reads beside: its process's start
 * (loading the bundle) is a burst of CPU the agent pays once, not on every test, and a
 * burst beside netperf changes where the scheduler puts netperf's two ends.
 */
async function startReader(nodes: readonly ClusterNode[]): Promise<{ stop(): Promise<number> }> {
  const child: ChildProcess = spawn(
    process.execPath,
    [process.argv[1] as string, "drain-flows", ...nodes.map((n) => n.bpffsRoot)],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let out = "";
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      if (out.startsWith("ready\n")) resolve();
    });
    child.once("close", (code) => reject(new Error(`the flow reader exited (${code}) before it was ready`)));
  });
  out = out.slice("ready\n".length);
  await new Promise((r) => setTimeout(r, 500));
  return {
    stop: () =>
      new Promise((resolve) => {
        child.removeAllListeners("close");
        child.once("close", () => resolve(Number(out.trim()) || 0));
        child.kill("SIGTERM");
      }),
  };
}

export async function measureFlowRecords(
  nodes: readonly ClusterNode[],
  rr: Rr,
  flood: Flood,
  counter: NetifRxCounter,
  opts: { rounds: number; seconds: number; transactions: number; crrConnections: number },
  errors: string[],
): Promise<PolicyFlowsRun> {
  const empty = (): PolicyModeSamples => ({
    across: { TCP_RR: [], TCP_CRR: [] },
    same: { TCP_RR: [], TCP_CRR: [] },
  });
  const samples = Object.fromEntries(FLOW_VARIANTS.map((v) => [v, empty()])) as Record<FlowVariant, PolicyModeSamples>;
  const lostBefore = switchAll(nodes, false).lost;
  let records = 0;
  let crrRecords = 0;
  let crrRuns = 0;

  const crossings: PolicyFlowsRun["crossings"] = [];
  const countedPerRrTransaction: NonNullable<PolicyFlowsRun["countedPerRrTransaction"]> = {};
  for (const placement of POLICY_PLACEMENTS) {
    for (const variant of ["off", "on"] as const) {
      await tick();
      switchAll(nodes, variant === "on");
      const countedBefore = countedPackets(nodes);
      const { lost, ...counted } = rrCrossings(
        counter,
        (n) => rr(placement, "TCP_RR", -n),
        opts.transactions,
        `flows ${variant} ${placement}`,
      );
      if (lost > 0) errors.push(`flows crossings ${variant} ${placement}: ${lost} trace events lost`);
      crossings.push({ variant, placement, ...counted });
      records += switchAll(nodes, false).taken;
      // The warm-up's transactions are counted too (rrCrossings runs it first).
      const transactions = opts.transactions + WARM_UP_TRANSACTIONS;
      const packets = Number(countedPackets(nodes) - countedBefore);
      if (variant === "off" && packets > 0) errors.push(`flows: ${packets} packets counted while recording was off`);
      if (variant === "on") {
        countedPerRrTransaction[placement] = packets / transactions;
        // Beyond the 4 a transaction: the two runs' handshakes, closes and control connections.
        const extra = packets - 4 * transactions;
        if (extra < 0 || extra > NETPERF_OVERHEAD_PACKETS)
          errors.push(
            `flows ${placement}: ${packets} packets counted for ${transactions} TCP_RR transactions, expected 4 each and at most ${NETPERF_OVERHEAD_PACKETS} more`,
          );
      }
    }
  }

  for (let round = 0; round < opts.rounds; round++) {
    for (const test of POLICY_TESTS) {
      for (const placement of POLICY_PLACEMENTS) {
        for (const variant of turnedBy(FLOW_VARIANTS, round)) {
          await tick();
          switchAll(nodes, variant !== "off");
          const reader = variant === "read" ? await startReader(nodes) : undefined;
          const r = rr(placement, test, test === "TCP_CRR" ? -opts.crrConnections : opts.seconds);
          const read = (await reader?.stop()) ?? 0;
          const left = switchAll(nodes, false).taken;
          if (variant === "off" && left > 0) errors.push(`flows: ${left} records made while recording was off`);
          if (r.error) errors.push(`flows round ${round + 1} ${variant} ${placement} ${test}: ${r.error}`);
          samples[variant][placement][test].push(r.value);
          records += read + left;
          if (test === "TCP_CRR" && variant !== "off") {
            crrRecords += read + left;
            crrRuns += 1;
          }
        }
      }
    }
    process.stderr.write(`  policy flows round ${round + 1}/${opts.rounds}\n`);
  }
  const flooded = await measureFlood(nodes, rr, flood, opts, errors);
  const lost =
    Number(switchAll(nodes, false).lost - lostBefore) - FLOW_VARIANTS.reduce((n, v) => n + flooded.lost[v], 0);
  // Each TCP_CRR connection is judged twice (the client's egress, the server's ingress):
  // two records, the SYN's; netperf's own control connection adds a few.
  const perConnection = crrRuns > 0 ? crrRecords / (crrRuns * opts.crrConnections) : 0;
  if (lost > 0) errors.push(`flows: ${lost} records lost`);
  if (crrRuns > 0 && (perConnection < 2 || perConnection > 2.1))
    errors.push(`flows: ${perConnection.toFixed(3)} records per TCP_CRR connection, expected 2`);
  return {
    samples,
    crossings,
    records,
    lost,
    recordsPerCrrConnection: perConnection,
    countedPerRrTransaction,
    flood: flooded,
  };
}

/** Records lost so far, over the nodes. */
function lostSoFar(nodes: readonly ClusterNode[]): number {
  let lost = 0n;
  eachNodeMaps(nodes, (maps) => {
    lost += readFlowRecordsLost(maps);
  });
  return Number(lost);
}

async function measureFlood(
  nodes: readonly ClusterNode[],
  rr: Rr,
  flood: Flood,
  opts: { rounds: number; seconds: number },
  errors: string[],
): Promise<NonNullable<PolicyFlowsRun["flood"]>> {
  const rrUnder = Object.fromEntries(FLOW_VARIANTS.map((v) => [v, [] as number[]])) as Record<FlowVariant, number[]>;
  const lost = Object.fromEntries(FLOW_VARIANTS.map((v) => [v, 0])) as Record<FlowVariant, number>;
  const floodConnections: number[] = [];
  for (let round = 0; round < opts.rounds; round++) {
    for (const variant of turnedBy(FLOW_VARIANTS, round)) {
      await tick();
      switchAll(nodes, variant !== "off");
      const reader = variant === "read" ? await startReader(nodes) : undefined;
      const lostBefore = lostSoFar(nodes);
      // The flood runs a second longer on each side of the timed flow.
      const flooding = flood("same", opts.seconds + 2);
      await new Promise((r) => setTimeout(r, 1000));
      const r = rr("across", "TCP_RR", opts.seconds);
      const f = await flooding;
      await reader?.stop();
      lost[variant] += lostSoFar(nodes) - lostBefore;
      switchAll(nodes, false);
      if (r.error) errors.push(`flows flood round ${round + 1} ${variant}: ${r.error}`);
      if (f.error) errors.push(`flows flood round ${round + 1} ${variant}: the flood: ${f.error}`);
      rrUnder[variant].push(r.value);
      floodConnections.push(f.value);
    }
    process.stderr.write(`  policy flows flood round ${round + 1}/${opts.rounds}\n`);
  }
  if (lost.off > 0) errors.push(`flows flood: ${lost.off} records lost while recording was off`);
  return { rr: rrUnder, lost, floodConnections };
}
