/**
 * An informer: every object of one kind the API has, kept current by list and watch
 * (transport.ts), with a callback per object that changed. Controllers read their informers'
 * stores and hear of changes by key (`Informer`, which tests fake); this is the one
 * implementation against the API.
 *
 * The protocol, as the API concepts page describes it ("Efficient detection of changes",
 * "Watch bookmarks"):
 * - list (in chunks), then watch from the list's resourceVersion, asking for bookmarks so
 *   that a resumed watch starts from a recent version; the server ends each watch after
 *   5–10 minutes (timeoutSeconds, as client-go's reflector picks), so a silently dead
 *   connection is replaced;
 * - a watch that ends resumes from the last version seen; 410 Gone (an ERROR event, or a
 *   list's status) forgets it, and the next list is compared with the store: what
 *   changed, appeared or went meanwhile is told per key, as a watch would have;
 * - failures are retried after a pause doubling up to 30 s, the last known objects kept;
 *   at most one new watch a second, and a watch that ends at once without an event
 *   counts as a failure (a server answering garbage is not hammered).
 *
 * Each object goes through the controller's `transform` as it arrives: the store keeps
 * only what the agent uses (a few hundred bytes instead of the whole object), and a
 * change that leaves that unchanged (a Node's heartbeat, a Service's annotations) is no
 * change at all.
 */
import type { KubeConfig } from "@kubernetes/client-node";
import { ApiError, listInChunks, type WatchEvent, watchLines } from "./transport";

export type ChangeHandler<T> = (key: string, before: T | undefined, after: T | undefined) => void;

/** What a controller sees of an informer. */
export interface Informer<T> {
  /** A complete list has been read: the store holds every object the API has. */
  readonly synced: boolean;
  get(key: string): T | undefined;
  values(): IterableIterator<T>;
  /** Every object with its key. */
  entries(): IterableIterator<[string, T]>;
  readonly size: number;
  /** Every change after the first sync, one call per object. */
  onChange(handler: ChangeHandler<T>): void;
  /** The first complete list (the store is whole from now on). */
  onSynced(handler: () => void): void;
}

/** What `transform` makes of an object: undefined for one the agent cannot track. */
export interface Transformed<T> {
  key: string;
  object: T;
}

export interface InformerObserver {
  failed(error: Error, retryInMs: number): void;
  listed?(objects: number, ms: number): void;
  /** A chunk of a list was taken in: its text and objects are garbage now. */
  chunkTaken?(): void;
}

export const BACKOFF_MS = { first: 500, max: 30_000 };
const MIN_WATCH_INTERVAL_MS = 1000;
const EMPTY_WATCH_MS = 1000;

/** namespace/name for a namespaced object, name for a cluster-scoped one. */
export function objectKey(object: unknown): string | undefined {
  const meta = (object as { metadata?: { name?: unknown; namespace?: unknown } } | null)?.metadata;
  if (typeof meta?.name !== "string" || meta.name === "") return undefined;
  return typeof meta.namespace === "string" && meta.namespace !== "" ? `${meta.namespace}/${meta.name}` : meta.name;
}

/** Two transformed objects are the same when their JSON is (they are small, plain data;
 * addresses may be bigints). */
const json = (v: unknown) => JSON.stringify(v, (_, x) => (typeof x === "bigint" ? x.toString() : x));
const same = (a: unknown, b: unknown) => json(a) === json(b);

/**
 * What every informer shares: its store of objects by key, who hears of changes, and
 * how a whole new list replaces the store (synced at the first, else each key that
 * changed, appeared or went told, as a watch would have).
 */
export class InformerStore<T> implements Informer<T> {
  protected store = new Map<string, T>();
  private readonly changeHandlers: ChangeHandler<T>[] = [];
  private readonly syncedHandlers: (() => void)[] = [];
  private isSynced = false;

  get synced(): boolean {
    return this.isSynced;
  }

  get size(): number {
    return this.store.size;
  }

  get(key: string): T | undefined {
    return this.store.get(key);
  }

  values(): IterableIterator<T> {
    return this.store.values();
  }

  entries(): IterableIterator<[string, T]> {
    return this.store.entries();
  }

  onChange(handler: ChangeHandler<T>): void {
    this.changeHandlers.push(handler);
  }

  onSynced(handler: () => void): void {
    this.syncedHandlers.push(handler);
  }

  /** A complete list: the store becomes `next`; synced at the first, else the differences told per key. */
  protected replaceAll(next: Map<string, T>): void {
    const before = this.store;
    this.store = next;
    if (!this.isSynced) {
      this.isSynced = true;
      for (const h of this.syncedHandlers) h();
      return;
    }
    for (const [key, old] of before) {
      const now = next.get(key);
      if (now === undefined || !same(old, now)) this.tell(key, old, now);
    }
    for (const [key, now] of next) if (!before.has(key)) this.tell(key, undefined, now);
  }

  /** Tells the handlers of one key's change (the store already holds `after`). */
  protected tell(key: string, before: T | undefined, after: T | undefined): void {
    for (const h of this.changeHandlers) h(key, before, after);
  }
}

export class ApiInformer<T> extends InformerStore<T> {
  private resourceVersion = "";
  private stopped = true;
  private abort = new AbortController();
  private backoffMs = BACKOFF_MS.first;
  private lastWatch = 0;
  private wake: (() => void) | undefined;

  constructor(
    private readonly kc: KubeConfig,
    readonly apiPath: string,
    private readonly transform: (raw: unknown) => Transformed<T> | undefined,
    private readonly observer: InformerObserver,
  ) {
    super();
  }

  /** The version of the last event or list seen ("" before the first list, or after a 410). */
  get version(): string {
    return this.resourceVersion;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.abort = new AbortController();
    void this.run();
  }

  stop(): void {
    this.stopped = true;
    this.abort.abort();
    this.wake?.();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      try {
        if (!this.resourceVersion) await this.list();
        await this.watchOnce();
        this.backoffMs = BACKOFF_MS.first;
      } catch (e) {
        if (this.stopped) break;
        const error = e instanceof Error ? e : new Error(String(e));
        if (error instanceof ApiError && error.code === 410) {
          this.resourceVersion = ""; // relist at once
          continue;
        }
        const wait = this.backoffMs;
        this.backoffMs = Math.min(this.backoffMs * 2, BACKOFF_MS.max);
        this.observer.failed(error, wait);
        await this.sleep(wait);
      }
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  private async list(): Promise<void> {
    const started = performance.now();
    const next = new Map<string, T>();
    const rv = await listInChunks(
      this.kc,
      this.apiPath,
      (item) => {
        const t = this.transform(item);
        if (t) next.set(t.key, t.object);
      },
      this.abort.signal,
      () => this.observer.chunkTaken?.(),
    );
    this.resourceVersion = rv;
    this.observer.listed?.(next.size, performance.now() - started);
    this.replaceAll(next); // a relist tells what the watches missed
  }

  private async watchOnce(): Promise<void> {
    const since = Date.now() - this.lastWatch;
    if (since < MIN_WATCH_INTERVAL_MS) await this.sleep(MIN_WATCH_INTERVAL_MS - since);
    if (this.stopped) return;
    this.lastWatch = Date.now();
    const query = {
      resourceVersion: this.resourceVersion,
      allowWatchBookmarks: "true",
      timeoutSeconds: String(300 + Math.floor(Math.random() * 300)),
    };
    const events = await watchLines(this.kc, this.apiPath, query, (e) => this.event(e), this.abort.signal);
    // The API ends a watch from a stale version without the 410 it owes now and then
    // (kubernetes/kubernetes#104171), and a broken proxy looks like a watch that ended.
    if (!this.stopped && events === 0 && Date.now() - this.lastWatch < EMPTY_WATCH_MS) {
      throw new Error(`the API ended a watch of ${this.apiPath} at once, without an event`);
    }
  }

  private event(e: WatchEvent): void {
    const version = (e.object as { metadata?: { resourceVersion?: unknown } } | null)?.metadata?.resourceVersion;
    switch (e.type) {
      case "ADDED":
      case "MODIFIED": {
        const t = this.transform(e.object);
        if (t) {
          const old = this.store.get(t.key);
          this.store.set(t.key, t.object);
          if (old === undefined || !same(old, t.object)) this.tell(t.key, old, t.object);
        }
        break;
      }
      case "DELETED": {
        const key = objectKey(e.object);
        const old = key === undefined ? undefined : this.store.get(key);
        if (key !== undefined && old !== undefined) {
          this.store.delete(key);
          this.tell(key, old, undefined);
        }
        break;
      }
      case "BOOKMARK":
        break;
      case "ERROR": {
        const status = (e.object ?? {}) as { code?: unknown; message?: unknown };
        const code = typeof status.code === "number" ? status.code : undefined;
        throw new ApiError(`watch ${this.apiPath}: ${String(status.message ?? "an ERROR event")}`, code);
      }
      default:
        throw new ApiError(`watch ${this.apiPath}: an event of unknown type ${JSON.stringify(e.type)}`, undefined);
    }
    if (typeof version === "string" && version !== "") this.resourceVersion = version;
  }
}
