/**
 * A stand-in for kube-apiserver that serves Nodes and Namespaces (cluster-scoped), and
 * Services, EndpointSlices, Pods and NetworkPolicies (namespaced, listed and watched across
 * all namespaces, as a node agent does) over HTTPS with a bearer token, speaking the list/watch protocol as the Kubernetes API
 * concepts page ("Efficient detection of changes", "Watch bookmarks", "Retrieving large
 * results sets in chunks") and the API conventions (Status objects, HTTP codes) describe:
 *
 * - Every write gets the next resourceVersion, global to the store (etcd's revision);
 *   objects carry the one of their last change, lists the store's at the time of the list.
 * - list: GET /api/v1/nodes (/api/v1/services, /apis/discovery.k8s.io/v1/endpointslices), `limit` + `continue` for chunks (the continue token pins the
 *   list's resourceVersion; one older than the history answers 410 with reason Expired).
 * - watch: GET /api/v1/nodes?watch=true. resourceVersion unset ("Get State and Start at
 *   Most Recent") or "0" ("Start at Any", served here as the most recent): synthetic ADDED
 *   for every object, then changes; a resourceVersion ("Start at Exact"): every change
 *   after it, in order. Too old for the history window (after compact()): HTTP 200, then
 *   one ERROR event whose object is a Status ("too old resource version: X (Y)", reason
 *   Expired, code 410), and the stream ends, as the API server's watch cache does. The
 *   body is chunked JSON, one event per line. `timeoutSeconds` ends it.
 * - allowWatchBookmarks=true: BOOKMARK events now and then (and on bookmark()), whose
 *   object is one of the watched kind with only metadata.resourceVersion.
 * - Not authenticated: 401 with a Status; unknown paths 404 with a Status.
 * - Authorized as RBAC would (restrictTo: a ClusterRole's rules): a verb on a resource no
 *   rule allows gets 403 Forbidden with a Status naming them.
 *
 * Faults for the tests: down()/up() (connections refused), garbage() (200 with a body that
 * is not JSON), dropWatches() (the server ends every watch, as on an apiserver restart).
 */

import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import type * as http from "node:http";
import * as https from "node:https";
import type { AddressInfo, Socket } from "node:net";
import * as path from "node:path";

interface NodeSpec {
  name: string;
  podCIDRs?: string[];
  /** InternalIP addresses (both families allowed). */
  internalIPs?: string[];
  /** Anything else to merge into the object (malformed fields in tests). */
  extra?: Record<string, unknown>;
}

type EventType = "ADDED" | "MODIFIED" | "DELETED";
interface StoredEvent {
  rv: number;
  resource: Resource;
  type: EventType;
  object: Record<string, unknown>;
}

/** The kinds served, by collection path. */
const RESOURCES = {
  nodes: { path: "/api/v1/nodes", kind: "Node", apiVersion: "v1" },
  services: { path: "/api/v1/services", kind: "Service", apiVersion: "v1" },
  endpointslices: {
    path: "/apis/discovery.k8s.io/v1/endpointslices",
    kind: "EndpointSlice",
    apiVersion: "discovery.k8s.io/v1",
  },
  pods: { path: "/api/v1/pods", kind: "Pod", apiVersion: "v1" },
  namespaces: { path: "/api/v1/namespaces", kind: "Namespace", apiVersion: "v1" },
  networkpolicies: {
    path: "/apis/networking.k8s.io/v1/networkpolicies",
    kind: "NetworkPolicy",
    apiVersion: "networking.k8s.io/v1",
  },
  /** Served only once installClusterNetworkPolicy() says in which versions (its path names the version). */
  clusternetworkpolicies: {
    path: "/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies",
    kind: "ClusterNetworkPolicy",
    apiVersion: "policy.networking.k8s.io/v1alpha2",
  },
} as const;
const POLICY_API_GROUP = "policy.networking.k8s.io";
type Resource = keyof typeof RESOURCES;
/** The API group of each kind served, as RBAC names it. */
const GROUPS: Record<Resource, string> = {
  nodes: "",
  services: "",
  endpointslices: "discovery.k8s.io",
  pods: "",
  namespaces: "",
  networkpolicies: "networking.k8s.io",
  clusternetworkpolicies: POLICY_API_GROUP,
};

export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

const resourceAt = (pathname: string, policyApiVersions: readonly string[]): Resource | undefined => {
  const cnp = pathname.match(/^\/apis\/policy\.networking\.k8s\.io\/([^/]+)\/clusternetworkpolicies$/);
  if (cnp) return policyApiVersions.includes(cnp[1] ?? "") ? "clusternetworkpolicies" : undefined;
  return (Object.keys(RESOURCES) as Resource[]).find((r) => RESOURCES[r].path === pathname);
};

/** A namespaced object's key is namespace/name, a cluster-scoped one's its name. */
const keyOf = (object: Record<string, unknown>): string => {
  const m = object.metadata as { name: string; namespace?: string };
  return m.namespace ? `${m.namespace}/${m.name}` : m.name;
};

interface OpenWatch {
  resource: Resource;
  /** The version a ClusterNetworkPolicy watch asked for. */
  version?: string;
  res: http.ServerResponse;
  bookmarks: boolean;
  /** Last resourceVersion this watcher was sent. */
  sentRv: number;
}

interface RecordedRequest {
  path: string;
  query: Record<string, string>;
  auth: string | undefined;
}

export class StandInApiServer {
  readonly requests: RecordedRequest[] = [];
  /** Every merge patch of a Node served, in order. */
  readonly patches: { name: string; patch: unknown }[] = [];
  /** Every server-side apply of a ClusterNetworkPolicy's status served, in order. */
  readonly statusApplies: { name: string; fieldManager: string; body: unknown }[] = [];
  private readonly stores: Record<Resource, Map<string, Record<string, unknown>>> = {
    nodes: new Map(),
    services: new Map(),
    endpointslices: new Map(),
    pods: new Map(),
    namespaces: new Map(),
    networkpolicies: new Map(),
    clusternetworkpolicies: new Map(),
  };
  /** The versions the ClusterNetworkPolicy CRD serves (none: not installed). */
  private policyApiVersions: string[] = [];
  private readonly nodes = this.stores.nodes;
  private readonly history: StoredEvent[] = [];
  /** A store as of a paged list's resourceVersion ("<resource>@<rv>"), for its continue tokens. */
  private readonly snapshots = new Map<string, Map<string, Record<string, unknown>>>();
  /** The oldest resourceVersion a watch may still start from. */
  private oldestRv = 0;
  private rv = 1000;
  private uid = 0;
  private watches = new Set<OpenWatch>();
  private sockets = new Set<Socket>();
  private server: https.Server;
  /** The same API on a Unix socket, for agents in network namespaces (netnsForwarder). */
  private unixServer: https.Server;
  private port = 0;
  private mode: "serving" | "garbage" = "serving";
  /** What the token may do; undefined: anything. */
  private rules: PolicyRule[] | undefined;
  private bookmarkTimer: NodeJS.Timeout | undefined;

  /** `dir`: where the key, certificate (ca.crt) and kubeconfig go. */
  constructor(
    readonly dir: string,
    readonly token = "stand-in-token",
    private readonly bookmarkEveryMs = 1000,
  ) {
    const key = path.join(dir, "apiserver.key");
    const cert = path.join(dir, "ca.crt");
    const gen = spawnSync(
      "openssl",
      [
        ...["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"],
        ...["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
      ],
      { encoding: "utf8" },
    );
    if (gen.status !== 0) throw new Error(`openssl: ${gen.stderr}`);
    const tls = { key: fs.readFileSync(key), cert: fs.readFileSync(cert) };
    this.server = https.createServer(tls, (req, res) => this.handle(req, res));
    this.unixServer = https.createServer(tls, (req, res) => this.handle(req, res));
    for (const server of [this.server, this.unixServer]) {
      server.on("connection", (s: Socket) => {
        this.sockets.add(s);
        s.on("close", () => this.sockets.delete(s));
      });
    }
  }

  get socketPath(): string {
    return path.join(this.dir, "apiserver.sock");
  }

  get caFile(): string {
    return path.join(this.dir, "ca.crt");
  }

  get url(): string {
    return `https://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(this.port, "127.0.0.1", resolve));
    this.port = (this.server.address() as AddressInfo).port;
    fs.rmSync(this.socketPath, { force: true });
    await new Promise<void>((resolve) => this.unixServer.listen(this.socketPath, resolve));
    this.bookmarkTimer = setInterval(() => this.bookmark(), this.bookmarkEveryMs);
  }

  async stop(): Promise<void> {
    await this.down();
  }

  /**
   * A kubeconfig for this server (token, CA), written beside the certificate; `server`: the
   * URL to use instead (a forwarder's, inside a network namespace).
   */
  kubeconfig(name = "kubeconfig", server = this.url): string {
    const file = path.join(this.dir, name);
    fs.writeFileSync(
      file,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Config",
        clusters: [{ name: "stand-in", cluster: { server, "certificate-authority": this.caFile } }],
        users: [{ name: "agent", user: { token: this.token } }],
        contexts: [{ name: "stand-in", context: { cluster: "stand-in", user: "agent" } }],
        "current-context": "stand-in",
      }),
    );
    return file;
  }

  /** From now on the token may do only what these rules (a ClusterRole's) allow. */
  restrictTo(rules: PolicyRule[]): void {
    this.rules = rules;
  }

  private allowed(verb: string, resource: Resource | "clusternetworkpolicies/status"): boolean {
    if (!this.rules) return true;
    return this.rules.some(
      (r) =>
        (r.apiGroups.includes(
          GROUPS[resource === "clusternetworkpolicies/status" ? "clusternetworkpolicies" : resource],
        ) ||
          r.apiGroups.includes("*")) &&
        (r.resources.includes(resource) || r.resources.includes("*")) &&
        (r.verbs.includes(verb) || r.verbs.includes("*")),
    );
  }

  // --- the store -------------------------------------------------------------------------

  get resourceVersion(): string {
    return String(this.rv);
  }

  node(name: string): Record<string, unknown> | undefined {
    return this.nodes.get(name);
  }

  addNode(spec: NodeSpec): void {
    const object: Record<string, unknown> = {
      kind: "Node",
      apiVersion: "v1",
      metadata: {
        name: spec.name,
        uid: `00000000-0000-4000-8000-${String(++this.uid).padStart(12, "0")}`,
        creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
      },
      spec: spec.podCIDRs ? { podCIDR: spec.podCIDRs[0], podCIDRs: spec.podCIDRs } : {},
      status: {
        addresses: [
          ...(spec.internalIPs ?? []).map((address) => ({ type: "InternalIP", address })),
          { type: "Hostname", address: spec.name },
        ],
      },
      ...spec.extra,
    };
    this.write(this.nodes.has(spec.name) ? "MODIFIED" : "ADDED", object);
  }

  /** Changes a node as a controller would (a function of the stored object). */
  updateNode(name: string, change: (node: Record<string, unknown>) => void): void {
    const current = this.nodes.get(name);
    if (!current) throw new Error(`no node ${name}`);
    const next = structuredClone(current);
    change(next);
    this.write("MODIFIED", next);
  }

  deleteNode(name: string): void {
    const current = this.nodes.get(name);
    if (!current) throw new Error(`no node ${name}`);
    this.write("DELETED", current);
  }

  /** Creates or replaces a Service or EndpointSlice (metadata.namespace and name set). */
  put(resource: Exclude<Resource, "nodes">, object: Record<string, unknown>): void {
    const { kind, apiVersion } = RESOURCES[resource];
    const full: Record<string, unknown> = { kind, apiVersion, ...structuredClone(object) };
    const meta = full.metadata as Record<string, unknown>;
    const before = this.stores[resource].get(keyOf(full));
    meta.uid = before
      ? (before.metadata as Record<string, unknown>).uid
      : `00000000-0000-4000-8000-${String(++this.uid).padStart(12, "0")}`;
    this.write(this.stores[resource].has(keyOf(full)) ? "MODIFIED" : "ADDED", full, resource);
  }

  /** Deletes an object; `namespace` "" for a cluster-scoped one (a Namespace). */
  remove(resource: Exclude<Resource, "nodes">, namespace: string, name: string): void {
    const current = this.stores[resource].get(namespace ? `${namespace}/${name}` : name);
    if (!current) throw new Error(`no ${resource} ${namespace}/${name}`);
    this.write("DELETED", current, resource);
  }

  private write(type: EventType, object: Record<string, unknown>, resource: Resource = "nodes"): void {
    this.rv++;
    const stored = structuredClone(object);
    (stored.metadata as Record<string, unknown>).resourceVersion = String(this.rv);
    const store = this.stores[resource];
    if (type === "DELETED") store.delete(keyOf(stored));
    else store.set(keyOf(stored), stored);
    const event = { rv: this.rv, resource, type, object: stored };
    this.history.push(event);
    for (const w of this.watches) this.send(w, event);
  }

  /** Forgets the history (etcd compaction): watches from before now get 410 Gone. */
  compact(): void {
    this.history.length = 0;
    this.snapshots.clear();
    this.oldestRv = this.rv;
  }

  /** The versions the ClusterNetworkPolicy CRD serves now (none: not installed). */
  get clusterNetworkPolicyVersions(): readonly string[] {
    return this.policyApiVersions;
  }

  /**
   * Installs (or changes, or with [] removes) the ClusterNetworkPolicy CRD, serving these
   * versions: discovery (GET /apis/policy.networking.k8s.io) lists them, each serves the
   * same objects. Watches of a version no longer served end.
   */
  installClusterNetworkPolicy(versions: string[]): void {
    this.policyApiVersions = [...versions];
    for (const w of [...this.watches]) {
      if (w.resource === "clusternetworkpolicies" && !versions.includes(w.version ?? "")) {
        w.res.end();
        this.watches.delete(w);
      }
    }
  }

  // --- faults ------------------------------------------------------------------------------

  /** Ends every open watch (the client reconnects from its last resourceVersion). */
  dropWatches(): void {
    for (const w of this.watches) w.res.end();
    this.watches.clear();
  }

  /** The API goes away: connections are refused until up(). */
  async down(): Promise<void> {
    clearInterval(this.bookmarkTimer);
    this.dropWatches();
    for (const s of this.sockets) s.destroy();
    for (const server of [this.server, this.unixServer]) {
      if (server.listening) await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }

  async up(): Promise<void> {
    await this.start();
  }

  /** Answers 200 with a body that is not JSON (a broken proxy), or serves again. */
  garbage(on: boolean): void {
    this.mode = on ? "garbage" : "serving";
  }

  /** A BOOKMARK to every watch that asked for them: nothing else changed up to now. */
  bookmark(): void {
    for (const w of this.watches) {
      if (!w.bookmarks || w.res.writableEnded) continue;
      w.sentRv = this.rv;
      w.res.write(
        `${JSON.stringify({ type: "BOOKMARK", object: { kind: RESOURCES[w.resource].kind, apiVersion: RESOURCES[w.resource].apiVersion, metadata: { resourceVersion: String(this.rv) } } })}\n`,
      );
    }
  }

  get openWatches(): number {
    return this.watches.size;
  }

  // --- HTTP --------------------------------------------------------------------------------

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? "/", "https://stand-in");
    const query = Object.fromEntries(url.searchParams);
    this.requests.push({ path: url.pathname, query, auth: req.headers.authorization });
    if (req.headers.authorization !== `Bearer ${this.token}`) {
      this.status(res, 401, "Unauthorized", "Unauthorized");
      return;
    }
    if (this.mode === "garbage") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end("<html>502 upstream</html>\n{not json");
      return;
    }
    const named = url.pathname.match(/^\/api\/v1\/nodes\/([^/]+)$/);
    if (req.method === "PATCH" && named) {
      this.patchNode(req, res, decodeURIComponent(named[1] ?? ""));
      return;
    }
    const cnpStatus = url.pathname.match(
      /^\/apis\/policy\.networking\.k8s\.io\/([^/]+)\/clusternetworkpolicies\/([^/]+)\/status$/,
    );
    if (req.method === "PATCH" && cnpStatus && this.policyApiVersions.includes(cnpStatus[1] ?? "")) {
      this.applyPolicyStatus(req, res, decodeURIComponent(cnpStatus[2] ?? ""), query);
      return;
    }
    if (req.method !== "GET") {
      this.status(res, 405, "MethodNotAllowed", `the server does not allow this method on the requested resource`);
      return;
    }
    if (url.pathname === `/apis/${POLICY_API_GROUP}`) {
      this.policyApiGroup(res);
      return;
    }
    const watching = query.watch === "true" || query.watch === "1";
    const target = named ? "nodes" : resourceAt(url.pathname, this.policyApiVersions);
    const verb = named ? "get" : watching ? "watch" : "list";
    if (target && !this.allowed(verb, target)) {
      this.status(
        res,
        403,
        "Forbidden",
        `${target} is forbidden: User "system:serviceaccount:kube-system:netkit-cni" cannot ${verb} resource "${target}" in API group "${GROUPS[target]}" at the cluster scope`,
      );
      return;
    }
    if (named) {
      const node = this.nodes.get(decodeURIComponent(named[1] ?? ""));
      if (!node) this.status(res, 404, "NotFound", `nodes "${named[1]}" not found`);
      else this.json(res, 200, node);
      return;
    }
    const resource = resourceAt(url.pathname, this.policyApiVersions);
    if (!resource) {
      this.status(res, 404, "NotFound", "the server could not find the requested resource");
      return;
    }
    const version = resource === "clusternetworkpolicies" ? url.pathname.split("/")[3] : undefined;
    if (watching) this.watch(res, query, resource, version);
    else this.list(res, query, resource);
  }

  /** The discovery document of the network-policy-api's group: 404 while its CRD is not installed. */
  private policyApiGroup(res: http.ServerResponse): void {
    if (this.policyApiVersions.length === 0) {
      this.status(res, 404, "NotFound", "the server could not find the requested resource");
      return;
    }
    const versions = this.policyApiVersions.map((version) => ({
      groupVersion: `${POLICY_API_GROUP}/${version}`,
      version,
    }));
    this.json(res, 200, {
      kind: "APIGroup",
      apiVersion: "v1",
      name: POLICY_API_GROUP,
      versions,
      preferredVersion: versions[0],
    });
  }

  /**
   * PATCH of one Node: a JSON merge patch (RFC 7386, content type
   * application/merge-patch+json) only, as the agent sends; others get 415.
   */
  private patchNode(req: http.IncomingMessage, res: http.ServerResponse, name: string): void {
    if (!this.allowed("patch", "nodes")) {
      this.status(
        res,
        403,
        "Forbidden",
        `nodes "${name}" is forbidden: User "system:serviceaccount:kube-system:netkit-cni" cannot patch resource "nodes" in API group "" at the cluster scope`,
      );
      return;
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.headers["content-type"] !== "application/merge-patch+json") {
        this.status(res, 415, "UnsupportedMediaType", `the body of the request was in an unknown format`);
        return;
      }
      const current = this.nodes.get(name);
      if (!current) {
        this.status(res, 404, "NotFound", `nodes "${name}" not found`);
        return;
      }
      let patch: unknown;
      try {
        patch = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        this.status(res, 400, "BadRequest", "the body is not JSON");
        return;
      }
      this.patches.push({ name, patch });
      this.write("MODIFIED", mergePatch(structuredClone(current), patch) as Record<string, unknown>);
      this.json(res, 200, this.nodes.get(name));
    });
  }

  /**
   * A server-side apply of a ClusterNetworkPolicy's status (content type
   * application/apply-patch+yaml, a fieldManager required): its conditions merged into the
   * stored ones by type, as the CRD's listType=map has it; the spec is not touched.
   */
  private applyPolicyStatus(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    name: string,
    query: Record<string, string>,
  ): void {
    if (!this.allowed("patch", "clusternetworkpolicies/status")) {
      this.status(
        res,
        403,
        "Forbidden",
        `clusternetworkpolicies.policy.networking.k8s.io "${name}" is forbidden: User "system:serviceaccount:kube-system:netkit-cni" cannot patch resource "clusternetworkpolicies/status" in API group "${POLICY_API_GROUP}" at the cluster scope`,
      );
      return;
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.headers["content-type"] !== "application/apply-patch+yaml" || !query.fieldManager) {
        this.status(res, 415, "UnsupportedMediaType", "server-side apply with a fieldManager only");
        return;
      }
      const current = this.stores.clusternetworkpolicies.get(name);
      if (!current) {
        this.status(res, 404, "NotFound", `clusternetworkpolicies.policy.networking.k8s.io "${name}" not found`);
        return;
      }
      let applied: { status?: { conditions?: { type: string }[] } };
      try {
        applied = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        this.status(res, 400, "BadRequest", "the body is not JSON");
        return;
      }
      const next = structuredClone(current);
      const status = (next.status ?? {}) as { conditions?: { type: string }[] };
      const conditions = [...(status.conditions ?? [])];
      for (const c of applied.status?.conditions ?? []) {
        const at = conditions.findIndex((x) => x.type === c.type);
        if (at >= 0) conditions[at] = c;
        else conditions.push(c);
      }
      next.status = { ...status, conditions };
      this.statusApplies.push({ name, fieldManager: query.fieldManager, body: applied });
      this.write("MODIFIED", next, "clusternetworkpolicies");
      this.json(res, 200, this.stores.clusternetworkpolicies.get(name));
    });
  }

  private list(res: http.ServerResponse, query: Record<string, string>, resource: Resource): void {
    let atRv = this.rv;
    let after = "";
    let store = this.stores[resource];
    if (query.continue) {
      const token = JSON.parse(Buffer.from(query.continue, "base64").toString()) as { rv: number; after: string };
      // A continued list is served as of the first chunk's resourceVersion; once that left
      // the history the API answers 410 and the client starts over.
      const snapshot = this.snapshots.get(`${resource}@${token.rv}`);
      if (token.rv < this.oldestRv || !snapshot) {
        this.status(
          res,
          410,
          "Expired",
          "The provided continue parameter is too old to display a consistent list result.",
        );
        return;
      }
      atRv = token.rv;
      after = token.after;
      store = snapshot;
    }
    const all = [...store.keys()].sort().filter((n) => n > after);
    const limit = query.limit ? Number(query.limit) : 0;
    const page = limit > 0 ? all.slice(0, limit) : all;
    const metadata: Record<string, unknown> = { resourceVersion: String(atRv) };
    const last = page.at(-1);
    if (limit > 0 && all.length > page.length && last !== undefined) {
      if (!this.snapshots.has(`${resource}@${atRv}`)) this.snapshots.set(`${resource}@${atRv}`, new Map(store));
      metadata.continue = Buffer.from(JSON.stringify({ rv: atRv, after: last })).toString("base64");
      metadata.remainingItemCount = all.length - page.length;
    }
    // List items carry no kind or apiVersion: the list's own say what they are.
    const items = page.map((n) => {
      const { kind: _k, apiVersion: _a, ...rest } = store.get(n) as Record<string, unknown>;
      return rest;
    });
    const { kind, apiVersion } = RESOURCES[resource];
    this.json(res, 200, { kind: `${kind}List`, apiVersion, metadata, items });
  }

  private watch(res: http.ServerResponse, query: Record<string, string>, resource: Resource, version?: string): void {
    // Chunked transfer (no content-length), one JSON event per line.
    res.writeHead(200, { "content-type": "application/json", "transfer-encoding": "chunked" });
    const w: OpenWatch = { resource, version, res, bookmarks: query.allowWatchBookmarks === "true", sentRv: 0 };
    const from = query.resourceVersion ?? "";
    if (from === "" || from === "0") {
      for (const object of this.stores[resource].values()) res.write(`${JSON.stringify({ type: "ADDED", object })}\n`);
      w.sentRv = this.rv;
    } else {
      const rv = Number(from);
      if (!Number.isInteger(rv) || rv < this.oldestRv) {
        const status = statusObject(410, "Expired", `too old resource version: ${from} (${this.oldestRv})`);
        res.end(`${JSON.stringify({ type: "ERROR", object: status })}\n`);
        return;
      }
      for (const e of this.history) if (e.rv > rv && e.resource === resource) this.send(w, e);
      w.sentRv = Math.max(w.sentRv, rv);
    }
    this.watches.add(w);
    const timeout = query.timeoutSeconds ? Number(query.timeoutSeconds) * 1000 : 0;
    const timer =
      timeout > 0
        ? setTimeout(() => {
            this.watches.delete(w);
            res.end();
          }, timeout)
        : undefined;
    res.on("close", () => {
      clearTimeout(timer);
      this.watches.delete(w);
    });
  }

  private send(w: OpenWatch, e: StoredEvent): void {
    if (w.res.writableEnded || e.resource !== w.resource) return;
    w.sentRv = e.rv;
    w.res.write(`${JSON.stringify({ type: e.type, object: e.object })}\n`);
  }

  private json(res: http.ServerResponse, code: number, body: unknown): void {
    res.writeHead(code, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  }

  private status(res: http.ServerResponse, code: number, reason: string, message: string): void {
    this.json(res, code, statusObject(code, reason, message));
  }
}

/** RFC 7386: objects merge key by key, null deletes, anything else replaces. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== "object" || patch === null || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    typeof target === "object" && target !== null && !Array.isArray(target) ? { ...(target as object) } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/**
 * Makes the stand-in reachable at 127.0.0.1:`port` inside a network namespace (where the
 * host's loopback is not): a small forwarder there, connecting to its Unix socket.
 */
export function netnsForwarder(netns: string, port: number, socketPath: string): ChildProcess {
  const code = [
    `const net = require("node:net");`,
    `net.createServer((c) => {`,
    `  const u = net.connect(process.argv[2]);`,
    `  c.pipe(u); u.pipe(c);`,
    `  u.on("error", () => c.destroy()); c.on("error", () => u.destroy());`,
    `}).listen(Number(process.argv[1]), "127.0.0.1");`,
  ].join("\n");
  return spawn("nsenter", [`--net=/run/netns/${netns}`, process.execPath, "-e", code, String(port), socketPath], {
    stdio: "ignore",
  });
}

/** A metav1.Status for a failure, as the API conventions describe it. */
function statusObject(code: number, reason: string, message: string): Record<string, unknown> {
  return { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason, code };
}
