/**
 * The agent's one work queue, shared by its controllers, built like client-go's
 * rate-limiting queue: a controller's informer events add keys ("routes" + a node name),
 * the queue hands each key to the controller's sync function, one key at a time.
 *
 * - Coalescing: a key is queued at most once. A key added while its sync runs is queued
 *   again after it, so the sync that ends last saw the latest objects.
 * - Retries: a sync that throws is retried after a pause that doubles per failure of
 *   that key (first … max), and no faster than a node-wide bucket allows (retries per
 *   second, with a burst), so a broken API or kernel is not hammered. A success forgets
 *   the key's failures.
 * - Fair to the event loop: each key is synced in a turn of its own, so watches, metrics
 *   scrapes and health checks go on during a long first sync.
 *
 * Reconcile, don't replay: a sync reads the current objects from its informers, never
 * the event that queued it; a key says only what to look at again.
 */

export type SyncFunction = (name: string) => Promise<void> | void;

export interface RetryPolicy {
  firstMs: number;
  maxMs: number;
  /** The bucket every retry takes a token from. */
  perSecond: number;
  burst: number;
}

export const DEFAULT_RETRY: RetryPolicy = { firstMs: 50, maxMs: 30_000, perSecond: 10, burst: 100 };

export interface QueueObserver {
  /** A sync failed; the key is retried after `retryInMs`. */
  failed(kind: string, name: string, error: Error, retryInMs: number): void;
  /** A sync ended without an error after `ms`. */
  synced?(kind: string, name: string, ms: number): void;
}

const SEPARATOR = "\u0000";

export class WorkQueue {
  private readonly syncs = new Map<string, SyncFunction>();
  private readonly order: string[] = [];
  private readonly queued = new Set<string>();
  private readonly again = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly waiting = new Map<string, NodeJS.Timeout>();
  private processing: string | undefined;
  private scheduled = false;
  private stopped = false;
  private tokens: number;
  private tokensAt = Date.now();
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly observer: QueueObserver,
    private readonly retry: RetryPolicy = DEFAULT_RETRY,
  ) {
    this.tokens = retry.burst;
  }

  /** A controller's sync, for its keys of `kind`. */
  register(kind: string, sync: SyncFunction): void {
    if (this.syncs.has(kind)) throw new Error(`${kind} is registered twice`);
    this.syncs.set(kind, sync);
  }

  add(kind: string, name: string): void {
    if (this.stopped) return;
    if (!this.syncs.has(kind)) throw new Error(`no controller syncs ${kind}`);
    const key = kind + SEPARATOR + name;
    if (key === this.processing) {
      this.again.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    // A key waiting for its retry is synced now instead: the new event may have fixed it.
    clearTimeout(this.waiting.get(key));
    this.waiting.delete(key);
    this.queued.add(key);
    this.order.push(key);
    this.schedule();
  }

  /** Keys queued, running or waiting for a retry. */
  get length(): number {
    return this.order.length + this.waiting.size + (this.processing ? 1 : 0);
  }

  /** Resolves once nothing is queued or running (retries waiting do not count). */
  idle(): Promise<void> {
    if (this.order.length === 0 && !this.processing) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  stop(): void {
    this.stopped = true;
    for (const t of this.waiting.values()) clearTimeout(t);
    this.waiting.clear();
    this.order.length = 0;
    this.queued.clear();
    if (!this.processing) this.wakeIdle();
  }

  private schedule(): void {
    if (this.scheduled || this.processing) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.next();
    });
  }

  private async next(): Promise<void> {
    const key = this.order.shift();
    if (key === undefined) {
      this.wakeIdle();
      return;
    }
    this.queued.delete(key);
    this.processing = key;
    const cut = key.indexOf(SEPARATOR);
    const kind = key.slice(0, cut);
    const name = key.slice(cut + 1);
    const started = performance.now();
    try {
      await (this.syncs.get(kind) as SyncFunction)(name);
      this.failures.delete(key);
      this.observer.synced?.(kind, name, performance.now() - started);
    } catch (e) {
      this.retryLater(key, kind, name, e instanceof Error ? e : new Error(String(e)));
    } finally {
      this.processing = undefined;
    }
    if (this.again.delete(key)) this.add(kind, name);
    if (this.order.length > 0) this.schedule();
    else this.wakeIdle();
  }

  private retryLater(key: string, kind: string, name: string, error: Error): void {
    if (this.stopped) return;
    const failures = (this.failures.get(key) ?? 0) + 1;
    this.failures.set(key, failures);
    const backoff = Math.min(this.retry.firstMs * 2 ** (failures - 1), this.retry.maxMs);
    const delay = Math.max(backoff, this.takeToken());
    this.observer.failed(kind, name, error, delay);
    this.again.delete(key); // the retry syncs it again anyway
    this.waiting.set(
      key,
      setTimeout(() => {
        this.waiting.delete(key);
        this.add(kind, name);
      }, delay),
    );
  }

  /** Takes a token from the retry bucket: how long to wait for it (0 when one is there). */
  private takeToken(): number {
    const now = Date.now();
    this.tokens = Math.min(this.retry.burst, this.tokens + ((now - this.tokensAt) / 1000) * this.retry.perSecond);
    this.tokensAt = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens / this.retry.perSecond) * 1000);
  }

  private wakeIdle(): void {
    const waiters = this.idleWaiters.splice(0);
    for (const w of waiters) w();
  }
}
