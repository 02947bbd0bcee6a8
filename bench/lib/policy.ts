/**
 * NetworkPolicy's cost: the same netperf client and servers three ways side by side,
 * veth pods with the fast path on, across nodes and on one node:
 *
 *   off        a network without "networkPolicy", on a two-node cluster of its own (so
 *              no policy program, not even the uplink's, sees its packets): the baseline
 *   none       a network with "networkPolicy": true, the pods in a namespace without a
 *              policy: nothing judged, the lookups that find no policy
 *   selected   the same network, the pods in a namespace whose policies select them: 3
 *              isolate the servers' ingress and 3 the client's egress, allowing each
 *              other on netperf's ports, among 100 policies in the maps (policy-set.ts)
 *   tiers      a third cluster enforcing policy (so selected's maps stay as they were),
 *              the same pods and 100 policies with 50 ClusterNetworkPolicies beside them:
 *              the servers' ingress accepted by an Admin rule, the client's egress passed
 *              by one to its NetworkPolicies, a Baseline whose Accept matches the flows
 *              too (policy-set.ts)
 *
 * The policies are compiled and written into the nodes' pinned maps as the agent does
 * (policy-write.ts), after the pods' ADDs,
 * which name each pod by CNI_ARGS as a runtime does; no API server.
 *
 * Measured: backlog-queue crossings per TCP_RR packet (exact: the policy must cost none)
 * and netperf TCP_RR and TCP_CRR, interleaved round by round, the modes' order turning.
 * The programs' own counters (nkc_pol_stats) show the selected pods were judged, and a
 * probe that no rule allows shows it denied; the none pods' show nothing judged. In the
 * tiers cluster, the nodes' nkc_pol_verdicts show which tier decided the measured flows,
 * and a probe is refused by the tier meant to (an Admin Deny). Then flow records' cost on
 * the selected pods (policy-flows.ts).
 */
import { netperf, netperfInBackground, startNetserver } from "../../test/support/netperf";
import { type ClusterNode, makeCluster } from "../../test/support/topology";
import { newFixture, tick } from "./cleanup";
import { type NetifRxCounter, RR_REQUEST, RR_RESPONSE, rrCrossings } from "./crossings";
import type { Placement } from "./paths";
import {
  checkDecisions,
  checkEntries,
  checkVerdicts,
  decisionsGrown,
  decisionsOf,
  probeDenied,
  probeTier,
  verdictsOf,
} from "./policy-checks";
import { measureFlowRecords } from "./policy-flows";
import { addPods, type ModePods } from "./policy-pods";
import {
  POLICY_MODES,
  POLICY_PLACEMENTS,
  POLICY_TESTS,
  type PolicyCrossing,
  type PolicyMode,
  type PolicyRun,
  type PolicyTest,
  type PolicyTiersRun,
} from "./policy-result";
import { DENIED_PORT, NETPERF_PORTS, SELECTED_NS, UNJUDGED_NS } from "./policy-set";
import { writePolicies } from "./policy-write";
import { turnedBy } from "./stats";

export type { PolicyRun } from "./policy-result";

/** TCP_CRR runs a fixed number of connections: with a time limit netperf waits out
 * netserver's 4 s padding timer after each test. */
const CRR_CONNECTIONS = 4000;

interface Opts {
  rounds: number;
  seconds: number;
  transactions: number;
}

/** One netperf test from a mode's client to its server of `placement`; a negative length counts transactions. */
type Rr = (mode: PolicyMode, placement: Placement, test: PolicyTest, length: number) => ReturnType<typeof netperf>;

/** netperf's test options here: the request and response sizes, and the data port the policies allow. */
const RR_ARGS = ["-r", `${RR_REQUEST},${RR_RESPONSE}`, "-P", `,${NETPERF_PORTS[1]}`];

function rrOf(pods: Record<PolicyMode, ModePods>): Rr {
  return (mode, placement, test, length) =>
    netperf(pods[mode].client.netns, pods[mode].servers[placement].v4, test, length, RR_ARGS);
}

/** Crossings per TCP_RR packet, each mode and placement, after a warm-up. */
async function measureCrossings(counter: NetifRxCounter, rr: Rr, transactions: number, errors: string[]) {
  const crossings: PolicyCrossing[] = [];
  for (const placement of POLICY_PLACEMENTS) {
    for (const mode of POLICY_MODES) {
      await tick();
      const run = (n: number) => rr(mode, placement, "TCP_RR", -n);
      const { lost, ...counted } = rrCrossings(counter, run, transactions, `policy, ${mode} ${placement}`);
      if (lost > 0) errors.push(`crossings ${mode} ${placement}: ${lost} trace events lost`);
      const c: PolicyCrossing = { mode, placement, ...counted };
      crossings.push(c);
      process.stderr.write(
        `  policy crossings ${mode.padEnd(8)} ${placement.padEnd(6)} request ${c.rrRequest.total.toFixed(3)}, response ${c.rrResponse.total.toFixed(3)}\n`,
      );
    }
  }
  return crossings;
}

/** Interleaved rounds: per test and placement every mode, their order turning each round. */
async function measureRounds(rr: Rr, opts: Opts, errors: string[]): Promise<PolicyRun["samples"]> {
  const empty = () => ({ TCP_RR: [] as number[], TCP_CRR: [] as number[] });
  const samples = Object.fromEntries(POLICY_MODES.map((m) => [m, { across: empty(), same: empty() }])) as Required<
    PolicyRun["samples"]
  >;
  for (let round = 0; round < opts.rounds; round++) {
    for (const test of POLICY_TESTS) {
      for (const placement of POLICY_PLACEMENTS) {
        for (const mode of turnedBy(POLICY_MODES, round)) {
          await tick();
          const r = rr(mode, placement, test, test === "TCP_CRR" ? -CRR_CONNECTIONS : opts.seconds);
          if (r.error) errors.push(`round ${round + 1} ${mode} ${placement} ${test}: ${r.error}`);
          samples[mode][placement][test].push(r.value);
        }
      }
    }
    process.stderr.write(`  policy round ${round + 1}/${opts.rounds}\n`);
  }
  return samples;
}

/**
 * Three clusters (policy off; on; on with ClusterNetworkPolicies), each mode's pods and
 * netservers, the selected and tiers pods' policies written.
 */
function setUp() {
  const offFx = newFixture("pol-off");
  const onFx = newFixture("pol-on");
  const tiersFx = newFixture("pol-tiers");
  const offNodes = makeCluster(offFx, { logLevel: "info" });
  const onNodes: [ClusterNode, ClusterNode] = makeCluster(onFx, { logLevel: "info", networkPolicy: true });
  const tiersNodes: [ClusterNode, ClusterNode] = makeCluster(tiersFx, { logLevel: "info", networkPolicy: true });
  const pods: Record<PolicyMode, ModePods> = {
    off: addPods(offFx, offNodes, "bench-off", "off"),
    none: addPods(onFx, onNodes, UNJUDGED_NS, "none"),
    selected: addPods(onFx, onNodes, SELECTED_NS, "sel"),
    tiers: addPods(tiersFx, tiersNodes, SELECTED_NS, "tie"),
  };
  const fixtureOf = { off: offFx, none: onFx, selected: onFx, tiers: tiersFx };
  for (const [mode, set] of Object.entries(pods) as [PolicyMode, ModePods][]) {
    for (const server of Object.values(set.servers)) startNetserver(fixtureOf[mode], server.netns);
  }
  const written = writePolicies(onNodes, pods.selected);
  const tiered = writePolicies(tiersNodes, pods.tiers, true);
  return {
    pods,
    written,
    tiered,
    onNodes,
    tiersNodes,
    cleanup: () => {
      offFx.cleanup();
      onFx.cleanup();
      tiersFx.cleanup();
    },
  };
}

/**
 * The tiers pods' probe: the client to a server's ssh port, denied by an Admin Deny before
 * its NetworkPolicies are read (nothing listens there: the counter tells the denial).
 */
function probeTiers(tiers: ModePods): PolicyTiersRun["probes"] {
  return [
    probeTier(
      [tiers.client, "client"],
      [tiers.servers.across, "server-b"],
      DENIED_PORT,
      "admin",
      "bench-client-no-ssh/no-ssh (Admin Deny)",
    ),
  ];
}

export async function measurePolicy(counter: NetifRxCounter, opts: Opts): Promise<PolicyRun> {
  const { pods, written, tiered, onNodes, tiersNodes, cleanup } = setUp();
  const errors = checkEntries(pods);
  const probe = probeDenied(pods.selected.client, pods.none.servers.across);
  if (!probe.refused || probe.deniedEgress === 0) {
    errors.push(`the selected client reached ${pods.none.servers.across.v4}, which no rule allows`);
  }
  const probes = probeTiers(pods.tiers);
  for (const p of probes) {
    if (!p.refused || p.denied === 0) errors.push(`tiers: ${p.flow} not refused by ${p.rule}`);
  }
  const before = verdictsOf(pods);
  const decidedBefore = decisionsOf(tiersNodes);
  const rr = rrOf(pods);
  const crossings = await measureCrossings(counter, rr, opts.transactions, errors);
  const samples = await measureRounds(rr, opts, errors);
  const flows = await measureFlowRecords(
    onNodes,
    (placement, test, length) => rr("selected", placement, test, length),
    (placement, seconds) =>
      netperfInBackground(pods.selected.client.netns, pods.selected.servers[placement].v4, "TCP_CRR", seconds, RR_ARGS),
    counter,
    { ...opts, crrConnections: CRR_CONNECTIONS },
    errors,
  );
  const verdicts = verdictsOf(pods);
  const decided = decisionsGrown(decidedBefore, decisionsOf(tiersNodes));
  errors.push(...checkVerdicts(before, verdicts), ...checkDecisions(decided, pods.tiers));
  cleanup();
  return {
    rounds: opts.rounds,
    seconds: opts.seconds,
    crrConnections: CRR_CONNECTIONS,
    policies: written.policies,
    maps: written.maps,
    probe,
    crossings,
    samples,
    verdicts,
    tiers: { policies: tiered.policies, maps: tiered.maps, probes, decided },
    flows,
    errors,
  };
}
