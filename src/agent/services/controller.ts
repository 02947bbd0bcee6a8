/**
 * The Service controller (`--service-translation`): the node's Service tables as
 * plan.ts says they should be, kept per Service.
 *
 * - A Service event, or an event of one of its EndpointSlices (by the label
 *   kubernetes.io/service-name), syncs that Service only: its entries are planned from
 *   it and its slices and written (bpf/svc-table.ts writes in an order that keeps every
 *   read of the programs consistent; an entry whose backends did not change costs no
 *   write). Its withdrawn backends' sockets are then closed.
 * - Nothing is written before both kinds have been listed completely: a table synced from
 *   a partial view would withdraw backends that exist. Then the full sync ("*", also at
 *   every resync) plans every Service and takes out what no Service has any more.
 * - The tables stay open for the agent's life; the full sync opens them again if the
 *   pins were replaced (a bpffs root removed and made again).
 */
import * as fs from "node:fs";
import {
  frontendText,
  mapPin,
  type ServiceEntry,
  ServiceTable,
  SVC_MAP_NAMES,
  type SvcBackend,
  type SvcFrontend,
  type SvcMaps,
  svcTables,
} from "../../bpf/index";
import { getOrMake } from "../collections";
import type { Informer } from "../kube/informer";
import { sliceService } from "../kube/objects";
import type { WorkQueue } from "../kube/workqueue";
import { agentLog } from "../log";
import { planServices, type ServiceObject, type SkipReason, type SliceObject } from "./plan";

export const SERVICES = "services";
const ALL = "*";

export interface ServiceSyncStatus {
  /** Both Services and EndpointSlices were listed, and the tables written since. */
  synced: boolean;
  services: number;
  backends: number;
  /** Service ports and endpoints left out of the plan, by reason. */
  skipped: Record<SkipReason, number>;
  /** The last failed sync's error; cleared by the next that succeeds. */
  error: string | undefined;
  /** Sockets closed because their backend was withdrawn, since the agent started. */
  closedSockets: number;
}

/** A Service's backends taken out of its entry for one front end. */
export interface Withdrawn {
  frontend: SvcFrontend;
  backends: SvcBackend[];
}

/** The tables and how to close the sockets of withdrawn backends (main.ts gives the kernel's). */
export interface ServiceTables {
  open(): SvcMaps & { close(): void };
  /** Closes the pods' sockets translated to one of the withdrawn backends; how many. */
  closeWithdrawn(maps: SvcMaps, withdrawn: readonly Withdrawn[]): number;
}

const noSkips = (): Record<SkipReason, number> => ({ protocol: 0, port: 0, address: 0, affinity: 0 });

export class ServicesController {
  readonly status: ServiceSyncStatus = {
    synced: false,
    services: 0,
    backends: 0,
    skipped: noSkips(),
    error: undefined,
    closedSockets: 0,
  };
  /** A Service's EndpointSlices, by Service key. */
  private readonly slicesOf = new Map<string, Set<string>>();
  /** The front ends each Service holds in the tables. */
  private readonly frontendsOf = new Map<string, Map<string, SvcFrontend>>();
  /** The Service each front end is written for (a ClusterIP freed by one may go to another). */
  private readonly ownerOf = new Map<string, string>();
  private readonly skippedOf = new Map<string, Record<SkipReason, number>>();
  /** What each Service was last planned from: the same objects plan the same entries. */
  private readonly plannedFrom = new Map<string, { svc: ServiceObject; slices: Map<string, SliceObject> }>();
  private maps: (SvcMaps & { close(): void }) | undefined;
  private table: ServiceTable | undefined;
  private openedPins = "";

  constructor(
    private readonly queue: WorkQueue,
    private readonly services: Informer<ServiceObject>,
    private readonly slices: Informer<SliceObject>,
    private readonly nodeName: string,
    private readonly bpffsRoot: string,
    private readonly tables: ServiceTables,
  ) {
    queue.register(SERVICES, (key) => this.sync(key));
    const listed = () => {
      if (services.synced && slices.synced) queue.add(SERVICES, ALL);
    };
    services.onSynced(listed);
    slices.onSynced(listed);
    services.onChange((key) => queue.add(SERVICES, key));
    slices.onChange((key, before, after) => {
      const was = sliceService(before);
      const is = sliceService(after);
      if (was) this.slicesOf.get(was)?.delete(key);
      if (is) getOrMake(this.slicesOf, is, () => new Set()).add(key);
      if (was && was !== is) queue.add(SERVICES, was);
      if (is) queue.add(SERVICES, is);
    });
  }

  resync(): void {
    if (this.services.synced && this.slices.synced) this.queue.add(SERVICES, ALL);
  }

  close(): void {
    this.maps?.close();
  }

  private sync(key: string): void {
    if (!this.services.synced || !this.slices.synced) return;
    try {
      if (key === ALL) this.syncAll();
      else if (this.table) this.syncService(key);
      this.status.error = undefined;
    } catch (e) {
      this.status.error = (e as Error).message;
      throw e;
    }
  }

  private syncService(key: string): void {
    const table = this.table as ServiceTable;
    const svc = this.services.get(key);
    const slices = [...(this.slicesOf.get(key) ?? [])].flatMap((k) => this.slices.get(k) ?? []);
    const plan = planServices(svc ? [svc] : [], slices, this.nodeName);
    const withdrawn = this.apply(table, key, plan.entries);
    this.remember(key, svc);
    this.setSkipped(key, plan.skipped);
    this.closeWithdrawn(withdrawn);
  }

  /**
   * Every Service planned again, but for those whose objects are the very ones it was
   * last planned from (the informer replaces an object on every change): a resync costs
   * a comparison per Service, not a plan. Front ends no Service names go.
   */
  private syncAll(): void {
    if (this.openTables()) this.indexSlices();
    const table = this.table as ServiceTable;
    const withdrawn: Withdrawn[] = [];
    const keys = new Set<string>();
    for (const svc of this.services.values()) {
      const key = `${svc.metadata?.namespace ?? ""}/${svc.metadata?.name ?? ""}`;
      keys.add(key);
      if (this.unchanged(key, svc)) continue;
      const slices = [...(this.slicesOf.get(key) ?? [])].flatMap((k) => this.slices.get(k) ?? []);
      const plan = planServices([svc], slices, this.nodeName);
      withdrawn.push(...this.apply(table, key, plan.entries));
      this.remember(key, svc);
      if (Object.values(plan.skipped).some((n) => n > 0)) this.skippedOf.set(key, plan.skipped);
      else this.skippedOf.delete(key);
    }
    for (const key of [...this.frontendsOf.keys(), ...this.plannedFrom.keys(), ...this.skippedOf.keys()]) {
      if (keys.has(key)) continue;
      this.frontendsOf.delete(key);
      this.plannedFrom.delete(key);
      this.skippedOf.delete(key);
    }
    // What the tables hold that no Service has any more (deleted while no agent ran).
    for (const [text, frontend] of [...table.frontendsHeld()]) {
      const owner = this.ownerOf.get(text);
      if (owner !== undefined && keys.has(owner)) continue;
      this.ownerOf.delete(text);
      const gone = table.remove(frontend);
      if (gone && gone.length > 0) withdrawn.push({ frontend, backends: gone });
    }
    this.status.services = table.size;
    this.status.backends = table.backendCount;
    this.sumSkipped();
    this.closeWithdrawn(withdrawn);
    if (!this.status.synced) agentLog.info(`services: synced ${table.size} front ends, ${table.backendCount} backends`);
    this.status.synced = true;
  }

  /** The slices of each Service, from the informer (events keep it after that). */
  private indexSlices(): void {
    this.slicesOf.clear();
    for (const [key, slice] of this.sliceEntries()) {
      const svc = sliceService(slice);
      if (svc) getOrMake(this.slicesOf, svc, () => new Set()).add(key);
    }
  }

  /** Was Service `key` last planned from exactly these objects? */
  private unchanged(key: string, svc: ServiceObject): boolean {
    const before = this.plannedFrom.get(key);
    if (!before || before.svc !== svc) return false;
    const now = this.slicesOf.get(key);
    if ((now?.size ?? 0) !== before.slices.size) return false;
    for (const k of now ?? []) if (this.slices.get(k) !== before.slices.get(k)) return false;
    return true;
  }

  private remember(key: string, svc: ServiceObject | undefined): void {
    if (!svc) {
      this.plannedFrom.delete(key);
      return;
    }
    const slices = new Map<string, SliceObject>();
    for (const k of this.slicesOf.get(key) ?? []) {
      const slice = this.slices.get(k);
      if (slice) slices.set(k, slice);
    }
    this.plannedFrom.set(key, { svc, slices });
  }

  private *sliceEntries(): Generator<[string, SliceObject]> {
    for (const slice of this.slices.values()) {
      yield [`${slice.metadata?.namespace ?? ""}/${slice.metadata?.name ?? ""}`, slice];
    }
  }

  /** Makes the tables hold exactly `entries` for Service `key`; what it withdrew. */
  private apply(table: ServiceTable, key: string, entries: readonly ServiceEntry[]): Withdrawn[] {
    const withdrawn: Withdrawn[] = [];
    const before = this.frontendsOf.get(key) ?? new Map<string, SvcFrontend>();
    const after = new Map(entries.map((e) => [frontendText(e.frontend), e.frontend]));
    for (const [text, frontend] of before) {
      if (after.has(text) || this.ownerOf.get(text) !== key) continue;
      this.ownerOf.delete(text);
      const gone = table.remove(frontend);
      if (gone && gone.length > 0) withdrawn.push({ frontend, backends: gone });
    }
    for (const [text, entry] of entries.map((e) => [frontendText(e.frontend), e] as const)) {
      this.ownerOf.set(text, key);
      const gone = table.write(entry);
      if (gone.length > 0) withdrawn.push({ frontend: entry.frontend, backends: gone });
    }
    if (after.size > 0) this.frontendsOf.set(key, after);
    else this.frontendsOf.delete(key);
    this.status.services = table.size;
    this.status.backends = table.backendCount;
    return withdrawn;
  }

  private setSkipped(key: string, skipped: Record<SkipReason, number>): void {
    const before = JSON.stringify(this.status.skipped);
    if (Object.values(skipped).some((n) => n > 0)) this.skippedOf.set(key, skipped);
    else this.skippedOf.delete(key);
    this.sumSkipped();
    if (JSON.stringify(this.status.skipped) !== before) {
      agentLog.warn(`services: left out of the tables, by reason: ${JSON.stringify(this.status.skipped)}`);
    }
  }

  private sumSkipped(): void {
    const sum = noSkips();
    for (const s of this.skippedOf.values()) for (const r of Object.keys(sum) as SkipReason[]) sum[r] += s[r];
    this.status.skipped = sum;
  }

  private closeWithdrawn(withdrawn: readonly Withdrawn[]): void {
    if (withdrawn.length === 0 || !this.maps) return;
    const closed = this.tables.closeWithdrawn(this.maps, withdrawn);
    this.status.closedSockets += closed;
    if (closed > 0) agentLog.info(`services: closed ${closed} sockets of withdrawn backends`);
  }

  /** The tables, opened once, and again when their pins were replaced: true when (re)opened. */
  private openTables(): boolean {
    const identity = this.pinIdentity();
    if (this.table && identity === this.openedPins) return false;
    this.maps?.close();
    this.maps = undefined;
    this.table = undefined;
    this.frontendsOf.clear();
    this.ownerOf.clear();
    this.plannedFrom.clear();
    this.maps = this.tables.open();
    // What the tables held before (an earlier agent's work) is read back; the full sync
    // that follows gives each front end to the Service that names it now, or takes it out.
    this.table = new ServiceTable(svcTables(this.maps));
    this.openedPins = this.pinIdentity();
    return true;
  }

  /** The pins' inodes: a pin made again is another map. */
  private pinIdentity(): string {
    return Object.values(SVC_MAP_NAMES)
      .map((name) => {
        try {
          return String(fs.statSync(mapPin(this.bpffsRoot, name)).ino);
        } catch {
          return "-";
        }
      })
      .join();
  }
}
