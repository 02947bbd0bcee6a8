/**
 * The agent's transport to the Kubernetes API: credentials through
 * @kubernetes/client-node's KubeConfig (kubeconfig files, in-cluster service account,
 * tokens, client certificates, exec plugins), and the two requests an informer makes,
 * over node:https with the options KubeConfig gives:
 *
 * - a list, in chunks (`limit` + `continue`), each item passed through the caller's
 *   transform as soon as its chunk arrives, so only what the agent keeps of an object
 *   outlives the chunk;
 * - a watch, read line by line (one JSON event per line) until the server ends it.
 *
 * Only KubeConfig's public methods are used; the informer above (informer.ts) owns the
 * protocol, and test/agent/kube-apiserver.test.ts pins it against the API's documented
 * behaviour.
 */
import * as http from "node:http";
import * as https from "node:https";
import { KubeConfig } from "@kubernetes/client-node";

export const LIST_CHUNK = 500;
const REQUEST_TIMEOUT_MS = 30_000;

/** --kubeconfig, else $KUBECONFIG (one file or a list), else the pod's service account. */
export function loadKubeConfig(file: string | undefined, env: NodeJS.ProcessEnv): KubeConfig {
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else if (env.KUBECONFIG) kc.loadFromDefault();
  else kc.loadFromCluster();
  if (!kc.getCurrentCluster()) throw new Error("the kubeconfig names no current cluster");
  return kc;
}

export class ApiError extends Error {
  constructor(
    message: string,
    /** HTTP status, or the code of a watch's ERROR Status (410: the version is gone). */
    readonly code: number | undefined,
  ) {
    super(message);
  }
}

/** A GET of the API, authenticated as the kubeconfig says; the response is the caller's. */
async function get(
  kc: KubeConfig,
  pathAndQuery: string,
  signal: AbortSignal | undefined,
  idleTimeoutMs: number,
): Promise<{ res: http.IncomingMessage; url: URL }> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error("no current cluster");
  const url = new URL(cluster.server + pathAndQuery);
  const options: https.RequestOptions = { method: "GET", headers: { accept: "application/json" } };
  await kc.applyToHTTPSOptions(options);
  const request = url.protocol === "http:" ? http.request : https.request;
  return new Promise((resolve, reject) => {
    const req = request(url, { ...options, timeout: idleTimeoutMs, signal }, (res) => resolve({ res, url }));
    req.on("timeout", () => req.destroy(new Error(`GET ${url.pathname}: no answer in ${idleTimeoutMs / 1000} s`)));
    req.on("error", reject);
    req.end();
  });
}

function readBody(res: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on("data", (c: Buffer) => chunks.push(c));
    res.on("error", reject);
    res.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
  });
}

/** The body of a failed request as an ApiError (a Status's message when it is one). */
async function failure(res: http.IncomingMessage, url: URL): Promise<ApiError> {
  const text = await readBody(res);
  let message = text.slice(0, 80);
  try {
    message = String((JSON.parse(text) as { message?: unknown }).message ?? "");
  } catch {
    // not a Status
  }
  return new ApiError(`GET ${url.pathname}: HTTP ${res.statusCode}: ${message}`, res.statusCode);
}

interface ListPage {
  metadata?: { resourceVersion?: string; continue?: string };
  items?: unknown[];
}

/**
 * Every object at `apiPath`, in chunks, each item through `take` as its chunk arrives;
 * the list's resourceVersion (the first chunk's) is returned.
 */
export async function listInChunks(
  kc: KubeConfig,
  apiPath: string,
  take: (item: unknown) => void,
  signal?: AbortSignal,
  afterChunk?: () => void,
): Promise<string> {
  let resourceVersion: string | undefined;
  let next = "";
  do {
    const query = new URLSearchParams({ limit: String(LIST_CHUNK) });
    if (next) query.set("continue", next);
    const { res, url } = await get(kc, `${apiPath}?${query}`, signal, REQUEST_TIMEOUT_MS);
    if (res.statusCode !== 200) throw await failure(res, url);
    const text = await readBody(res);
    let page: ListPage;
    try {
      page = JSON.parse(text) as ListPage;
    } catch {
      throw new ApiError(`GET ${url.pathname}: HTTP 200, not JSON: ${text.slice(0, 80)}`, undefined);
    }
    if (typeof page !== "object" || page === null || !Array.isArray(page.items)) {
      throw new ApiError(`GET ${apiPath}: not a list`, undefined);
    }
    resourceVersion ??= page.metadata?.resourceVersion;
    for (const item of page.items) take(item);
    next = page.metadata?.continue ?? "";
    afterChunk?.();
  } while (next);
  if (!resourceVersion) throw new ApiError(`GET ${apiPath}: a list without a resourceVersion`, undefined);
  return resourceVersion;
}

export interface WatchEvent {
  type: string;
  object: unknown;
}

/**
 * A watch of `apiPath` from `query`, each event passed to `onEvent` in order; resolves
 * with the number of events when the server ends it, rejects on a failure. `signal`
 * ends it from this side (resolving).
 */
export async function watchLines(
  kc: KubeConfig,
  apiPath: string,
  query: Record<string, string>,
  onEvent: (event: WatchEvent) => void,
  signal: AbortSignal,
): Promise<number> {
  const params = new URLSearchParams({ ...query, watch: "true" });
  // No idle limit beyond the server's own end (timeoutSeconds) plus a margin: bookmarks
  // arrive about once a minute, so a connection silent for longer than that is dead.
  const idle = (Number(query.timeoutSeconds ?? "300") + 60) * 1000;
  let res: http.IncomingMessage;
  let url: URL;
  try {
    ({ res, url } = await get(kc, `${apiPath}?${params}`, signal, idle));
  } catch (e) {
    if (signal.aborted) return 0;
    throw e;
  }
  if (res.statusCode !== 200) throw await failure(res, url);
  return new Promise((resolve, reject) => {
    let events = 0;
    let rest = "";
    let failed: Error | undefined;
    res.setEncoding("utf8");
    res.on("data", (text: string) => {
      rest += text;
      for (let nl = rest.indexOf("\n"); nl >= 0 && !failed; nl = rest.indexOf("\n")) {
        const line = rest.slice(0, nl).trim();
        rest = rest.slice(nl + 1);
        if (line === "") continue;
        let event: WatchEvent;
        try {
          event = JSON.parse(line) as WatchEvent;
        } catch {
          failed = new ApiError(`watch ${url.pathname}: a line that is not JSON: ${line.slice(0, 80)}`, undefined);
          res.destroy();
          break;
        }
        events++;
        try {
          onEvent(event);
        } catch (e) {
          failed = e as Error;
          res.destroy();
        }
      }
    });
    res.on("error", (e) => (signal.aborted ? resolve(events) : reject(failed ?? e)));
    res.on("close", () => (failed ? reject(failed) : resolve(events)));
  });
}

/**
 * The versions an API group serves, from its discovery document (GET /apis/<group>, an
 * APIGroup); undefined when the API answers 404: the group is not served at all (its
 * CustomResourceDefinition is not installed). Any other failure throws.
 */
export async function servedVersions(kc: KubeConfig, group: string): Promise<string[] | undefined> {
  const { res, url } = await get(kc, `/apis/${group}`, undefined, REQUEST_TIMEOUT_MS);
  if (res.statusCode === 404) {
    res.resume();
    return undefined;
  }
  if (res.statusCode !== 200) throw await failure(res, url);
  const text = await readBody(res);
  let doc: { versions?: { version?: unknown }[] };
  try {
    doc = JSON.parse(text) as typeof doc;
  } catch {
    throw new ApiError(`GET ${url.pathname}: HTTP 200, not JSON: ${text.slice(0, 80)}`, undefined);
  }
  if (!Array.isArray(doc?.versions)) throw new ApiError(`GET ${url.pathname}: not an APIGroup`, undefined);
  return doc.versions.map((v) => v?.version).filter((v): v is string => typeof v === "string");
}

/**
 * A JSON merge patch (RFC 7386) of one object, authenticated as a GET is: the agent's only
 * write, its own Node's annotation. Resolves with the object as the API stored it.
 */
export function mergePatch(kc: KubeConfig, apiPath: string, patch: unknown): Promise<unknown> {
  return patchObject(kc, apiPath, patch, "application/merge-patch+json");
}

/**
 * A server-side apply (the API concepts page's "Server-Side Apply") of the fields in
 * `object`, owned by `fieldManager`: lists the API merges by key (a status's conditions,
 * by type) keep the entries other managers own. `force`: take over fields another
 * manager set (the same condition written by this agent's previous run under another
 * name would otherwise conflict).
 */
export function applyPatch(kc: KubeConfig, apiPath: string, object: unknown, fieldManager: string): Promise<unknown> {
  const query = new URLSearchParams({ fieldManager, force: "true" });
  return patchObject(kc, `${apiPath}?${query}`, object, "application/apply-patch+yaml");
}

async function patchObject(kc: KubeConfig, apiPath: string, patch: unknown, contentType: string): Promise<unknown> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error("no current cluster");
  const url = new URL(cluster.server + apiPath);
  const body = Buffer.from(JSON.stringify(patch));
  const options: https.RequestOptions = {
    method: "PATCH",
    headers: {
      accept: "application/json",
      "content-type": contentType,
      "content-length": String(body.length),
    },
  };
  await kc.applyToHTTPSOptions(options);
  const request = url.protocol === "http:" ? http.request : https.request;
  const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
    const req = request(url, { ...options, timeout: REQUEST_TIMEOUT_MS }, resolve);
    req.on("timeout", () =>
      req.destroy(new Error(`PATCH ${url.pathname}: no answer in ${REQUEST_TIMEOUT_MS / 1000} s`)),
    );
    req.on("error", reject);
    req.end(body);
  });
  if (res.statusCode !== 200) {
    const e = await failure(res, url);
    throw new ApiError(e.message.replace(/^GET/, "PATCH"), e.code);
  }
  const text = await readBody(res);
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError(`PATCH ${url.pathname}: HTTP 200, not JSON: ${text.slice(0, 80)}`, undefined);
  }
}
