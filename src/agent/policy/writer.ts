/**
 * The NetworkPolicy controller's writes to this node's pinned maps (bpf/policy.ts): pods'
 * entries by key, the slots' tables, the namespaces that have policies and the Service
 * ClusterIPs. It also leaves, for `netkit-cni status` and `monitor` (which read no API),
 * which policies select each local pod: <stateDir>/policies.json, by pod key, with what
 * keeps each from its policies as written (a direction past a bound or not written in
 * full, an unreadable policy); and the policies it cannot read (each isolating what it
 * selects and allowing nothing): <stateDir>/policy-problems.json.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import {
  applyTableWrites,
  decodePolicyEvent,
  decodePolicyPod,
  deletePolicyPod,
  deleteTier,
  forgetPolicies,
  listNodeCountedFlows,
  namespaceKey,
  openOrCreatePolicyMaps,
  openOrCreatePolicyNamespaces,
  POL_F_INCOMPLETE,
  POL_F_ISOLATED_IN,
  POL_F_ISOLATED_OUT,
  POL_F_PENDING,
  POL_F_WATCH,
  type PolicyMaps,
  type PolicyVerdictCount,
  podKey,
  podKeyBytes,
  policyFlowTables,
  policyTableSlots,
  readFlowRecordsLost,
  readPolicyPod,
  readPolicyVerdicts,
  reconcileKeys,
  requireNodeBpffs,
  setFlowRecording,
  sweepPolicySlots,
  takeFlowEvents,
  vipKey,
  writePolicyPod,
  writeTier,
} from "../../bpf/index";
import { addressFamily } from "../../cni/address";
import type { FlowEventSource } from "../flows/reader";
import type { ClusterPolicyStatus, PolicyPodStatus, PolicyWriter } from "./controller";
import type { PolicyProblem } from "./model/parse";
import type { PodEntry, SlotTiers } from "./slots";

export const POLICY_FILE = "policies.json";
export const POLICY_PROBLEMS_FILE = "policy-problems.json";

const keyOf = (pod: string): bigint => {
  const cut = pod.indexOf("/");
  return podKey(pod.slice(0, cut), pod.slice(cut + 1));
};

export class KernelPolicyWriter implements PolicyWriter {
  private readonly maps: PolicyMaps;
  private readonly namespaces;
  /** The pods whose entries this agent wrote, by key, so that podEntries can name them. */
  private readonly names = new Map<bigint, string>();
  /** Pods whose entries carry POL_F_WATCH (audit-mode policies select them). */
  private readonly watched = new Set<string>();

  constructor(bpffsRoot: string, lxcObject: Buffer) {
    requireNodeBpffs(bpffsRoot);
    this.maps = openOrCreatePolicyMaps(bpffsRoot, lxcObject);
    this.namespaces = openOrCreatePolicyNamespaces(bpffsRoot);
  }

  writeSlot(writes: Parameters<PolicyWriter["writeSlot"]>[0]): void {
    applyTableWrites(this.maps, writes);
  }

  writeTiers(slot: number, tiers: SlotTiers): void {
    for (const dir of ["ingress", "egress"] as const) {
      const masks = tiers?.[dir];
      if (masks) writeTier(this.maps, slot, dir, masks);
      else deleteTier(this.maps, slot, dir);
    }
  }

  setPod(pod: string, entry: PodEntry): void {
    const flags =
      (entry.isolated.ingress ? POL_F_ISOLATED_IN : 0) |
      (entry.isolated.egress ? POL_F_ISOLATED_OUT : 0) |
      (entry.incomplete ? POL_F_INCOMPLETE : 0) |
      (this.watched.has(pod) ? POL_F_WATCH : 0);
    const key = keyOf(pod);
    writePolicyPod(this.maps, key, entry.slot, flags, entry.stamp);
    this.names.set(key, pod);
  }

  setWatched(pod: string, watched: boolean): void {
    if (this.watched.has(pod) === watched) return;
    if (watched) this.watched.add(pod);
    else this.watched.delete(pod);
    // An entry written before: its flag follows now (one without waits for setPod).
    const entry = readPolicyPod(this.maps, keyOf(pod));
    if (!entry) return;
    const flags = watched ? entry.flags | POL_F_WATCH : entry.flags & ~POL_F_WATCH;
    writePolicyPod(this.maps, keyOf(pod), entry.slot, flags, entry.stamp);
  }

  deletePod(pod: string): void {
    const key = keyOf(pod);
    deletePolicyPod(this.maps, key);
    this.names.delete(key);
    this.watched.delete(pod);
  }

  deletePodKey(key: bigint): void {
    deletePolicyPod(this.maps, key);
  }

  podEntries(): { pod?: string; key: bigint; pending: boolean }[] {
    return [...this.maps.pods.keys()].map((k) => {
      const key = k.readBigUInt64LE(0);
      const value = this.maps.pods.lookup(k);
      const pending = value !== undefined && (decodePolicyPod(value).flags & POL_F_PENDING) !== 0;
      return { pod: this.names.get(key), key, pending };
    });
  }

  /** The node's new flows judged, by direction, deciding tier and verdict. */
  verdicts(): PolicyVerdictCount[] {
    return readPolicyVerdicts(this.maps);
  }

  /** The programs' flow records, for flows/reader.ts. */
  flowEvents(): FlowEventSource {
    return {
      record: (on) => setFlowRecording(this.maps, on),
      take: (max) => takeFlowEvents(this.maps, max).map(decodePolicyEvent),
      lost: () => readFlowRecordsLost(this.maps),
      counted: () => listNodeCountedFlows(policyFlowTables(this.maps)),
    };
  }

  setNamespace(namespace: string, hasPolicies: boolean): void {
    const key = podKeyBytes(namespaceKey(namespace));
    if (hasPolicies) this.namespaces.update(key, Buffer.alloc(4));
    else this.namespaces.delete(key);
  }

  tableSlots(): Set<number> {
    return policyTableSlots(this.maps);
  }

  sweepSlots(keep: ReadonlySet<number>): { slots: number; keys: number } {
    return sweepPolicySlots(this.maps, keep);
  }

  reconcileNamespaces(wanted: Iterable<string>): number {
    const keys = [...wanted].map((ns) => podKeyBytes(namespaceKey(ns)));
    return reconcileKeys(this.namespaces, keys, Buffer.alloc(4)).removed;
  }

  reconcileVips(wanted: Iterable<string>): { added: number; removed: number } {
    const keys: Buffer[] = [];
    for (const ip of wanted) {
      const family = addressFamily(ip);
      if (family !== undefined) keys.push(vipKey(ip, family));
    }
    return reconcileKeys(this.maps.vips, keys, Buffer.alloc(4));
  }

  setVips(add: string[], remove: string[]): void {
    for (const ip of add) {
      const family = addressFamily(ip);
      if (family !== undefined) this.maps.vips.update(vipKey(ip, family), Buffer.alloc(4));
    }
    for (const ip of remove) {
      const family = addressFamily(ip);
      if (family !== undefined) this.maps.vips.delete(vipKey(ip, family));
    }
  }

  close(): void {
    this.maps.close();
    this.namespaces.close();
  }
}

/** Writes <stateDir>/policies.json (by rename): which policies select each local pod, by its key in hex. */
export function writePolicyFile(stateDir: string, pods: Record<string, PolicyPodStatus>): void {
  const byKey = Object.fromEntries(Object.entries(pods).map(([pod, s]) => [keyOf(pod).toString(16), { pod, ...s }]));
  writeByRename(path.join(stateDir, POLICY_FILE), byKey);
}

/**
 * Writes <stateDir>/policy-problems.json (by rename): `unreadable`, the unreadable
 * NetworkPolicies' problems; `clusterNetworkPolicy`, the version watched and each
 * ClusterNetworkPolicy as read (absent where the agent does not read them).
 */
export function writePolicyProblemsFile(
  stateDir: string,
  unreadable: PolicyProblem[],
  clusterNetworkPolicy?: ClusterPolicyStatus,
): void {
  writeByRename(path.join(stateDir, POLICY_PROBLEMS_FILE), {
    unreadable,
    ...(clusterNetworkPolicy ? { clusterNetworkPolicy } : {}),
  });
}

function writeByRename(file: string, content: unknown): void {
  fs.writeFileSync(`${file}.tmp`, `${JSON.stringify(content)}\n`);
  fs.renameSync(`${file}.tmp`, file);
}

/**
 * --network-policy=false where an agent enforced it before: the pods it isolated are
 * isolated no more (their programs find no entry, bpf/policy.ts), and status names no
 * policies. How many pods were isolated or pending.
 */
export function forgetNetworkPolicy(bpffsRoot: string, stateDir: string): number {
  const pods = forgetPolicies(bpffsRoot);
  for (const name of [POLICY_FILE, POLICY_PROBLEMS_FILE]) fs.rmSync(path.join(stateDir, name), { force: true });
  return pods;
}
