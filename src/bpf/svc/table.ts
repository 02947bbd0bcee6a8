/**
 * The Service tables (nkc_svc_services, nkc_svc_slots, nkc_svc_backends) as one writer
 * keeps them: a Service's backends set or withdrawn in an order that keeps every read
 * the programs make consistent (bpf/include/nkc_svc_abi.h):
 *
 *   1. new backends are written before any slot names them;
 *   2. a count that shrinks is written before the slots it gives up change;
 *   3. slots are written, then a count that grows;
 *   4. slots past the count go, then the backends no slot names.
 *
 * A program that read a slot just before it changed may still find the old backend,
 * which is still written (or, after step 4, gone, and the connect is left to the stack).
 * Slots keep their backends where they can: a withdrawn backend's slot takes a new one or
 * the last slot's, so a change rewrites the fewest slots.
 *
 * One writer at a time (the agent). It reads the tables once, repairs what an
 * interrupted writer left (slots and backends no Service reaches), and then keeps its own
 * view. Ids are handed out round-robin, so an id just withdrawn is the last to come back.
 */
import { familyOf } from "../../cni/address";
import {
  backendValue,
  decodeBackendValue,
  decodeSlotKey,
  decodeSvcKey,
  decodeSvcValue,
  idBytes,
  SVC_BACKENDS_MAX,
  SVC_MAX,
  type SvcBackend,
  type SvcFrontend,
  slotKey,
  svcKey,
  svcValue,
} from "./abi";

/** What the writer needs of a map (BpfMap has it; tests pass a recording fake). */
export interface TableMap {
  lookup(key: Buffer): Buffer | undefined;
  update(key: Buffer, value: Buffer): void;
  delete(key: Buffer): boolean;
  keys(): Iterable<Buffer>;
}

export interface SvcTables {
  services: TableMap;
  slots: TableMap;
  backends: TableMap;
}

/** A Service as the tables hold it: its backends in slot order. */
export interface ServiceEntry {
  frontend: SvcFrontend;
  backends: SvcBackend[];
  /** ClientIP affinity's timeout; absent: none. */
  affinitySeconds?: number;
}

interface Held {
  id: number;
  affinitySeconds?: number;
  /** Backend ids by slot. */
  slots: number[];
}

const endpointText = (b: SvcBackend) => `${b.ip}|${b.port}`;
/** A front end as text, for keying: its map key in hex. */
export const frontendText = (f: SvcFrontend) => svcKey(f).toString("hex");

class IdPool {
  private readonly used = new Set<number>();
  private cursor = 0;

  constructor(
    private readonly max: number,
    private readonly what: string,
  ) {}

  take(): number {
    if (this.used.size >= this.max) throw new Error(`the ${this.what} table is full (${this.max})`);
    for (;;) {
      this.cursor = (this.cursor % this.max) + 1;
      if (!this.used.has(this.cursor)) break;
    }
    this.used.add(this.cursor);
    return this.cursor;
  }

  hold(id: number): void {
    this.used.add(id);
    this.cursor = Math.max(this.cursor, id);
  }

  give(id: number): void {
    this.used.delete(id);
  }

  get free(): number {
    return this.max - this.used.size;
  }
}

export class ServiceTable {
  private readonly held = new Map<string, Held>();
  private readonly frontends = new Map<string, SvcFrontend>();
  private readonly backendsById = new Map<number, SvcBackend>();
  private readonly svcIds = new IdPool(SVC_MAX, "Service");
  private readonly backendIds = new IdPool(SVC_BACKENDS_MAX, "Service backend");

  constructor(private readonly maps: SvcTables) {
    this.readAndRepair();
  }

  /** The Services the tables hold, backends in slot order. */
  entries(): ServiceEntry[] {
    return [...this.held].map(([text, h]) => ({
      frontend: this.frontends.get(text) as SvcFrontend,
      backends: h.slots.map((id) => this.backendsById.get(id) as SvcBackend),
      ...(h.affinitySeconds !== undefined ? { affinitySeconds: h.affinitySeconds } : {}),
    }));
  }

  /** The front ends held, by their text (cheaper than entries() when the backends do not matter). */
  frontendsHeld(): IterableIterator<[string, SvcFrontend]> {
    return this.frontends.entries();
  }

  /** Services held. */
  get size(): number {
    return this.held.size;
  }

  /** Backends held, over every Service. */
  get backendCount(): number {
    return this.backendsById.size;
  }

  /** The Service's entry as held, if it is. */
  entry(frontend: SvcFrontend): ServiceEntry | undefined {
    const h = this.held.get(frontendText(frontend));
    if (!h) return undefined;
    return {
      frontend,
      backends: h.slots.map((id) => this.backendOf(id)),
      ...(h.affinitySeconds !== undefined ? { affinitySeconds: h.affinitySeconds } : {}),
    };
  }

  /**
   * Makes the tables hold `entry` (its backends de-duplicated; none: connects refused).
   * Returns the backends it held before and no longer does.
   */
  write(entry: ServiceEntry): SvcBackend[] {
    const family = familyOf(entry.frontend.ip);
    const wanted = new Map(entry.backends.map((b) => [endpointText(b), b]));
    for (const b of wanted.values()) {
      if (familyOf(b.ip) !== family) throw new Error(`backend ${b.ip} is not of Service ${entry.frontend.ip}'s family`);
    }
    if (wanted.size > 0xffff) throw new Error(`Service ${entry.frontend.ip} has ${wanted.size} backends, over 65535`);
    const text = frontendText(entry.frontend);
    const old = this.held.get(text);
    const oldSlots = old?.slots ?? [];
    const kept = new Set(oldSlots.filter((id) => wanted.has(endpointText(this.backendOf(id)))));
    const keptText = new Set([...kept].map((id) => endpointText(this.backendOf(id))));
    const added = [...wanted.values()].filter((b) => !keptText.has(endpointText(b)));
    if (added.length > this.backendIds.free + (oldSlots.length - kept.size)) {
      throw new Error(`the Service backend table is full (${SVC_BACKENDS_MAX})`);
    }
    const svcId = old?.id ?? this.svcIds.take();
    const slots = placeInSlots(oldSlots, kept, added.length);

    // 1. New backends, before anything names them.
    const addedIds: number[] = [];
    for (const b of added) {
      const id = this.backendIds.take();
      this.maps.backends.update(idBytes(id), backendValue({ ...b, svcId }));
      this.backendsById.set(id, b);
      addedIds.push(id);
    }
    const newSlots = slots.map((id) => (id === NEW ? (addedIds.shift() as number) : id));
    const value = svcValue({ id: svcId, backends: newSlots.length, affinitySeconds: entry.affinitySeconds });
    const key = svcKey(entry.frontend);
    // 2. A count that shrinks, before the slots it gives up change.
    if (old && newSlots.length < oldSlots.length) this.maps.services.update(key, value);
    // 3. Slots, then a count that grows (or a new Service).
    newSlots.forEach((id, slot) => {
      if (oldSlots[slot] !== id) this.maps.slots.update(slotKey(svcId, slot), idBytes(id));
    });
    const changed = !old || newSlots.length !== oldSlots.length || old.affinitySeconds !== entry.affinitySeconds;
    if (changed && newSlots.length >= oldSlots.length) this.maps.services.update(key, value);
    // 4. Slots past the count, then the backends no slot names.
    for (let slot = newSlots.length; slot < oldSlots.length; slot++) this.maps.slots.delete(slotKey(svcId, slot));
    const withdrawn: SvcBackend[] = [];
    for (const id of oldSlots) {
      if (kept.has(id)) continue;
      withdrawn.push(this.backendOf(id));
      this.dropBackend(id);
    }
    this.held.set(text, { id: svcId, affinitySeconds: entry.affinitySeconds, slots: newSlots });
    this.frontends.set(text, entry.frontend);
    return withdrawn;
  }

  /**
   * Takes the Service out: its entry first, so no connect starts on what goes next.
   * Returns the backends it held (undefined when it held none).
   */
  remove(frontend: SvcFrontend): SvcBackend[] | undefined {
    const text = frontendText(frontend);
    const old = this.held.get(text);
    if (!old) return undefined;
    this.maps.services.delete(svcKey(frontend));
    for (let slot = 0; slot < old.slots.length; slot++) this.maps.slots.delete(slotKey(old.id, slot));
    const withdrawn = old.slots.map((id) => this.backendOf(id));
    for (const id of old.slots) this.dropBackend(id);
    this.svcIds.give(old.id);
    this.held.delete(text);
    this.frontends.delete(text);
    return withdrawn;
  }

  private backendOf(id: number): SvcBackend {
    return this.backendsById.get(id) as SvcBackend;
  }

  private dropBackend(id: number): void {
    this.maps.backends.delete(idBytes(id));
    this.backendsById.delete(id);
    this.backendIds.give(id);
  }

  private readAndRepair(): void {
    const reachable = new Set<number>();
    for (const key of [...this.maps.services.keys()]) {
      const value = this.maps.services.lookup(key);
      if (!value) continue;
      const svc = decodeSvcValue(value);
      const frontend = decodeSvcKey(key);
      const slots: number[] = [];
      for (let slot = 0; slot < svc.backends; slot++) {
        const id = this.maps.slots.lookup(slotKey(svc.id, slot));
        const backend = id ? this.maps.backends.lookup(id) : undefined;
        if (!id || !backend || decodeBackendValue(backend).svcId !== svc.id) break;
        slots.push(id.readUInt32LE(0));
      }
      if (slots.length < svc.backends) {
        // An interrupted writer: keep the slots that hold, and say so in the count.
        this.maps.services.update(key, svcValue({ ...svc, backends: slots.length }));
      }
      for (const id of slots) {
        const { ip, port } = decodeBackendValue(this.maps.backends.lookup(idBytes(id)) as Buffer);
        this.backendsById.set(id, { ip, port });
        this.backendIds.hold(id);
        reachable.add(id);
      }
      this.svcIds.hold(svc.id);
      const text = frontendText(frontend);
      this.held.set(text, { id: svc.id, affinitySeconds: svc.affinitySeconds, slots });
      this.frontends.set(text, frontend);
    }
    const counts = new Map([...this.held.values()].map((h) => [h.id, h.slots.length]));
    for (const key of [...this.maps.slots.keys()]) {
      const { svcId, slot } = decodeSlotKey(key);
      if (slot >= (counts.get(svcId) ?? 0)) this.maps.slots.delete(key);
    }
    for (const key of [...this.maps.backends.keys()]) {
      if (!reachable.has(key.readUInt32LE(0))) this.maps.backends.delete(key);
    }
  }
}

const NEW = -1;

/**
 * The slot order after a change: kept backends stay in their slots; the withdrawn ones'
 * slots take new backends (NEW), then the last slots' backends; more new ones go at the
 * end.
 */
export function placeInSlots(oldSlots: readonly number[], kept: ReadonlySet<number>, added: number): number[] {
  const slots = oldSlots.map((id) => (kept.has(id) ? id : undefined));
  let toAdd = added;
  for (let i = 0; i < slots.length && toAdd > 0; i++) {
    if (slots[i] === undefined) {
      slots[i] = NEW;
      toAdd -= 1;
    }
  }
  for (; toAdd > 0; toAdd--) slots.push(NEW);
  for (;;) {
    while (slots.length > 0 && slots[slots.length - 1] === undefined) slots.pop();
    const hole = slots.indexOf(undefined);
    if (hole === -1) break;
    slots[hole] = slots.pop();
  }
  return slots as number[];
}
