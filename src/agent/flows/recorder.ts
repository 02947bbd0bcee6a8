/**
 * --flows, wired: the reader takes the programs' records, and each goes to the store
 * (/flows, `netkit-cni flows`), the metrics, and with --flow-log the file and, with
 * --flow-aggregate-seconds, the window's aggregates beside it (FILE.aggregated). Ends are
 * named from the informers the policy controller already keeps; a local pod's datapath
 * from the node's endpoint map, read again at most every few seconds.
 */

import { canonicalAddress } from "../../cni/address";
import { endpointMapEntries } from "../../datapath/node-state";
import { monotonicNs } from "../../sys/clock";
import type { AgentMetrics } from "../metrics";
import type { AgentOptions } from "../options";
import type { PolicyNode, PolicyPod } from "../policy/model/objects";
import type { ServiceObject } from "../services/plan";
import { AddressBook } from "./address-book";
import { FlowAggregator } from "./aggregate";
import { FlowExport } from "./export";
import { type FlowEventSource, FlowReader, type RuleNames } from "./reader";
import { FlowStore } from "./store";

const DATAPATH_REFRESH_MS = 5000;
const AGGREGATE_GRACE_MS = 1000;

export interface RecorderSources {
  pods: { values(): Iterable<PolicyPod> };
  nodes: { values(): Iterable<PolicyNode> };
  services: { values(): Iterable<ServiceObject> };
  rules: RuleNames;
  events: FlowEventSource;
}

const clusterIpsOf = (s: ServiceObject): string[] =>
  (s.spec?.clusterIPs ?? (s.spec?.clusterIP ? [s.spec.clusterIP] : []))
    .map((ip) => canonicalAddress(ip))
    .filter((ip): ip is string => ip !== undefined);

export class FlowRecorder {
  readonly store: FlowStore;
  private readonly reader: FlowReader;
  private readonly log: FlowExport | undefined;
  private readonly aggregates: { aggregator: FlowAggregator; file: FlowExport } | undefined;
  private readonly book: AddressBook;
  private datapaths = new Map<string, "netkit" | "veth">();
  private datapathsAt = Number.NEGATIVE_INFINITY;
  private flushTimer: NodeJS.Timeout | undefined;

  constructor(opts: AgentOptions, bpffsRoot: string, sources: RecorderSources, metrics: AgentMetrics) {
    this.store = new FlowStore(opts.flowBuffer);
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
    this.book = new AddressBook({
      pods: () => sources.pods.values(),
      nodes: () => sources.nodes.values(),
      services: () =>
        [...sources.services.values()].map((s) => ({
          namespace: s.metadata?.namespace ?? "",
          name: s.metadata?.name ?? "",
          clusterIPs: clusterIpsOf(s),
        })),
    });
    this.reader = new FlowReader(
      sources.events,
      () => {
        this.book.refresh();
        return {
          node: opts.nodeName,
          book: this.book,
          rules: sources.rules,
          // The programs' times are CLOCK_MONOTONIC (bpf_ktime_get_ns).
          wallOffsetNs: BigInt(Date.now()) * 1_000_000n - monotonicNs(),
          datapathOf: (ip) => this.datapathOf(bpffsRoot, ip),
        };
      },
      {
        record: (r) => {
          this.store.add(r);
          this.log?.write(r);
          this.aggregates?.aggregator.add(r);
          metrics.countFlow(r);
        },
        lost: (n) => {
          this.store.droppedByKernel = Number(n);
          metrics.setFlowRecordsLost(Number(n));
        },
      },
    );
  }

  private datapathOf(bpffsRoot: string, ip: string): "netkit" | "veth" | undefined {
    const now = Date.now();
    if (!this.datapaths.has(ip) && now - this.datapathsAt >= DATAPATH_REFRESH_MS) {
      this.datapathsAt = now;
      this.datapaths = new Map([...endpointMapEntries(bpffsRoot)].map(([a, e]) => [a, e.datapath]));
    }
    return this.datapaths.get(ip);
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
    this.log?.close();
    this.aggregates?.file.close();
  }
}
