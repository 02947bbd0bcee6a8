/**
 * Where each local pod's compiled NetworkPolicy lives in the datapath's tables: a slot
 * (bpf/lib/policy.h), shared by every pod whose rules mean the same (the same policies
 * select them, so the same peers and ports). A slot is known by its rules without their
 * peers: when only peers change (a pod of a selected namespace comes or goes), the
 * slot's peers table is rewritten in place, in an order that never answers with
 * something neither the old nor the new policy allows (bpf/policy-tables.ts); when the
 * rules themselves change, the pod moves to another slot, written whole before the
 * pod's entry is switched to it, and the old slot goes once no pod uses it.
 */
import type { DatapathRule, SlotTables, TableWrite } from "../bpf/policy-tables";
import { samePorts, slotTables, slotWrites } from "../bpf/policy-tables";

/** One direction of a pod's compiled policy: undefined when the pod is not isolated that way. */
export interface PodRules {
  ingress: DatapathRule[] | undefined;
  egress: DatapathRule[] | undefined;
  /** Which rule of which policy each rule is, for the signature (and `monitor`). */
  origins: { ingress: string[]; egress: string[] };
}

/** What the slots need of the maps (tests give them a recording fake). */
export interface SlotWriter {
  writeSlot(writes: { peers: TableWrite[]; ports: TableWrite[] }): void;
}

interface Slot {
  id: number;
  signature: string;
  tables: SlotTables;
  pods: Set<string>;
}

/** The rules' meaning without their peers: which rule is which, and its ports. */
export function signatureOf(rules: PodRules): string {
  const strip = (list: DatapathRule[] | undefined, origins: string[]) =>
    list === undefined ? null : list.map((r, i) => [origins[i] ?? "", r.ports]);
  return JSON.stringify([strip(rules.ingress, rules.origins.ingress), strip(rules.egress, rules.origins.egress)]);
}

export class PolicySlots {
  private readonly bySignature = new Map<string, Slot>();
  private readonly ofPod = new Map<string, Slot>();
  private nextId = 1;
  private readonly freeIds: number[] = [];

  constructor(private readonly writer: SlotWriter) {}

  /**
   * Puts `pod` (namespace/name) on the slot for `rules`, written before `switchTo` points
   * the pod's entry at it; the slot it leaves goes after, when no pod uses it any more.
   */
  place(pod: string, rules: PodRules, switchTo: (slot: number) => void): number {
    const signature = signatureOf(rules);
    const tables = slotTables({ ingress: rules.ingress ?? [], egress: rules.egress ?? [] });
    const current = this.ofPod.get(pod);
    let slot = this.bySignature.get(signature);
    if (slot) {
      // Same rules: only the peers may differ, rewritten in place for every pod of the slot.
      if (!samePorts(slot.tables, tables)) throw new Error(`slot ${slot.id}: a signature with other ports`);
      const writes = slotWrites(slot.id, slot.tables, tables);
      if (writes.peers.length > 0) this.writer.writeSlot(writes);
      slot.tables = tables;
    } else {
      slot = { id: this.freeIds.pop() ?? this.nextId++, signature, tables, pods: new Set() };
      this.writer.writeSlot(slotWrites(slot.id, undefined, tables));
      this.bySignature.set(signature, slot);
    }
    try {
      switchTo(slot.id);
    } catch (e) {
      if (slot.pods.size === 0) this.leave(pod, slot); // a fresh slot nobody points at
      throw e;
    }
    slot.pods.add(pod);
    this.ofPod.set(pod, slot);
    if (current && current !== slot) this.leave(pod, current);
    return slot.id;
  }

  /** The pod no longer needs a slot (gone, or no longer isolated); call after its entry moved. */
  release(pod: string): void {
    const current = this.ofPod.get(pod);
    if (!current) return;
    this.ofPod.delete(pod);
    this.leave(pod, current);
  }

  slotOf(pod: string): number | undefined {
    return this.ofPod.get(pod)?.id;
  }

  get size(): number {
    return this.bySignature.size;
  }

  private leave(pod: string, slot: Slot): void {
    slot.pods.delete(pod);
    if (slot.pods.size > 0) return;
    this.writer.writeSlot(slotWrites(slot.id, slot.tables, undefined));
    this.bySignature.delete(slot.signature);
    this.freeIds.push(slot.id);
  }
}
