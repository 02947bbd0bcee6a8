/**
 * What the NetworkPolicy section (bench/lib/policy.ts) checks, so its figures are of the
 * modes they are named for: the pods' entries in the maps, a flow no rule allows refused,
 * and the programs' own counters (nkc_pol_stats) over the measurement.
 */
import {
  openPolicyMaps,
  POL_F_ISOLATED_IN,
  POL_F_ISOLATED_OUT,
  podKey,
  readPolicyPod,
  readPolicyStats,
} from "../../src/bpf/index";
import { inNs } from "../../test/support/harness";
import { ifindexOf, type Pod } from "../../test/support/topology";
import { type ModePods, namedPods } from "./policy-pods";
import type { PolicyMode, PolicyRun, PolicyVerdicts } from "./policy-result";
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

/** The selected pods isolated as their policies say and none pending; the unjudged pods without an entry. */
export function checkEntries(pods: Record<PolicyMode, ModePods>): string[] {
  const errors: string[] = [];
  const expected = (mode: "none" | "selected", name: string) => {
    if (mode === "none") return undefined;
    return name === "client" ? POL_F_ISOLATED_OUT : POL_F_ISOLATED_IN;
  };
  for (const mode of ["none", "selected"] as const) {
    const namespace = mode === "none" ? UNJUDGED_NS : SELECTED_NS;
    for (const [name, pod] of namedPods(pods[mode])) {
      const flags = withMaps(pod, (maps) => readPolicyPod(maps, podKey(namespace, name))?.flags);
      const want = expected(mode, name);
      if (flags !== want)
        errors.push(`${mode} ${namespace}/${name}: flags ${flags ?? "none"}, expected ${want ?? "none"}`);
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

/** Every netperf pod's judged flows in the network enforcing policy, from its node's nkc_pol_stats. */
export function verdictsOf(pods: Record<PolicyMode, ModePods>): PolicyVerdicts[] {
  const out: PolicyVerdicts[] = [];
  for (const mode of ["none", "selected"] as const) {
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
    if (a.mode === "selected" && allowed === 0) errors.push(`selected ${a.pod}: no flow judged`);
    if (a.mode === "none" && a.allowed.egress + a.allowed.ingress + a.denied.egress + a.denied.ingress > 0) {
      errors.push(`none ${a.pod}: flows judged in a namespace without policy`);
    }
  }
  return errors;
}
