/**
 * An informer for a kind that a CustomResourceDefinition may or may not serve (the
 * network-policy-api's ClusterNetworkPolicy): the agent starts without it, picks it up
 * when it is installed, moves to a newer version when the CRD serves one, and lets it go
 * when it is removed, without a restart.
 *
 * The API group's discovery document (GET /apis/<group>) says which versions are served;
 * it is read at start and then every `pollMs`. The first of `versions` (most preferred
 * first) that is served is watched by an inner informer; while none is, the kind has no
 * objects and the informer is synced (a 404 for the group is a clear "not installed").
 * A discovery that fails otherwise changes nothing: the objects last known stay, and
 * before the first answer the informer is not synced (the controller waits, as for any
 * informer that has not listed yet).
 *
 * Moving between versions (or to none) is told as changes: the objects of the new
 * version's first list against those known before, key by key, as a relist is; until that
 * list arrives the old objects stand, so there is no moment without them.
 */
import { type Informer, InformerStore } from "./informer";

/** An informer this one can start and stop (ApiInformer, or a test's). */
export interface StartableInformer<T> extends Informer<T> {
  start(): void;
  stop(): void;
}

export interface OptionalInformerOptions<T> {
  /** The versions of the group served now; undefined when the group is not served at all. Throws when it cannot tell. */
  discover: () => Promise<string[] | undefined>;
  /** The versions this agent reads, most preferred first. */
  versions: readonly string[];
  /** A new informer for one version's objects. */
  makeInformer: (version: string) => StartableInformer<T>;
  /** How often discovery is read again. */
  pollMs: number;
  /** A discovery that failed (the last known state is kept). */
  failed?: (error: Error) => void;
  /** The version watched changed (undefined: the kind is not served). */
  switched?: (version: string | undefined) => void;
}

export class OptionalInformer<T> extends InformerStore<T> {
  private current: { version: string; informer: StartableInformer<T> } | undefined;
  /** A version's informer started and not yet listed: it takes over at its first list. */
  private next: { version: string; informer: StartableInformer<T> } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private started = false;
  private stopped = false;

  constructor(private readonly options: OptionalInformerOptions<T>) {
    super();
  }

  /** The version watched now; undefined while the kind is not served (or not known yet). */
  get version(): string | undefined {
    return this.current?.version;
  }

  start(): void {
    if (this.started || this.stopped) return;
    this.started = true;
    void this.poll();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.current?.informer.stop();
    this.next?.informer.stop();
  }

  /** Reads discovery once and acts on it; then, once started, again after pollMs. */
  async poll(): Promise<void> {
    try {
      const served = await this.options.discover();
      if (!this.stopped) this.follow(served);
    } catch (e) {
      this.options.failed?.(e instanceof Error ? e : new Error(String(e)));
    }
    if (this.stopped || !this.started) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.poll(), this.options.pollMs);
  }

  private follow(served: string[] | undefined): void {
    const wanted = this.options.versions.find((v) => served?.includes(v));
    if (wanted === (this.next ?? this.current)?.version) {
      if (wanted === undefined && !this.synced) this.replaceAll(new Map()); // not installed: known, and empty
      return;
    }
    this.next?.informer.stop();
    this.next = undefined;
    if (wanted === undefined) {
      this.current?.informer.stop();
      this.current = undefined;
      this.replaceAll(new Map());
      this.options.switched?.(undefined);
      return;
    }
    const informer = this.options.makeInformer(wanted);
    const next = { version: wanted, informer };
    this.next = next;
    informer.onSynced(() => this.takeOver(next));
    informer.onChange((key, before, after) => {
      if (this.current === next) this.forward(key, before, after);
    });
    informer.start();
  }

  /** A version's first list: it replaces what was known, told key by key. */
  private takeOver(next: { version: string; informer: StartableInformer<T> }): void {
    if (this.next !== next) return;
    this.current?.informer.stop();
    this.current = next;
    this.next = undefined;
    this.replaceAll(new Map(next.informer.entries()));
    this.options.switched?.(next.version);
  }

  /** A change the version watched told: kept, and told on. */
  private forward(key: string, before: T | undefined, after: T | undefined): void {
    if (after === undefined) this.store.delete(key);
    else this.store.set(key, after);
    this.tell(key, before, after);
  }
}
