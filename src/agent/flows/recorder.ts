/**
 * --flows, wired: the reader takes the programs' records, and each goes to the store
 * (/flows, `netkit-cni flows`), the metrics, and with --flow-log the file and, with
 * --flow-aggregate-seconds, the window's aggregates beside it (FILE.aggregated). Ends are
 * named from the informers the policy controller already keeps; a local pod's datapath
 * from the node's endpoint map, read again at most every few seconds. Every
 * COUNT_SCAN_MS the pods' flow tables are read for their counts: what grew goes to the
 * aggregates, and each flow that ended is a record of its own (state "ended").
 */

import { canonicalAddress } from "../../cni/address";
import { endpointMapEntries } from "../../datapath/node-state";
import type { FlowRecord } from "../../flows/record";
import { monotonicNs } from "../../sys/clock";
import type { Informer } from "../kube/informer";
import { agentLog } from "../log";
import type { AgentMetrics } from "../metrics";
import type { AgentOptions } from "../options";
import type { PolicyNode, PolicyPod } from "../policy/model/objects";
import type { ServiceObject } from "../services/plan";
import { AddressBook } from "./address-book";
import { FlowAggregator } from "./aggregate";
import { countedRecordOf, type FlowStart, flowIdentity } from "./counted-record";
import { FlowExport } from "./export";
import { FlowEnds } from "./flow-ends";
import { type FlowEventSource, FlowReader, type RuleNames } from "./reader";
import { FlowStore } from "./store";

const DATAPATH_REFRESH_MS = 5000;
const AGGREGATE_GRACE_MS = 1000;
/** How often the flow tables are read for counts: an ended flow is told this late at most. */
const COUNT_SCAN_MS = 2000;
/** First packets remembered for their flows' end records; past it the oldest go. */
const MAX_STARTS = 65_536;

/** What the recorder reads of an informer: its objects once synced, then each change. */
type Followed<T> = Pick<Informer<T>, "synced" | "entries" | "onChange" | "onSynced">;

export interface RecorderSources {
  pods: Followed<PolicyPod>;
  nodes: Followed<PolicyNode>;
  services: Followed<ServiceObject>;
  rules: RuleNames;
  events: FlowEventSource;
}

const clusterIpsOf = (s: ServiceObject): string[] =>
  (s.spec?.clusterIPs ?? (s.spec?.clusterIP ? [s.spec.clusterIP] : []))
    .map((ip) => canonicalAddress(ip))
    .filter((ip): ip is string => ip !== undefined);

const NONE = { sent: 0, received: 0 };

/** Hands `apply` every object of `informer` once it has synced, then each change (undefined: gone). */
function follow<T>(informer: Followed<T>, apply: (key: string, object: T | undefined) => void): void {
  const seed = () => {
    for (const [key, object] of informer.entries()) apply(key, object);
  };
  if (informer.synced) seed();
  else informer.onSynced(seed);
  informer.onChange((key, _before, after) => apply(key, after));
}
// The programs' times are CLOCK_MONOTONIC (bpf_ktime_get_ns).
const wallOffsetNs = (): bigint => BigInt(Date.now()) * 1_000_000n - monotonicNs();

export class FlowRecorder {
  readonly store: FlowStore;
  private readonly reader: FlowReader;
  private readonly log: FlowExport | undefined;
  private readonly aggregates: { aggregator: FlowAggregator; file: FlowExport } | undefined;
  private readonly book: AddressBook;
  private endpoints = new Map<string, { hostIfindex: number; datapath: "netkit" | "veth" }>();
  private endpointsAt = Number.NEGATIVE_INFINITY;
  private flushTimer: NodeJS.Timeout | undefined;
  private countTimer: NodeJS.Timeout | undefined;
  private readonly ends = new FlowEnds();
  private readonly starts = new Map<string, FlowStart>();
  private readonly emit: (r: FlowRecord) => void;
  private readonly tables: { bpffsRoot: string; nodeName: string; events: FlowEventSource };

  constructor(opts: AgentOptions, bpffsRoot: string, sources: RecorderSources, metrics: AgentMetrics) {
    this.store = new FlowStore(opts.flowBuffer);
    this.tables = { bpffsRoot, nodeName: opts.nodeName, events: sources.events };
    if (opts.flowLog) {
      this.log = new FlowExport({
        path: opts.flowLog,
        maxBytes: opts.flowLogMaxBytes,
        maxFiles: opts.flowLogFiles,
        fields: opts.flowLogFields.length > 0 ? opts.flowLogFields : undefined,
      });
      if (opts.flowAggregateSeconds > 0) {
        this.aggregates = {
          aggregator: new FlowAggregator({ windowMs: opts.flowAggregateSeconds * 1000 }),
          file: new FlowExport({
            path: `${opts.flowLog}.aggregated`,
            maxBytes: opts.flowLogMaxBytes,
            maxFiles: opts.flowLogFiles,
          }),
        };
      }
    }
    this.book = new AddressBook();
    follow(sources.pods, (key, p) => this.book.pod(key, p));
    follow(sources.nodes, (key, n) => this.book.node(key, n));
    follow(sources.services, (key, svc) =>
      this.book.service(
        key,
        svc && {
          namespace: svc.metadata?.namespace ?? "",
          name: svc.metadata?.name ?? "",
          clusterIPs: clusterIpsOf(svc),
        },
      ),
    );
    this.emit = (r) => {
      this.store.add(r);
      this.log?.write(r);
      if (r.state === "ended") return;
      this.aggregates?.aggregator.add(r);
      metrics.countFlow(r);
      if (r.verdict !== "dropped") this.remember(r);
    };
    this.reader = new FlowReader(
      sources.events,
      () => {
        return {
          node: opts.nodeName,
          book: this.book,
          rules: sources.rules,
          wallOffsetNs: wallOffsetNs(),
          datapathOf: (ip) => this.endpointOf(bpffsRoot, ip)?.datapath,
        };
      },
      {
        record: this.emit,
        lost: (n) => {
          this.store.droppedByKernel = Number(n);
          metrics.setFlowRecordsLost(Number(n));
        },
      },
    );
  }

  private endpointOf(bpffsRoot: string, ip: string) {
    const now = Date.now();
    if (!this.endpoints.has(ip) && now - this.endpointsAt >= DATAPATH_REFRESH_MS) {
      this.endpointsAt = now;
      this.endpoints = endpointMapEntries(bpffsRoot);
    }
    return this.endpoints.get(ip);
  }

  /** What let a flow through, for its end's record. */
  private remember(r: FlowRecord): void {
    const id = flowIdentity(r);
    this.starts.delete(id);
    this.starts.set(id, { verdict: r.verdict, reason: r.reason, tier: r.tier, policy: r.policy, policies: r.policies });
    if (this.starts.size > MAX_STARTS) this.starts.delete(this.starts.keys().next().value as string);
  }

  /** One read of the flow tables: growth to the aggregates, ended flows to every sink. */
  countFlows(): void {
    const { bpffsRoot, nodeName, events } = this.tables;
    const { deltas, ended } = this.ends.scan(events.counted(), monotonicNs());
    if (deltas.length === 0 && ended.length === 0) return;
    // A flow in the tables had its first packet's record queued before the scan read it:
    // read the queue now, or a flow counted between two of the reader's turns would be
    // told without what let it in ("started before it was recorded") and aggregated
    // under that key, apart from its own.
    this.reader.drain();
    const ctx = {
      node: nodeName,
      book: this.book,
      wallOffsetNs: wallOffsetNs(),
      endpointOf: (ip: string) => this.endpointOf(bpffsRoot, ip),
      startOf: (id: string) => this.starts.get(id),
    };
    const now = Date.now();
    for (const d of deltas) {
      if (!this.aggregates) break;
      const r = countedRecordOf(d.ifindex, d.flow, d, ctx);
      this.aggregates.aggregator.count(r, { packets: r.packets ?? NONE, bytes: r.bytes ?? NONE }, now);
    }
    for (const e of ended) {
      const r = countedRecordOf(e.ifindex, e.flow, e.flow, ctx);
      this.starts.delete(flowIdentity(r));
      this.emit(r);
    }
  }

  /** For /status: records read, given way in memory, followers, lost in the kernel's queue, and the log's writes. */
  get status() {
    return {
      records: this.store.added,
      overwritten: this.store.overwritten,
      followers: this.store.following,
      lost: this.store.droppedByKernel,
      ...(this.log ? { logWritten: this.log.written, logFailures: this.log.failures } : {}),
    };
  }

  start(): void {
    this.reader.start();
    this.countTimer = setInterval(() => {
      try {
        this.countFlows();
      } catch (e) {
        agentLog.warn(`flows: reading the flow tables' counts failed: ${(e as Error).message}`);
      }
    }, COUNT_SCAN_MS);
    if (this.aggregates) {
      const { aggregator, file } = this.aggregates;
      // A window is written a grace period after it ends: a record is read up to a reader's
      // turn after it was made, and counts in its own window.
      this.flushTimer = setInterval(() => {
        for (const a of aggregator.flush(Date.now() - AGGREGATE_GRACE_MS)) file.writeObject(a);
      }, 1000);
    }
  }

  stop(): void {
    this.reader.stop();
    if (this.flushTimer) clearInterval(this.flushTimer);
    if (this.countTimer) clearInterval(this.countTimer);
    this.log?.close();
    this.aggregates?.file.close();
  }
}
