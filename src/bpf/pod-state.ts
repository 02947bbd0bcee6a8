/**
 * Every piece of state a pod has in the node's maps, in one list: what holds it, how ADD
 * makes it, how CHECK compares it with the config, and how DEL and GC forget it, in the
 * order they must. GC and `status` list the ifindex-keyed ones to find the state of
 * devices that are gone. A new per-pod map is its C, its name in its feature's abi.ts and one entry
 * here; NodeMaps (node.ts) has a field for every name in MAP_NAMES.
 *
 * The endpoint entries are not here: they name the pod's addresses and go first (with
 * them, no new packet or socket is steered to the pod); datapath/fastpath.ts removes
 * them and then walks this list with the addresses it removed.
 */
import type { Bandwidth } from "../cni/bandwidth";
import {
  deletePodLimits,
  type EgressEnforcement,
  type IngressEnforcement,
  limitMismatches,
  podLimits,
  setPodLimits,
} from "./bandwidth/limits";
import { ifindexKey, MAP_NAMES } from "./fastpath/abi";
import { createFlowTable } from "./fastpath/direct";
import type { BpfMap } from "./loader/maps";
import type { NodeMaps } from "./node";
import { decodePolicyEndpoint, POL_F_PENDING, POLICY_MAP_NAMES } from "./policy/abi";
import { markPolicyPending, policyFlowTables, recordPolicyEndpoint } from "./policy/maps";
import { SOCK_MAP_NAMES } from "./sock/abi";
import { forgetSocketsOf, openSockMaps, type SockMaps } from "./sock/objects";
import { recordSockPod } from "./sock/pods";
import { SVC_MAP_NAMES } from "./svc/abi";
import { forgetSvcPod, openSvcMaps, recordSvcPod, type SvcMaps, svcPodIfindexes } from "./svc/objects";

/** The maps that can hold a pod's state: the node's, and the socket bypass's and Service
 * translation's where a network ever asked for them (undefined elsewhere). */
export interface PodStateMaps {
  node: NodeMaps;
  sock: SockMaps | undefined;
  svc: SvcMaps | undefined;
}

/** A pod as ADD makes its state and CHECK expects it. */
export interface PodSpec {
  hostIfindex: number;
  /** Its rate limits; absent: none. */
  bandwidth?: Bandwidth | undefined;
  /** How its limits are enforced (ADD: datapath/shaping.ts, pod-shaping.ts); absent: policed. */
  egress?: EgressEnforcement | undefined;
  ingress?: IngressEnforcement | undefined;
  /** Its network namespace's cookie, which the bypass and translation record (absent:
   * unknown, and neither acts for its sockets). */
  netnsCookie?: bigint | undefined;
  /** The socket bypass may splice its sockets. */
  sockBypass?: boolean;
  /** Service translation acts for its sockets. */
  serviceTranslation?: boolean;
  /** NetworkPolicy: the pod's key, and whether it waits for the agent's judgment. */
  policy?: { key: bigint; pending: boolean } | undefined;
}

/** A pod being forgotten: its host ifindex, and the addresses whose endpoint entries went. */
export interface GonePod {
  hostIfindex: number;
  addresses: ReadonlySet<string>;
}

export interface PodState {
  /** The pinned map that holds it. */
  map: string;
  /** That map among those open; undefined where it is not pinned. */
  in(maps: PodStateMaps): BpfMap | undefined;
  /** Keyed by the pod's host ifindex (GC and status list those); false: by its addresses. */
  byIfindex: boolean;
  /** ADD's part, on a device of its own making (absent: the programs write it). */
  make?(maps: PodStateMaps, pod: PodSpec): void;
  /** What differs from what the pod should have, said for people (absent: nothing to compare). */
  check?(maps: PodStateMaps, pod: PodSpec): string[];
  /** Removes what the pods had (default: their ifindexes' keys); returns a note for the log. */
  forget?(maps: PodStateMaps, pods: readonly GonePod[]): string | undefined;
}

/** A node map keyed by host ifindex. */
const nodeMap = (role: keyof typeof MAP_NAMES, more: Partial<PodState> = {}): PodState => ({
  map: MAP_NAMES[role],
  in: (maps) => maps.node[role],
  byIfindex: true,
  ...more,
});

/** A NetworkPolicy map keyed by host ifindex. */
const policyMap = (role: keyof typeof POLICY_MAP_NAMES, more: Partial<PodState> = {}): PodState => ({
  map: POLICY_MAP_NAMES[role],
  in: (maps) => maps.node.policy[role],
  byIfindex: true,
  ...more,
});

/** In the order DEL and GC forget them. */
export const POD_STATE: readonly PodState[] = [
  nodeMap("counters"), // packets by path
  nodeMap("drops"), // refusals by reason
  // Which slot of the flow-table pool is the pod's: a table of its own under a new
  // generation, so that nothing an earlier holder wrote proves a flow direct (fastpath/direct.ts);
  // forgotten, the table stays in its slot for the next pod.
  nodeMap("flowOwner", { make: ({ node }, pod) => createFlowTable(node.flows, pod.hostIfindex) }),
  nodeMap("flowStats"), // what its flow table remembered and forgot
  // Its rate limits; an entry an earlier holder of the ifindex left must not limit it.
  nodeMap("bandwidth", {
    make: ({ node }, pod) => {
      if (!pod.bandwidth) deletePodLimits(node.bandwidth, pod.hostIfindex);
      else setPodLimits(node.bandwidth, pod.hostIfindex, pod.bandwidth, pod.egress ?? { mode: "police" }, pod.ingress);
    },
    check: ({ node }, pod) => {
      const problems = limitMismatches(pod.bandwidth, podLimits(node.bandwidth, pod.hostIfindex));
      return problems.length > 0 ? [`rate limits: ${problems.join("; ")}`] : [];
    },
  }),
  // NetworkPolicy: the key its policy is found by, its slot of the policy's flow-table
  // pool, the flows its policy allowed and denied.
  // A pod the agent has not judged yet is marked pending (create-only: a judgment the agent
  // made already stands); an entry an earlier holder of the ifindex left must not name it.
  policyMap("endpoints", {
    make: ({ node }, pod) => {
      const key = ifindexKey(pod.hostIfindex);
      if (!pod.policy) {
        node.policy.endpoints.delete(key);
        return;
      }
      if (pod.policy.pending) markPolicyPending(node.policy, pod.policy.key, POL_F_PENDING);
      recordPolicyEndpoint(node.policy, pod.hostIfindex, pod.policy.key);
    },
    check: ({ node }, pod) => {
      if (!pod.policy) return [];
      const v = node.policy.endpoints.lookup(ifindexKey(pod.hostIfindex));
      return v && decodePolicyEndpoint(v) === pod.policy.key ? [] : ["NetworkPolicy: the pod's key is not recorded"];
    },
  }),
  policyMap("ctOwner", {
    make: ({ node }, pod) => {
      if (pod.policy) createFlowTable(policyFlowTables(node.policy), pod.hostIfindex);
      else node.policy.ctOwner.delete(ifindexKey(pod.hostIfindex));
    },
  }),
  policyMap("stats"),
  // The bypass: the pod's namespace first (from then on no socket is spliced to or from
  // it: nkc_sk_msg checks both ends' records), then its sockets, then their counters.
  {
    map: SOCK_MAP_NAMES.pods,
    in: (maps) => maps.sock?.pods,
    byIfindex: true,
    // Without the maps (the bypass could not run here), nothing is admitted.
    make: ({ sock }, pod) => {
      if (sock && pod.sockBypass && pod.netnsCookie !== undefined) {
        recordSockPod(sock.pods, pod.hostIfindex, pod.netnsCookie);
      }
    },
  },
  {
    map: SOCK_MAP_NAMES.hash,
    in: (maps) => maps.sock?.hash,
    byIfindex: false,
    forget: ({ sock }, pods) => {
      const ips = new Set(pods.flatMap((pod) => [...pod.addresses]));
      const n = sock && ips.size > 0 ? forgetSocketsOf(sock, ips) : 0;
      return n > 0 ? `socket bypass: took ${n} sockets of ${[...ips].join(", ")} out of the sockhash` : undefined;
    },
  },
  { map: SOCK_MAP_NAMES.stats, in: (maps) => maps.sock?.stats, byIfindex: true },
  // Service translation: the pod's namespace, counted for it (svc/objects.ts).
  {
    map: SVC_MAP_NAMES.pods,
    in: (maps) => maps.svc?.pods,
    byIfindex: true,
    make: ({ svc }, pod) => {
      if (!pod.serviceTranslation) return;
      if (!svc) throw new Error("service translation's maps are not pinned");
      if (pod.netnsCookie === undefined) throw new Error("service translation needs the pod's namespace cookie");
      recordSvcPod(svc, pod.hostIfindex, pod.netnsCookie);
    },
    check: ({ svc }, pod) => {
      const recorded = svc !== undefined && svcPodIfindexes(svc).includes(pod.hostIfindex);
      return !pod.serviceTranslation || recorded
        ? []
        : ["Service translation: no record, its sockets are not translated"];
    },
    forget: ({ svc }, pods) => {
      if (svc) for (const pod of pods) forgetSvcPod(svc, pod.hostIfindex);
      return undefined;
    },
  },
];

/** Opens the bypass's and translation's maps, where pinned, beside the node's. */
export function withPodStateMaps<T>(bpffsRoot: string, node: NodeMaps, fn: (maps: PodStateMaps) => T): T {
  const sock = openSockMaps(bpffsRoot);
  try {
    const svc = openSvcMaps(bpffsRoot);
    try {
      return fn({ node, sock, svc });
    } finally {
      svc?.close();
    }
  } finally {
    sock?.close();
  }
}

/** ADD: the pod's state, made before its addresses lead anywhere. */
export function makePodState(maps: PodStateMaps, pod: PodSpec): void {
  for (const state of POD_STATE) state.make?.(maps, pod);
}

/** CHECK: what differs from `pod`. */
export function podStateMismatches(maps: PodStateMaps, pod: PodSpec): string[] {
  return POD_STATE.flatMap((state) => state.check?.(maps, pod) ?? []);
}

/** DEL and GC: forgets the pods everywhere, in the list's order; returns notes for the log. */
export function forgetPodState(maps: PodStateMaps, pods: readonly GonePod[]): string[] {
  const notes: string[] = [];
  for (const state of POD_STATE) {
    if (state.forget) {
      const note = state.forget(maps, pods);
      if (note) notes.push(note);
      continue;
    }
    const map = state.in(maps);
    for (const pod of pods) map?.delete(ifindexKey(pod.hostIfindex));
  }
  return notes;
}

/** GC and status: each ifindex holding state, with the maps that hold it. */
export function podStateHolders(maps: PodStateMaps): Map<number, string[]> {
  const holders = new Map<number, string[]>();
  for (const state of POD_STATE.filter((s) => s.byIfindex)) {
    for (const ifindex of ifindexHolders(state.in(maps)))
      holders.set(ifindex, [...(holders.get(ifindex) ?? []), state.map]);
  }
  return holders;
}

/** The ifindexes with an entry in a map keyed by u32 host ifindex (none without the map). */
export function ifindexHolders(map: BpfMap | undefined): number[] {
  return map ? [...map.keys()].map((key) => key.readUInt32LE(0)) : [];
}
