/**
 * Where each local pod's compiled NetworkPolicy lives in the datapath's tables: a slot
 * (bpf/lib/policy.h), shared by every pod whose rules mean the same (the same policies
 * select them, so the same peers and ports). A slot is known by its rules without their
 * peers: when only peers change (a pod of a selected namespace comes or goes), the
 * slot's peers table is rewritten in place, in an order that never answers with
 * something neither the old nor the new policy allows (bpf/policy-tables.ts); when the
 * rules themselves change, the pod moves to another slot, written whole before the
 * pod's entry is switched to it, and the old slot goes once no pod uses it.
 *
 * State that belongs to a generation:
 * - A slot id is never given out twice by one run, nor one that the node's tables held
 *   when the run began (a previous run's, whose entries may still be there): a new
 *   slot's tables start empty. What a previous run left is swept once every pod has
 *   been placed (controller.ts).
 * - Every pod entry carries the stamp of its slot's current tables: a new stamp each
 *   time a slot is made or its tables are rewritten, and every pod of the slot is
 *   pointed at the new one. The programs trust a remembered verdict only under the stamp
 *   it was made with, so a rule change, or an address leaving the peers, is judged anew.
 * - A slot whose tables could not be written in full is given up: its keys are deleted
 *   (best effort, else swept later), and its pods denied in what they isolate until
 *   their policy is written whole on a fresh slot (SlotWriteError names them).
 */
import type { DatapathRule, SlotTables, TableWrite } from "../../bpf/index";
import { samePorts, slotTables, slotWrites } from "../../bpf/index";
import { monotonicNs } from "../../sys/clock";

/**
 * How a direction's rule bits are read when a ClusterNetworkPolicy applies (struct
 * nkc_pol_tier): which bits are Admin-tier and Baseline-tier rules (lowest bit first),
 * which of those deny and which pass, and whether a NetworkPolicy isolates the pod that
 * way (its rules are the other bits). A direction without one is NetworkPolicy alone.
 */
export interface TierMasks {
  admin: bigint;
  baseline: bigint;
  deny: bigint;
  pass: bigint;
  networkPolicy: boolean;
}

/** One direction of a pod's compiled policy: undefined when the pod is not isolated that way. */
export interface PodRules {
  ingress: DatapathRule[] | undefined;
  egress: DatapathRule[] | undefined;
  /** Which rule of which policy each rule is, for the signature (and `monitor`). */
  origins: { ingress: string[]; egress: string[] };
  /** The directions a ClusterNetworkPolicy applies to: how their bits are read. */
  tiers?: { ingress?: TierMasks; egress?: TierMasks };
}

export interface Isolation {
  ingress: boolean;
  egress: boolean;
}

/** A pod's entry as the programs read it (struct nkc_pol_pod). */
export interface PodEntry {
  /** Its slot; 0: none (not isolated, or denied whole: `incomplete`). */
  slot: number;
  isolated: Isolation;
  /** The version of the rules it is judged by (0 for a pod that is not judged). */
  stamp: bigint;
  /** Its policy could not be written in full: its isolated directions deny everything. */
  incomplete?: boolean;
}

/** What the slots need of the maps (tests give them a recording fake). */
export interface SlotWriter {
  writeSlot(writes: { peers: TableWrite[]; ports: TableWrite[] }): void;
  /** A slot's tier entries (undefined: none, deleted), written before any pod points at the slot. */
  writeTiers(slot: number, tiers: SlotTiers): void;
  setPod(pod: string, entry: PodEntry): void;
}

export type SlotTiers = { ingress?: TierMasks; egress?: TierMasks } | undefined;

/** A slot's tables could not be written in full. `pods`: those of the slot given up, now denied in what they isolate. */
export class SlotWriteError extends Error {
  constructor(
    readonly pods: string[],
    override readonly cause: unknown,
  ) {
    super(`policy tables not written in full: ${(cause as Error)?.message ?? String(cause)}`);
  }
}

export interface SlotOptions {
  /** Slot ids the node's tables hold already (a previous run's): never given out. */
  reserved?: Iterable<number>;
  /** The stamps, each larger than every one before on this node. */
  stamps?: () => bigint;
}

/**
 * Stamps from CLOCK_MONOTONIC, or the last one plus one: larger than any a previous run
 * of the agent gave on this node since boot (and pinned maps do not outlive a boot).
 */
export function stampClock(now: () => bigint = monotonicNs): () => bigint {
  let last = 0n;
  return () => {
    const t = now();
    last = t > last ? t : last + 1n;
    return last;
  };
}

const MAX_SLOT = 0xffffffff;

interface Slot {
  id: number;
  signature: string;
  tables: SlotTables;
  tiers: SlotTiers;
  isolated: Isolation;
  stamp: bigint;
  pods: Set<string>;
}

/** The rules' meaning without their peers: which rule is which, its ports, and how the tiers read them. */
export function signatureOf(rules: PodRules): string {
  const strip = (list: DatapathRule[] | undefined, origins: string[]) =>
    list === undefined ? null : list.map((r, i) => [origins[i] ?? "", r.ports]);
  const signature: unknown[] = [strip(rules.ingress, rules.origins.ingress), strip(rules.egress, rules.origins.egress)];
  // Only where a ClusterNetworkPolicy applies: NetworkPolicy's slots keep the signatures they had.
  if (rules.tiers?.ingress || rules.tiers?.egress) signature.push(tiersText(rules.tiers));
  return JSON.stringify(signature);
}

const tiersText = (tiers: SlotTiers) => JSON.stringify(tiers, (_, v) => (typeof v === "bigint" ? v.toString(16) : v));
const hasTiers = (tiers: SlotTiers): tiers is NonNullable<SlotTiers> =>
  tiers?.ingress !== undefined || tiers?.egress !== undefined;

export class PolicySlots {
  private readonly bySignature = new Map<string, Slot>();
  private readonly ofPod = new Map<string, Slot>();
  private readonly reserved: Set<number>;
  /** Ids whose keys may still be in the tables (a delete failed): swept by the next full sync. */
  private readonly dirty = new Set<number>();
  private nextId = 1;
  readonly stamp: () => bigint;

  constructor(
    private readonly writer: SlotWriter,
    options: SlotOptions = {},
  ) {
    this.reserved = new Set(options.reserved ?? []);
    for (const id of this.reserved) if (id >= this.nextId) this.nextId = id + 1;
    this.stamp = options.stamps ?? stampClock();
  }

  /**
   * Puts `pod` (namespace/name) on the slot for `rules`, written before the pod's entry
   * points at it; the slot it leaves goes after, when no pod uses it any more. Throws
   * SlotWriteError when the tables could not be written in full (the pod keeps the entry
   * it had: the caller denies it), or what writing the pod's entry threw.
   */
  place(pod: string, rules: PodRules): number {
    const signature = signatureOf(rules);
    const tables = slotTables({ ingress: rules.ingress ?? [], egress: rules.egress ?? [] });
    const current = this.ofPod.get(pod);
    let slot = this.bySignature.get(signature);
    if (slot) {
      // Same rules: only the peers may differ, rewritten in place for every pod of the slot.
      if (!samePorts(slot.tables, tables)) throw new Error(`slot ${slot.id}: a signature with other ports`);
      const writes = slotWrites(slot.id, slot.tables, tables);
      if (writes.peers.length > 0) this.rewrite(slot, tables, writes, pod);
    } else {
      const tiers = hasTiers(rules.tiers) ? rules.tiers : undefined;
      slot = this.create(signature, tables, tiers, {
        ingress: rules.ingress !== undefined,
        egress: rules.egress !== undefined,
      });
    }
    try {
      this.writer.setPod(pod, entryOf(slot));
    } catch (e) {
      if (slot.pods.size === 0) this.drop(slot); // a fresh slot nobody points at
      throw e;
    }
    slot.pods.add(pod);
    this.ofPod.set(pod, slot);
    if (current && current !== slot) this.leave(pod, current);
    return slot.id;
  }

  /** The pod no longer needs a slot (gone, not isolated, or denied whole); call after its entry moved. */
  release(pod: string): void {
    const current = this.ofPod.get(pod);
    if (!current) return;
    this.ofPod.delete(pod);
    this.leave(pod, current);
  }

  /** The entry that denies everything the pod isolates: for a policy that could not be written in full. */
  closedEntry(isolated: Isolation): PodEntry {
    return { slot: 0, isolated, stamp: this.stamp(), incomplete: true };
  }

  slotOf(pod: string): number | undefined {
    return this.ofPod.get(pod)?.id;
  }

  get size(): number {
    return this.bySignature.size;
  }

  /** The ids of the slots in use: every other slot's keys in the tables are stale. */
  liveIds(): Set<number> {
    return new Set([...this.bySignature.values()].map((s) => s.id));
  }

  /** Whether the tables may hold keys of slots that are not live (a previous run's, or a failed delete's). */
  get needsSweep(): boolean {
    return this.reserved.size > 0 || this.dirty.size > 0;
  }

  /** The tables hold no key of a slot outside liveIds() any more. */
  swept(): void {
    this.reserved.clear();
    this.dirty.clear();
  }

  private allocate(): number {
    for (;;) {
      if (this.nextId > MAX_SLOT) this.nextId = 1;
      const id = this.nextId++;
      if (this.reserved.has(id) || this.dirty.has(id) || [...this.bySignature.values()].some((s) => s.id === id))
        continue;
      return id;
    }
  }

  private create(signature: string, tables: SlotTables, tiers: SlotTiers, isolated: Isolation): Slot {
    const id = this.allocate();
    const slot: Slot = { id, signature, tables, tiers, isolated, stamp: this.stamp(), pods: new Set() };
    try {
      this.writer.writeSlot(slotWrites(slot.id, undefined, tables));
      // How the bits are read goes in with them: a pod's entry points at the slot only after.
      if (tiers) this.writer.writeTiers(slot.id, tiers);
    } catch (e) {
      this.erase(slot.id, tables, tiers);
      throw new SlotWriteError([], e);
    }
    this.bySignature.set(signature, slot);
    return slot;
  }

  /** New peers for a slot in use: written in place, then every other pod of it restamped (`placing`'s own entry is the caller's). */
  private rewrite(
    slot: Slot,
    tables: SlotTables,
    writes: { peers: TableWrite[]; ports: TableWrite[] },
    placing: string,
  ): void {
    try {
      this.writer.writeSlot(writes);
    } catch (e) {
      throw new SlotWriteError(this.giveUp(slot, tables), e);
    }
    slot.tables = tables;
    slot.stamp = this.stamp();
    for (const p of slot.pods) if (p !== placing) this.writer.setPod(p, entryOf(slot));
  }

  /**
   * A slot whose rewrite stopped half-way: its pods are denied what they isolate (their
   * entries first, so nothing reads the slot), then its keys go, old and new. Returns its pods.
   */
  private giveUp(slot: Slot, attempted: SlotTables): string[] {
    const pods = [...slot.pods];
    this.bySignature.delete(slot.signature);
    let unread = true;
    for (const p of pods) {
      this.ofPod.delete(p);
      try {
        this.writer.setPod(p, this.closedEntry(slot.isolated));
      } catch {
        unread = false; // its entry still names the slot: the keys stay until the sweep
      }
    }
    if (unread) {
      this.erase(slot.id, slot.tables, slot.tiers);
      this.erase(slot.id, attempted);
    } else {
      this.dirty.add(slot.id);
    }
    return pods;
  }

  private leave(pod: string, slot: Slot): void {
    slot.pods.delete(pod);
    if (slot.pods.size === 0) this.drop(slot);
  }

  private drop(slot: Slot): void {
    this.bySignature.delete(slot.signature);
    this.erase(slot.id, slot.tables, slot.tiers);
  }

  /** Deletes a slot's keys; a failure leaves the id dirty for the sweep, never given out again before it. */
  private erase(id: number, tables: SlotTables, tiers?: SlotTiers): void {
    try {
      // The tier entries first: what is left of the bits then reads as NetworkPolicy's
      // alone, and nothing reads this slot any more anyway.
      if (tiers) this.writer.writeTiers(id, undefined);
      this.writer.writeSlot(slotWrites(id, tables, undefined));
    } catch {
      this.dirty.add(id);
    }
  }
}

function entryOf(slot: Slot): PodEntry {
  return { slot: slot.id, isolated: slot.isolated, stamp: slot.stamp };
}
