/**
 * The agent's Service translation half (`--service-translation`): from the API's Services
 * and EndpointSlices, keep the node's Service tables as service-plan.ts says they should
 * be. Like the reconciler, it reconciles rather than replays: each run plans from the
 * objects as they are now and writes the difference (bpf/svc-table.ts writes in an order
 * that keeps every read of the programs consistent; a Service whose backends did not
 * change costs no write).
 *
 * Nothing is written before both kinds have been listed completely: a table synced from a
 * partial view would withdraw backends that exist. After that, a change of either kind
 * schedules one run; runs are serialized, and a request during a run makes one more.
 *
 * After the tables, the sockets translated to a backend that is no longer one of its
 * Service's are closed (bpf/svc-destroy.ts), in the pods' namespaces that asked for
 * translation: a connected client would otherwise keep talking to it (kube-proxy flushes
 * conntrack for the same reason). What each socket was translated to is its own state
 * (socket storage), read by the iterators themselves.
 */
import type { V1EndpointSlice, V1Service } from "@kubernetes/client-node";
import {
  ensureBpffsRoot,
  frontendText,
  openOrCreateSvcMaps,
  type ServiceEntry,
  ServiceTable,
  type SocketCloser,
  type SvcMaps,
  svcTables,
} from "../bpf/index";
import { agentLog } from "./log";
import { namespacesWithCookies } from "./pod-namespaces";
import { planServices, type SkipReason } from "./service-plan";

export interface ServiceSyncStatus {
  /** Both Services and EndpointSlices were listed, and the tables written since. */
  synced: boolean;
  services: number;
  backends: number;
  /** Service ports and endpoints left out of the last plan, by reason. */
  skipped: Record<SkipReason, number>;
  /** The last run's failure; cleared by a run that succeeds. */
  error: string | undefined;
  /** Sockets closed because their backend was withdrawn, since the agent started. */
  closedSockets: number;
}

export class ServiceSync {
  readonly status: ServiceSyncStatus = {
    synced: false,
    services: 0,
    backends: 0,
    skipped: { protocol: 0, port: 0, address: 0, affinity: 0 },
    error: undefined,
    closedSockets: 0,
  };
  private services: V1Service[] = [];
  private slices: V1EndpointSlice[] = [];
  private listed = { services: false, slices: false };
  private running = false;
  private again = false;

  constructor(
    private readonly bpffsRoot: string,
    private readonly nodeName: string,
    /** bpf_svc.o, whose map specs make the tables where no ADD made them yet. */
    private readonly object: () => Buffer,
    private readonly closer: SocketCloser,
  ) {}

  servicesChanged(services: V1Service[], complete: boolean): void {
    this.services = services;
    if (complete) this.listed.services = true;
    this.request();
  }

  slicesChanged(slices: V1EndpointSlice[], complete: boolean): void {
    this.slices = slices;
    if (complete) this.listed.slices = true;
    this.request();
  }

  request(): void {
    if (!this.listed.services || !this.listed.slices) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    // Off the event that asked: many changes in one turn of the loop make one run.
    setImmediate(() => {
      try {
        do {
          this.again = false;
          this.run();
        } while (this.again);
      } finally {
        this.running = false;
      }
    });
  }

  private run(): void {
    try {
      const plan = planServices(this.services, this.slices, this.nodeName);
      ensureBpffsRoot(this.bpffsRoot);
      const maps = openOrCreateSvcMaps(this.bpffsRoot, this.object());
      try {
        const table = new ServiceTable(svcTables(maps));
        const before = table.entries();
        const wanted = new Set(plan.entries.map((e) => frontendText(e.frontend)));
        for (const held of table.entries()) {
          if (!wanted.has(frontendText(held.frontend))) table.remove(held.frontend);
        }
        for (const entry of plan.entries) table.write(entry);
        this.closeWithdrawn(maps, before, plan.entries);
      } finally {
        maps.close();
      }
      const skippedBefore = JSON.stringify(this.status.skipped);
      Object.assign(this.status, {
        synced: true,
        services: plan.entries.length,
        backends: plan.entries.reduce((n, e) => n + e.backends.length, 0),
        skipped: plan.skipped,
        error: undefined,
      });
      if (JSON.stringify(plan.skipped) !== skippedBefore) {
        agentLog.warn(`services: left out of the tables, by reason: ${JSON.stringify(plan.skipped)}`);
      }
    } catch (e) {
      this.status.error = (e as Error).message;
      agentLog.warn(`services: ${(e as Error).message}`);
    }
  }

  /** Closes the sockets connected to a backend that the write took from its Service:
   * the pairs of the tables before it that the plan no longer has. */
  private closeWithdrawn(maps: SvcMaps, before: readonly ServiceEntry[], entries: readonly ServiceEntry[]): void {
    const backendText = (b: { ip: string; port: number }) => `${b.ip}|${b.port}`;
    const serving = new Map(entries.map((e) => [frontendText(e.frontend), new Set(e.backends.map(backendText))]));
    const withdrawn = before.flatMap((e) => {
      const kept = serving.get(frontendText(e.frontend));
      const gone = e.backends.filter((b) => !kept?.has(backendText(b)));
      return gone.length > 0 ? [{ frontend: e.frontend, backends: gone }] : [];
    });
    if (withdrawn.length === 0) return;
    const cookies = new Set([...maps.netns.keys()].map((k) => k.readBigUInt64LE(0)));
    const closed = this.closer.closeSocketsOfWithdrawn(withdrawn, namespacesWithCookies(cookies), maps.sockets);
    this.status.closedSockets += closed;
    if (closed > 0) agentLog.info(`services: closed ${closed} sockets of withdrawn backends`);
  }
}
