/**
 * The newest flow records the agent read, kept in memory for /flows: a ring of a fixed
 * capacity (the oldest record gives way, counted), and the followers told of each record
 * as it is added. Nothing is kept on disk here (export.ts does that).
 */
import { type FlowFilter, matchesFlow } from "../../flows/filter";
import type { FlowRecord } from "../../flows/record";

export const DEFAULT_FLOW_CAPACITY = 8192;

interface Follower {
  filter: FlowFilter;
  tell: (record: FlowRecord) => void;
}

export class FlowStore {
  private readonly ring: (FlowRecord | undefined)[];
  /** Where the next record goes. */
  private next = 0;
  private size = 0;
  private readonly followers = new Set<Follower>();
  private addedCount = 0;
  private overwrittenCount = 0;
  private kernelDrops = 0;

  constructor(readonly capacity = DEFAULT_FLOW_CAPACITY) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new Error(`flow store capacity must be a positive integer, not ${capacity}`);
    this.ring = new Array(capacity);
  }

  /** Keeps `record` and tells the followers whose filter it matches (each must not throw). */
  add(record: FlowRecord): void {
    if (this.size === this.capacity) this.overwrittenCount++;
    else this.size++;
    this.ring[this.next] = record;
    this.next = (this.next + 1) % this.capacity;
    this.addedCount++;
    for (const f of this.followers) if (matchesFlow(f.filter, record)) f.tell(record);
  }

  /** The newest `n` records that match `filter`, oldest first. */
  last(n: number, filter: FlowFilter = {}): FlowRecord[] {
    const found: FlowRecord[] = [];
    for (let i = 1; i <= this.size && found.length < n; i++) {
      const record = this.ring[(this.next - i + this.capacity) % this.capacity] as FlowRecord;
      if (matchesFlow(filter, record)) found.push(record);
    }
    return found.reverse();
  }

  /** Calls `tell` with each record added from now on that matches `filter`, until the returned function is called. */
  subscribe(filter: FlowFilter, tell: (record: FlowRecord) => void): () => void {
    const follower = { filter, tell };
    this.followers.add(follower);
    return () => this.followers.delete(follower);
  }

  /** Records added since the start. */
  get added(): number {
    return this.addedCount;
  }

  /** Records that gave way to newer ones. */
  get overwritten(): number {
    return this.overwrittenCount;
  }

  get following(): number {
    return this.followers.size;
  }

  /** Records the datapath could not hand over (its ring was full), as the reader last read them. */
  get droppedByKernel(): number {
    return this.kernelDrops;
  }

  set droppedByKernel(n: number) {
    this.kernelDrops = n;
  }
}
