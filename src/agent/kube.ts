/**
 * The agent's view of the Kubernetes API: credentials, and every object of a kind (Nodes;
 * Services and EndpointSlices when it translates them) kept current by
 * @kubernetes/client-node's informer (ListWatch): a list, then a watch from the list's
 * resourceVersion; a watch that ends resumes from the last resourceVersion it saw; 410
 * Gone (an ERROR event, or the status of a list) clears it and the informer lists again.
 * Here, on top of the library: bookmarks asked for (so a resumed watch starts from a
 * recent version), watches ended by the server after a while (so a dead connection is
 * noticed), list in chunks, and retries with backoff while the API is unreachable, the
 * last known objects kept meanwhile.
 *
 * Only the pieces of the library the agent uses are imported (config, watch, cache): its
 * index pulls in every generated API client, megabytes the agent never runs.
 */
import * as http from "node:http";
import * as https from "node:https";
import type { KubernetesObject, V1EndpointSlice, V1Node, V1Service } from "@kubernetes/client-node";
import { ListWatch } from "@kubernetes/client-node/dist/cache.js";
import { KubeConfig } from "@kubernetes/client-node/dist/config.js";
import { ADD, DELETE, ERROR, UPDATE } from "@kubernetes/client-node/dist/informer.js";
import { Watch } from "@kubernetes/client-node/dist/watch.js";

const NODES_PATH = "/api/v1/nodes";
const SERVICES_PATH = "/api/v1/services";
const ENDPOINT_SLICES_PATH = "/apis/discovery.k8s.io/v1/endpointslices";
const LIST_CHUNK = 500;
const MIN_WATCH_INTERVAL_MS = 1000;
const EMPTY_WATCH_MS = 1000;

/** --kubeconfig, else $KUBECONFIG (one file or a list), else the pod's service account. */
export function loadKubeConfig(file: string | undefined, env: NodeJS.ProcessEnv): KubeConfig {
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else if (env.KUBECONFIG) kc.loadFromDefault();
  else kc.loadFromCluster();
  if (!kc.getCurrentCluster()) throw new Error("the kubeconfig names no current cluster");
  return kc;
}

/** One GET of the API, authenticated as the kubeconfig says; the body parsed as JSON. */
async function getJson(kc: KubeConfig, pathAndQuery: string): Promise<unknown> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error("no current cluster");
  const url = new URL(cluster.server + pathAndQuery);
  const options: https.RequestOptions = { method: "GET", headers: { accept: "application/json" } };
  await kc.applyToHTTPSOptions(options);
  const get = url.protocol === "http:" ? http.request : https.request;
  return new Promise((resolve, reject) => {
    const req = get(url, { ...options, timeout: 30_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("error", reject);
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          reject(
            new ApiError(`GET ${url.pathname}: HTTP ${res.statusCode}, not JSON: ${text.slice(0, 80)}`, res.statusCode),
          );
          return;
        }
        if (res.statusCode !== 200) {
          const message = (body as { message?: unknown }).message;
          reject(new ApiError(`GET ${url.pathname}: HTTP ${res.statusCode}: ${String(message ?? "")}`, res.statusCode));
          return;
        }
        resolve(body);
      });
    });
    req.on("timeout", () => req.destroy(new Error(`GET ${url.pathname}: no answer in 30 s`)));
    req.on("error", reject);
    req.end();
  });
}

export class ApiError extends Error {
  /** The informer relists on a 410 it finds under this name. */
  readonly statusCode: number | undefined;
  constructor(message: string, statusCode: number | undefined) {
    super(message);
    this.statusCode = statusCode;
  }
}

interface ObjectList<T> {
  metadata?: { resourceVersion?: string; _continue?: string; continue?: string };
  items: T[];
}

/** Every object at `apiPath`, in chunks; the list's resourceVersion is the first chunk's. */
export async function listAll<T extends KubernetesObject>(kc: KubeConfig, apiPath: string): Promise<ObjectList<T>> {
  const items: T[] = [];
  let resourceVersion: string | undefined;
  let next = "";
  do {
    const query = new URLSearchParams({ limit: String(LIST_CHUNK) });
    if (next) query.set("continue", next);
    const page = (await getJson(kc, `${apiPath}?${query}`)) as ObjectList<T>;
    if (typeof page !== "object" || page === null || !Array.isArray(page.items)) {
      throw new ApiError(`GET ${apiPath}: not a list`, undefined);
    }
    resourceVersion ??= page.metadata?.resourceVersion;
    // An item without a name cannot be tracked (the informer keys by it): skipped here.
    items.push(...page.items.filter((n) => typeof n?.metadata?.name === "string"));
    next = page.metadata?._continue ?? page.metadata?.continue ?? "";
  } while (next);
  return { metadata: { resourceVersion }, items };
}

/**
 * The library's Watch with what its informer does not ask for: bookmarks, an end the
 * server sets (timeoutSeconds, 5–10 minutes as client-go's reflector picks) so a silently
 * dead connection is replaced, and at most one new watch a second (a server that ends
 * every watch at once, or answers garbage, is not hammered).
 */
class BookmarkingWatch extends Watch {
  onWatchStart: () => void = () => {};
  private lastStart = 0;
  override async watch(
    path: string,
    query: Record<string, unknown>,
    callback: (phase: string, apiObj: unknown, watchObj?: unknown) => void,
    done: (err: unknown) => void,
  ): Promise<AbortController> {
    this.onWatchStart();
    const since = Date.now() - this.lastStart;
    if (since < MIN_WATCH_INTERVAL_MS) await new Promise((r) => setTimeout(r, MIN_WATCH_INTERVAL_MS - since));
    this.lastStart = Date.now();
    const timeoutSeconds = 300 + Math.floor(Math.random() * 300);
    // The library skips lines that are not JSON: a body of garbage looks like a watch that
    // ended, and so does an API server that ends a watch from a stale version without the
    // 410 it owes (kubernetes/kubernetes#104171, Events). One that ends at once without a
    // single event is taken for a failure, so the informer's error path (report, back
    // off) runs instead of a reconnect every second.
    let events = 0;
    const counted = (phase: string, apiObj: unknown, watchObj?: unknown) => {
      events++;
      callback(phase, apiObj, watchObj);
    };
    const checked = (err: unknown) => {
      const atOnce = events === 0 && Date.now() - this.lastStart < EMPTY_WATCH_MS;
      done(err ?? (atOnce ? new Error(`the API ended a watch of ${path} at once, without an event`) : null));
    };
    return super.watch(path, { ...query, allowWatchBookmarks: true, timeoutSeconds }, counted, checked);
  }
}

export interface WatchHandlers<T> {
  /** The set of objects changed (or a list completed): the current objects. */
  changed(objects: T[]): void;
  /** A list (first or re-) completed: every object the API has is known now. */
  listed(objects: T[]): void;
  /** A list or watch failed; the watcher retries by itself after `retryInMs`. */
  failed(error: Error, retryInMs: number): void;
}

export const BACKOFF_MS = { first: 500, max: 30_000 };

/** Every object at one API path, kept current; the handlers hear of each change. */
export class ResourceWatch<T extends KubernetesObject> {
  private readonly informer: ListWatch<T>;
  private readonly watch: BookmarkingWatch;
  private backoffMs = BACKOFF_MS.first;
  private retry: NodeJS.Timeout | undefined;
  private stopped = false;
  private listing = false;

  constructor(
    kc: KubeConfig,
    apiPath: string,
    private readonly handlers: WatchHandlers<T>,
  ) {
    this.watch = new BookmarkingWatch(kc);
    const list = async () => {
      this.listing = true;
      return listAll<T>(kc, apiPath);
    };
    this.informer = new ListWatch<T>(apiPath, this.watch, list, false);
    // The informer starts its watch right after it has stored a list's items.
    this.watch.onWatchStart = () => {
      if (!this.listing) return;
      this.listing = false;
      this.backoffMs = BACKOFF_MS.first;
      this.handlers.listed(this.objects());
    };
    const changed = () => this.handlers.changed(this.objects());
    this.informer.on(ADD, changed);
    this.informer.on(UPDATE, changed);
    this.informer.on(DELETE, changed);
    // On an error the informer stops; it is started again after a pause that doubles up
    // to the maximum, keeping what it knew (a start with a resourceVersion only watches).
    this.informer.on(ERROR, (err: unknown) => {
      this.listing = false;
      if (this.stopped) return;
      const error = err instanceof Error ? err : new Error(String(err));
      const wait = this.backoffMs;
      this.backoffMs = Math.min(this.backoffMs * 2, BACKOFF_MS.max);
      this.handlers.failed(error, wait);
      clearTimeout(this.retry);
      this.retry = setTimeout(() => {
        if (!this.stopped) void this.informer.start();
      }, wait);
    });
  }

  start(): void {
    void this.informer.start();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
    void this.informer.stop();
  }

  objects(): T[] {
    return [...this.informer.list()];
  }

  get resourceVersion(): string {
    return this.informer.latestResourceVersion();
  }
}

export class NodeWatch extends ResourceWatch<V1Node> {
  constructor(kc: KubeConfig, handlers: WatchHandlers<V1Node>) {
    super(kc, NODES_PATH, handlers);
  }

  nodes(): V1Node[] {
    return this.objects();
  }
}

export const serviceWatch = (kc: KubeConfig, handlers: WatchHandlers<V1Service>) =>
  new ResourceWatch<V1Service>(kc, SERVICES_PATH, handlers);

export const endpointSliceWatch = (kc: KubeConfig, handlers: WatchHandlers<V1EndpointSlice>) =>
  new ResourceWatch<V1EndpointSlice>(kc, ENDPOINT_SLICES_PATH, handlers);
