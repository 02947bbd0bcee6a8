/**
 * --flow-aggregate-seconds: flow records summed per window, as Calico's Goldmane does, for
 * a picture of who talks to whom that stays small however many flows pass. A window's
 * aggregates are keyed by both ends (a pod as "namespace/name"; what is not a pod by its
 * kind, without its address: "world", "node:NAME", "service:namespace/name"), the
 * destination port, the protocol, the verdict and the deciding rule, and count the flows
 * started. Windows are aligned to multiples of their length since the epoch, so every
 * node's windows line up.
 *
 * Bounded: past maxKeys keys in one window, records count under an overflow aggregate (one
 * per verdict) whose other key fields read "other". Pure: the caller passes the time.
 */
import type { FlowEnd, FlowRecord, FlowVerdict } from "../../flows/record";

export const DEFAULT_AGGREGATE_WINDOW_MS = 60_000;
export const DEFAULT_AGGREGATE_KEYS = 1000;

export interface AggregateRecord {
  /** The window, RFC 3339: from start (included) to end (excluded). */
  start: string;
  end: string;
  source: string;
  destination: string;
  destinationPort: number;
  protocol: string;
  verdict: FlowVerdict;
  policy: string;
  /** Flows started in the window (records seen). */
  flows: number;
  /** Set on the aggregate that counts what passed the window's bound on keys. */
  overflow?: true;
  /*
   * Packets and bytes each way, source to destination and back, that crossed in the
   * window (flow-ends.ts: the pods' flow tables read every few seconds, each read's
   * growth counted in the window it was read in). Absent: nothing of the key's flows
   * was counted in the window (a denied flow, or a flow that started before recording
   * and sent nothing since).
   */
  packetsSent?: number;
  bytesSent?: number;
  packetsReceived?: number;
  bytesReceived?: number;
}

export interface AggregatorOptions {
  windowMs?: number;
  /** Distinct keys one window holds before the rest count as overflow. */
  maxKeys?: number;
}

type Counts = Pick<AggregateRecord, "packetsSent" | "bytesSent" | "packetsReceived" | "bytesReceived">;
type Key = Omit<AggregateRecord, "start" | "end" | "flows" | keyof Counts>;

interface Window {
  keys: Map<string, Key & Counts & { flows: number }>;
}

/** Packets and bytes each way, as a counted flow's record gives them. */
export interface FlowCounts {
  packets: { sent: number; received: number };
  bytes: { sent: number; received: number };
}

/** An end without its address: its pod, else its kind and name. */
export function endLabel(end: FlowEnd): string {
  switch (end.kind) {
    case "pod":
      return end.namespace && end.pod ? `${end.namespace}/${end.pod}` : "pod";
    case "node":
      return end.node ? `node:${end.node}` : "node";
    case "service":
      return end.namespace && end.service ? `service:${end.namespace}/${end.service}` : "service";
    default:
      return "world";
  }
}

export class FlowAggregator {
  private readonly windowMs: number;
  private readonly maxKeys: number;
  private readonly windows = new Map<number, Window>();
  /** Windows starting before this are flushed: a late record counts in the first one still open. */
  private flushedUpTo = Number.NEGATIVE_INFINITY;

  constructor(options: AggregatorOptions = {}) {
    this.windowMs = options.windowMs ?? DEFAULT_AGGREGATE_WINDOW_MS;
    this.maxKeys = options.maxKeys ?? DEFAULT_AGGREGATE_KEYS;
    if (!Number.isInteger(this.windowMs) || this.windowMs < 1)
      throw new Error(`bad aggregate window ${this.windowMs} ms`);
    if (!Number.isInteger(this.maxKeys) || this.maxKeys < 1) throw new Error(`bad aggregate key bound ${this.maxKeys}`);
  }

  /** A flow started (a record of its first packet, or a denied one's). */
  add(record: FlowRecord): void {
    const entry = this.entryOf(record, Date.parse(record.time));
    if (entry) entry.flows++;
  }

  /** What `record`'s flow sent and received since it was last counted, at `now` (ms since the epoch). */
  count(record: FlowRecord, counts: FlowCounts, now: number): void {
    const entry = this.entryOf(record, now);
    if (!entry) return;
    entry.packetsSent = (entry.packetsSent ?? 0) + counts.packets.sent;
    entry.bytesSent = (entry.bytesSent ?? 0) + counts.bytes.sent;
    entry.packetsReceived = (entry.packetsReceived ?? 0) + counts.packets.received;
    entry.bytesReceived = (entry.bytesReceived ?? 0) + counts.bytes.received;
  }

  private entryOf(record: FlowRecord, at: number): (Key & Counts & { flows: number }) | undefined {
    const time = Math.max(at, this.flushedUpTo);
    if (Number.isNaN(time)) return undefined;
    const start = time - (time % this.windowMs);
    let window = this.windows.get(start);
    if (!window) {
      window = { keys: new Map() };
      this.windows.set(start, window);
    }
    let key: Key = {
      source: endLabel(record.source),
      destination: endLabel(record.destination),
      destinationPort: record.destination.port,
      protocol: record.protocol,
      verdict: record.verdict,
      policy: record.policy,
    };
    let id = JSON.stringify(Object.values(key));
    if (!window.keys.has(id) && window.keys.size >= this.maxKeys) {
      const other = "other";
      key = {
        source: other,
        destination: other,
        destinationPort: 0,
        protocol: other,
        verdict: record.verdict,
        policy: other,
        overflow: true,
      };
      id = `overflow ${record.verdict}`;
    }
    let entry = window.keys.get(id);
    if (!entry) {
      entry = { ...key, flows: 0 };
      window.keys.set(id, entry);
    }
    return entry;
  }

  /** The aggregates of every window that ended by `now` (ms since the epoch), oldest window first, most flows first. */
  flush(now: number): AggregateRecord[] {
    const out: AggregateRecord[] = [];
    const closed = [...this.windows.keys()].filter((start) => start + this.windowMs <= now).sort((a, b) => a - b);
    for (const start of closed) {
      const window = this.windows.get(start) as Window;
      this.windows.delete(start);
      const range = { start: new Date(start).toISOString(), end: new Date(start + this.windowMs).toISOString() };
      const rows = [...window.keys.values()].sort((a, b) => b.flows - a.flows);
      for (const { flows, packetsSent, bytesSent, packetsReceived, bytesReceived, ...key } of rows) {
        const counted = packetsSent === undefined ? {} : { packetsSent, bytesSent, packetsReceived, bytesReceived };
        out.push({ ...range, ...key, flows, ...counted });
      }
    }
    this.flushedUpTo = Math.max(this.flushedUpTo, now - (now % this.windowMs));
    return out;
  }
}
