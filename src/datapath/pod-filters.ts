/**
 * A veth pod's programs as tc filters (`"podHook": "tc"`): direct-action cls_bpf filters
 * on its host device's clsact hook (netlink/tc-filter.ts), in place of pinned tcx links.
 * A filter is published and freed under RCU without waiting for a grace period, where a
 * tcx link waits for one on attach and again on release: ADD and DEL keep none waiting.
 *
 * What that costs elsewhere: a filter has no pin and no owner. ADD marks nothing on
 * bpffs; CHECK reads the device's filters (podFilters) and fails when one is gone, which
 * anyone who may change the device's qdiscs can do; a new build's ADD replaces each in place
 * (switchPodFilters), as BPF_LINK_UPDATE switches a link; the filters go with the device.
 */
import { type BpfProgram, type NodePrograms, PROGRAM_NAMES } from "../bpf/index";
import { log } from "../log";
import type { RtnlSocket } from "../netlink/socket";
import { attachBpfFilter, type BpfFilter, listBpfFilters, type TcHook } from "../netlink/tc-filter";
import { endpointState } from "./node-state";

/**
 * Where each of a pod's programs runs: what the pod sends at the host device's ingress;
 * on its egress, NetworkPolicy ahead of the ingress limit, so that what policy drops is
 * not charged to the limit (the order tcx gives them by attaching policy first).
 */
export const POD_FILTERS = {
  fromPod: { hook: "ingress", priority: 1 },
  policy: { hook: "egress", priority: 1 },
  ingressLimit: { hook: "egress", priority: 2 },
} as const satisfies Record<string, { hook: TcHook; priority: number }>;

export type PodFilterRole = keyof typeof POD_FILTERS;

/** The programs each role may run: the pod's own is the fast path's or the source check. */
const ROLE_PROGRAMS: Record<PodFilterRole, readonly string[]> = {
  fromPod: [PROGRAM_NAMES.fromPod, PROGRAM_NAMES.sourceCheck],
  policy: [PROGRAM_NAMES.podPolicy],
  ingressLimit: [PROGRAM_NAMES.podIngress],
};

/** Runs `program` in `role` on the pod's host device, in place of what ran there; the
 * device needs its clsact qdisc first (ensureClsact). */
export async function attachPodFilter(
  sock: RtnlSocket,
  hostIfindex: number,
  role: PodFilterRole,
  program: BpfProgram,
): Promise<void> {
  const { hook, priority } = POD_FILTERS[role];
  await attachBpfFilter(sock, hostIfindex, hook, priority, program.fd, program.name);
}

/** The role a filter at `hook` and `priority` running `name` plays; undefined: not ours. */
function roleOf(filter: BpfFilter): PodFilterRole | undefined {
  for (const [role, at] of Object.entries(POD_FILTERS) as [PodFilterRole, (typeof POD_FILTERS)[PodFilterRole]][]) {
    if (at.hook === filter.hook && at.priority === filter.priority && ROLE_PROGRAMS[role].includes(filter.name)) {
      return role;
    }
  }
  return undefined;
}

/** The pod's filters by role, as the device has them now (CHECK, `endpoints`). */
export async function podFilters(
  sock: RtnlSocket,
  hostIfindex: number,
): Promise<Partial<Record<PodFilterRole, BpfFilter>>> {
  const found: Partial<Record<PodFilterRole, BpfFilter>> = {};
  for (const hook of ["ingress", "egress"] as const) {
    for (const filter of await listBpfFilters(sock, hostIfindex, hook)) {
      const role = roleOf(filter);
      if (role) found[role] = filter;
    }
  }
  return found;
}

/** The ids of the programs a pod's filters may run on this node now. */
function podProgramIds(programs: NodePrograms["programs"]): Set<number> {
  const { fromPod, sourceCheck, podPolicy, podIngress } = programs;
  return new Set([fromPod.id(), sourceCheck.id(), podPolicy.id(), podIngress.id()]);
}

/**
 * Points every pod filter on these devices at this build's program of the same name,
 * replacing each in place (the swap is atomic: no frame passes the hook unfiltered). The
 * devices are the endpoint map's veth pods; one with no filters (a tcx pod) is untouched,
 * and one that is gone is GC's to clean up while the others still move.
 */
export async function switchPodFilters(
  sock: RtnlSocket,
  hostIfindexes: Iterable<number>,
  programs: NodePrograms["programs"],
): Promise<void> {
  const ours = podProgramIds(programs);
  const byName = new Map<string, BpfProgram>(
    [programs.fromPod, programs.sourceCheck, programs.podPolicy, programs.podIngress].map((p) => [p.name, p]),
  );
  for (const ifindex of new Set(hostIfindexes)) {
    try {
      for (const [role, filter] of Object.entries(await podFilters(sock, ifindex)) as [PodFilterRole, BpfFilter][]) {
        const program = byName.get(filter.name);
        if (!program || ours.has(filter.programId)) continue;
        await attachPodFilter(sock, ifindex, role, program);
      }
    } catch (e) {
      log.warn(
        `endpoint ifindex ${ifindex}: cannot switch its filters to this build's programs: ${(e as Error).message}`,
      );
    }
  }
}

/** Which of a pod's programs run on its host device, as pinned links or as filters. */
export interface AttachedPodPrograms {
  fromPod: boolean;
  policy: boolean;
  ingressLimit: boolean;
}

/** What CHECK and `endpoints` hold a pod to: its links' pins (endpointState), else its
 * filters; a device with neither has lost its programs. */
export async function attachedPodPrograms(
  sock: RtnlSocket,
  root: string,
  hostDevice: string,
  hostIfindex: number,
): Promise<AttachedPodPrograms> {
  const pinned = endpointState(root, hostDevice);
  const filters = await podFilters(sock, hostIfindex);
  return {
    fromPod: pinned.pinned || filters.fromPod !== undefined,
    policy: pinned.policy || filters.policy !== undefined,
    ingressLimit: pinned.ingressLimit || filters.ingressLimit !== undefined,
  };
}
