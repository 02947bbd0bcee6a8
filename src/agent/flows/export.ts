/**
 * --flow-log: each flow record as a JSON line appended to a file, for a log shipper to
 * pick up. The file is rotated by size, numbered as logrotate numbers them: before a line
 * would take it past maxBytes it is renamed PATH.1 (PATH.1 to PATH.2, and so on), the
 * oldest beyond maxFiles removed, and a new PATH started. --flow-log-fields keeps only the fields named
 * ("time", "verdict", "source.pod"), so a shipper is sent what it indexes.
 *
 * Writing never fails the reader that feeds it: a write that fails (a full disk, a
 * directory removed) is counted and reported through `onError` (the agent's log, which
 * tells a repeated message once a minute), and the next write opens the file again.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { FlowEnd, FlowRecord } from "../../flows/record";
import { mkdirs } from "../../sys/mkdirs";
import { agentLog } from "../log";

export const DEFAULT_FLOW_LOG_MAX_BYTES = 10 << 20;
export const DEFAULT_FLOW_LOG_FILES = 5;

export interface FlowExportOptions {
  path: string;
  /** The size past which the file is rotated (10 MiB). */
  maxBytes?: number;
  /** Rotated files kept: PATH.1 (the newest) to PATH.N (5; 0 keeps none). */
  maxFiles?: number;
  /** Only these fields, a nested one by its dotted path ("source.pod"); undefined: all. */
  fields?: string[];
  onError?: (e: Error) => void;
}

/** The record's fields and its ends', each checked at compile time against the types. */
const RECORD_FIELDS = Object.keys({
  time: 0,
  node: 0,
  direction: 0,
  subject: 0,
  protocol: 0,
  source: 0,
  destination: 0,
  verdict: 0,
  reason: 0,
  tier: 0,
  policy: 0,
  policies: 0,
  state: 0,
  datapath: 0,
  packets: 0,
  bytes: 0,
} satisfies Record<keyof FlowRecord, 0>);
const END_FIELDS = Object.keys({
  ip: 0,
  port: 0,
  kind: 0,
  namespace: 0,
  pod: 0,
  node: 0,
  service: 0,
} satisfies Record<keyof FlowEnd, 0>);

/** Throws, naming it, for a field a record does not have ("verdicts", "source.name"). */
export function checkFlowFields(fields: readonly string[]): void {
  for (const field of fields) {
    const [top = "", nested, ...more] = field.split(".");
    const known =
      RECORD_FIELDS.includes(top) &&
      more.length === 0 &&
      (nested === undefined || ((top === "source" || top === "destination") && END_FIELDS.includes(nested)));
    if (!known)
      throw new Error(
        `no flow record field "${field}": ${RECORD_FIELDS.join(", ")}, or source.X and destination.X with X one of ${END_FIELDS.join(", ")}`,
      );
  }
}

/** `record` with only `fields` (dotted paths reach into its ends); a field it lacks is left out. */
export function pickFields(record: FlowRecord, fields: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of fields) {
    const [top = "", nested] = field.split(".");
    const value = (record as unknown as Record<string, unknown>)[top];
    if (value === undefined) continue;
    if (nested === undefined) {
      out[top] = value;
      continue;
    }
    const inner = (value as Record<string, unknown>)[nested];
    if (inner === undefined) continue;
    out[top] = { ...(out[top] as Record<string, unknown> | undefined), [nested]: inner };
  }
  return out;
}

export class FlowExport {
  /** Records written, and records lost to a failed write. */
  written = 0;
  failures = 0;
  private fd: number | undefined;
  private size = 0;
  private readonly maxBytes: number;
  private readonly maxFiles: number;

  constructor(private readonly options: FlowExportOptions) {
    this.maxBytes = options.maxBytes ?? DEFAULT_FLOW_LOG_MAX_BYTES;
    this.maxFiles = options.maxFiles ?? DEFAULT_FLOW_LOG_FILES;
    if (!Number.isInteger(this.maxBytes) || this.maxBytes < 1) throw new Error(`bad flow log size ${this.maxBytes}`);
    if (!Number.isInteger(this.maxFiles) || this.maxFiles < 0)
      throw new Error(`bad flow log file count ${this.maxFiles}`);
    if (options.fields) checkFlowFields(options.fields);
  }

  write(record: FlowRecord): void {
    const fields = this.options.fields;
    this.writeObject(fields ? pickFields(record, fields) : record);
  }

  /** Any document as one line, rotated as records are (the aggregates' file). */
  writeObject(object: unknown): void {
    const line = Buffer.from(`${JSON.stringify(object)}\n`);
    try {
      // A line is never split across files: the file rotates before one that would pass the bound.
      if (this.fd !== undefined && this.size > 0 && this.size + line.length > this.maxBytes) this.rotate();
      const fd = this.open();
      fs.writeSync(fd, line);
      this.size += line.length;
      this.written++;
    } catch (e) {
      this.failures++;
      this.closeFile();
      (this.options.onError ?? ((err: Error) => agentLog.warn(`flow log: ${err.message}`)))(e as Error);
    }
  }

  close(): void {
    this.closeFile();
  }

  private open(): number {
    if (this.fd !== undefined) return this.fd;
    mkdirs(path.dirname(this.options.path), 0o755);
    const fd = fs.openSync(this.options.path, "a", 0o644);
    this.fd = fd;
    this.size = fs.fstatSync(fd).size;
    // Where the agent restarts past the bound, the first write rotates.
    if (this.size >= this.maxBytes) {
      this.rotate();
      return this.open();
    }
    return fd;
  }

  /** PATH.N-1 → PATH.N … PATH → PATH.1, dropping what falls past maxFiles. */
  private rotate(): void {
    this.closeFile();
    const file = this.options.path;
    const numbered = (n: number) => `${file}.${n}`;
    if (this.maxFiles === 0) {
      fs.rmSync(file, { force: true });
      return;
    }
    fs.rmSync(numbered(this.maxFiles), { force: true });
    for (let n = this.maxFiles - 1; n >= 1; n--)
      if (fs.existsSync(numbered(n))) fs.renameSync(numbered(n), numbered(n + 1));
    fs.renameSync(file, numbered(1));
  }

  private closeFile(): void {
    if (this.fd === undefined) return;
    const fd = this.fd;
    this.fd = undefined;
    try {
      fs.closeSync(fd);
    } catch {
      // Closing a descriptor the write just failed on: nothing more to lose.
    }
  }
}
