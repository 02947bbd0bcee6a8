/**
 * What the NetworkPolicy section (bench/lib/policy.ts) checks, so its figures are of the
 * modes they are named for: the pods' entries in the maps (and, with tiers, their slots'
 * tier entries), a flow no rule allows refused, flows a ClusterNetworkPolicy's Deny
 * should refuse refused by that tier, and the programs' own counters (nkc_pol_stats,
 * nkc_pol_verdicts) over the measurement.
 */
import {
  openPolicyMaps,
  POL_F_ISOLATED_IN,
  POL_F_ISOLATED_OUT,
  podKey,
  readPolicyPod,
  readPolicyStats,
  readPolicyVerdicts,
  readTier,
} from "../../src/bpf/index";
import { inNs } from "../../test/support/harness";
import { type ClusterNode, ifindexOf, type Pod } from "../../test/support/topology";
import { type ModePods, namedPods, nodeOf } from "./policy-pods";
import type { PolicyMode, PolicyRun, PolicyVerdicts, TierDecision, TierProbe } from "./policy-result";
import { NETPERF_PORTS, SELECTED_NS, UNJUDGED_NS } from "./policy-set";

/** The policy maps of the pod's node, open for `read`. */
function withMaps<T>(pod: Pod, read: (maps: NonNullable<ReturnType<typeof openPolicyMaps>>) => T): T {
  const maps = openPolicyMaps(pod.node.bpffsRoot);
  if (!maps) throw new Error(`policy: no NetworkPolicy maps on node ${pod.node.name}`);
  try {
    return read(maps);
  } finally {
    maps.close();
  }
}

/** The modes whose pods are in a network enforcing policy. */
const JUDGED_MODES = ["none", "selected", "tiers"] as const;

/**
 * The selected pods isolated as their policies say and none pending, their slots without
 * tiers; the tiers pods isolated both ways (ClusterNetworkPolicies' subjects), their
 * slots read by tiers as their rules say; the unjudged pods without an entry.
 */
export function checkEntries(pods: Record<PolicyMode, ModePods>): string[] {
  const errors: string[] = [];
  const expected = (mode: (typeof JUDGED_MODES)[number], name: string) => {
    if (mode === "none") return undefined;
    if (mode === "tiers") return name === "client" ? POL_F_ISOLATED_IN | POL_F_ISOLATED_OUT : POL_F_ISOLATED_IN;
    return name === "client" ? POL_F_ISOLATED_OUT : POL_F_ISOLATED_IN;
  };
  for (const mode of JUDGED_MODES) {
    const namespace = mode === "none" ? UNJUDGED_NS : SELECTED_NS;
    for (const [name, pod] of namedPods(pods[mode])) {
      const { flags, tiers } = withMaps(pod, (maps) => {
        const entry = readPolicyPod(maps, podKey(namespace, name));
        const read = (dir: "ingress" | "egress") => (entry ? readTier(maps, entry.slot, dir) : undefined);
        return { flags: entry?.flags, tiers: { ingress: read("ingress"), egress: read("egress") } };
      });
      const want = expected(mode, name);
      if (flags !== want)
        errors.push(`${mode} ${namespace}/${name}: flags ${flags ?? "none"}, expected ${want ?? "none"}`);
      if (mode !== "tiers") {
        if (tiers.ingress || tiers.egress) errors.push(`${mode} ${namespace}/${name}: its slot has tiers`);
        continue;
      }
      // The rules that apply to netperf's flows: the servers' Admin Accept and Baseline
      // (ingress), the client's Admin Pass (egress); the servers' egress not judged.
      const client = name === "client";
      if (!tiers.ingress || !tiers.egress !== !client)
        errors.push(`tiers ${name}: its slot's directions read by tiers are not those expected`);
      else if (client ? tiers.egress?.pass === 0n : tiers.ingress.admin === 0n || tiers.ingress.baseline === 0n)
        errors.push(`tiers ${name}: its slot's tiers lack the rules netperf's flows meet`);
    }
  }
  return errors;
}

/** The flows the pod's node judged for it (nkc_pol_stats). */
function statsOf(pod: Pod): ReturnType<typeof readPolicyStats> {
  return withMaps(pod, (maps) => readPolicyStats(maps, ifindexOf(pod.node.netns, pod.hostDevice)));
}

/** A TCP connection from `client` to `target`'s netserver, which its egress rules do not allow. */
export function probeDenied(client: Pod, target: Pod): PolicyRun["probe"] {
  const before = statsOf(client).denied.egress;
  let refused = false;
  try {
    inNs(client.netns, "timeout", ["2", "bash", "-c", `exec 3<>/dev/tcp/${target.v4}/${NETPERF_PORTS[0]}`]);
  } catch {
    refused = true;
  }
  return { refused, deniedEgress: Number(statsOf(client).denied.egress - before) };
}

/** New flows the node's programs judged, by direction, deciding tier and verdict. */
function nodeDecisions(node: ClusterNode): TierDecision[] {
  const maps = openPolicyMaps(node.bpffsRoot);
  if (!maps) throw new Error(`policy: no NetworkPolicy maps on node ${node.name}`);
  try {
    return readPolicyVerdicts(maps).map((v) => ({ node: node.name, ...v, flows: Number(v.flows) }));
  } finally {
    maps.close();
  }
}

/** Both nodes' decisions (the tiers cluster's). */
export const decisionsOf = (nodes: readonly ClusterNode[]): TierDecision[] => nodes.flatMap(nodeDecisions);

/** What `after` counted more than `before`, non-zero counts only. */
export function decisionsGrown(before: TierDecision[], after: TierDecision[]): TierDecision[] {
  const same = (a: TierDecision, b: TierDecision) =>
    a.node === b.node && a.direction === b.direction && a.tier === b.tier && a.verdict === b.verdict;
  return after
    .map((a) => ({ ...a, flows: a.flows - (before.find((b) => same(a, b))?.flows ?? 0) }))
    .filter((d) => d.flows > 0);
}

/**
 * A TCP connection from `client` to `target` on `port` that the rule named should deny:
 * refused, and counted by the client's node as denied on egress by `tier`.
 */
export function probeTier(
  [client, clientName]: [Pod, string],
  [target, targetName]: [Pod, string],
  port: number,
  tier: "admin" | "baseline",
  rule: string,
): TierProbe {
  const node = client.node;
  const denied = () =>
    nodeDecisions(node).find((d) => d.direction === "egress" && d.tier === tier && d.verdict === "denied")?.flows ?? 0;
  const before = denied();
  let refused = false;
  try {
    inNs(client.netns, "timeout", ["2", "bash", "-c", `exec 3<>/dev/tcp/${target.v4}/${port}`]);
  } catch {
    refused = true;
  }
  return { flow: `${clientName} → ${targetName}:${port}`, rule, refused, denied: denied() - before };
}

/**
 * The tiers pods' flows over the measurement: the servers' ingress decided by the Admin
 * Accept, the client's egress by its NetworkPolicies (after the Admin Pass), none denied.
 */
export function checkDecisions(decided: TierDecision[], tiers: ModePods): string[] {
  const errors: string[] = [];
  const count = (direction: TierDecision["direction"], tier: TierDecision["tier"], verdict: TierDecision["verdict"]) =>
    decided
      .filter((d) => d.direction === direction && d.tier === tier && d.verdict === verdict)
      .reduce((n, d) => n + d.flows, 0);
  if (count("ingress", "admin", "allowed") === 0) errors.push("tiers: no flow allowed by the Admin tier on ingress");
  if (count("egress", "networkPolicy", "allowed") === 0)
    errors.push("tiers: no flow passed to NetworkPolicy and allowed on egress");
  const denied = decided.filter((d) => d.verdict === "denied").reduce((n, d) => n + d.flows, 0);
  if (denied > 0) errors.push(`tiers: ${denied} flows denied while measured`);
  const clientNode = nodeOf(tiers.client);
  if (!decided.some((d) => d.node === clientNode && d.direction === "egress"))
    errors.push(`tiers: node ${clientNode} judged none of the client's flows`);
  return errors;
}

/** Every netperf pod's judged flows in the networks enforcing policy, from its node's nkc_pol_stats. */
export function verdictsOf(pods: Record<PolicyMode, ModePods>): PolicyVerdicts[] {
  const out: PolicyVerdicts[] = [];
  for (const mode of JUDGED_MODES) {
    for (const [name, pod] of namedPods(pods[mode])) {
      const s = statsOf(pod);
      out.push({
        mode,
        pod: name,
        allowed: { egress: Number(s.allowed.egress), ingress: Number(s.allowed.ingress) },
        denied: { egress: Number(s.denied.egress), ingress: Number(s.denied.ingress) },
      });
    }
  }
  return out;
}

/** The measurement judged the selected pods' flows, allowed every one, and judged nothing of the others. */
export function checkVerdicts(before: PolicyVerdicts[], after: PolicyVerdicts[]): string[] {
  const errors: string[] = [];
  for (const a of after) {
    const b = before.find((x) => x.mode === a.mode && x.pod === a.pod);
    const grew = (d: "allowed" | "denied", dir: "egress" | "ingress") => a[d][dir] - (b?.[d][dir] ?? 0);
    const denied = grew("denied", "egress") + grew("denied", "ingress");
    if (denied > 0) errors.push(`${a.mode} ${a.pod}: ${denied} flows denied while measured`);
    const allowed = a.pod === "client" ? grew("allowed", "egress") : grew("allowed", "ingress");
    if (a.mode !== "none" && allowed === 0) errors.push(`${a.mode} ${a.pod}: no flow judged`);
    if (a.mode === "none" && a.allowed.egress + a.allowed.ingress + a.denied.egress + a.denied.ingress > 0) {
      errors.push(`none ${a.pod}: flows judged in a namespace without policy`);
    }
  }
  return errors;
}
