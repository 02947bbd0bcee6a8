/**
 * The stand-in API server (test/support/kube-apiserver.ts) speaks list/watch as the API
 * concepts page describes it, checked on the wire here, and the agent's informer (with
 * @kubernetes/client-node's KubeConfig for credentials) keeps a current view of the nodes
 * across watch ends, 410 Gone, an API that goes away and one that answers garbage, telling
 * each change once, by key, and nothing for a change to fields it does not keep.
 */
import * as fs from "node:fs";
import * as https from "node:https";
import * as os from "node:os";
import * as path from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ApiInformer } from "../../src/agent/kube/informer";
import { type NodeFacts, WIREGUARD_KEY_ANNOTATION } from "../../src/agent/kube/node-facts";
import { nodeObject } from "../../src/agent/kube/objects";
import { ApiError, loadKubeConfig, mergePatch } from "../../src/agent/kube/transport";
import { StandInApiServer } from "../support/kube-apiserver";

interface Raw {
  status: number | undefined;
  headers: Record<string, unknown>;
  lines: Record<string, unknown>[];
}

/** A GET that gathers the body's JSON lines until the server ends it or `until` holds. */
function get(api: StandInApiServer, pathAndQuery: string, until?: (lines: Raw["lines"]) => boolean): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = https.get(
      `${api.url}${pathAndQuery}`,
      { ca: fs.readFileSync(api.caFile), headers: { authorization: `Bearer ${api.token}` } },
      (res) => {
        const out: Raw = { status: res.statusCode, headers: res.headers, lines: [] };
        let buf = "";
        res.on("data", (d: Buffer) => {
          buf += d.toString();
          for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
            out.lines.push(JSON.parse(buf.slice(0, i)));
            buf = buf.slice(i + 1);
          }
          if (until?.(out.lines)) {
            req.destroy();
            resolve(out);
          }
        });
        res.on("end", () => {
          if (buf.trim()) out.lines.push(JSON.parse(buf));
          resolve(out);
        });
      },
    );
    req.on("error", reject);
  });
}

const names = (informer: ApiInformer<NodeFacts>) => [...informer.values()].map((n) => n.name).sort();

async function until(what: string, ok: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("stand-in API server", () => {
  let dir: string;
  let api: StandInApiServer;
  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkt-api-"));
    api = new StandInApiServer(dir, "stand-in-token", 200);
    await api.start();
    for (const n of [1, 2, 3])
      api.addNode({ name: `node-${n}`, podCIDRs: [`10.9.${n}.0/24`], internalIPs: [`10.8.0.${n}`] });
  });
  afterEach(async () => {
    await api.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("merge-patches a Node as RBAC allows (403 without `patch`), telling watchers; the agent's patch is read back", async () => {
    const kc = loadKubeConfig(api.kubeconfig(), {});
    const patch = { metadata: { annotations: { [WIREGUARD_KEY_ANNOTATION]: "k1" } } };
    api.restrictTo([{ apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch"] }]);
    const refused = await mergePatch(kc, "/api/v1/nodes/node-2", patch).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ApiError);
    expect((refused as ApiError).code).toBe(403);
    expect((refused as ApiError).message).toMatch(/PATCH .*cannot patch resource "nodes"/);
    expect(api.patches).toEqual([]);

    api.restrictTo([{ apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch", "patch"] }]);
    const watch = get(api, `/api/v1/nodes?watch=true&resourceVersion=${api.resourceVersion}`, (l) => l.length >= 2);
    await mergePatch(kc, "/api/v1/nodes/node-2", patch);
    // null deletes (RFC 7386); other fields stay.
    const stored = (await mergePatch(kc, "/api/v1/nodes/node-2", {
      metadata: { annotations: { [WIREGUARD_KEY_ANNOTATION]: null, other: "x" } },
    })) as V1Node;
    expect(stored.metadata?.annotations).toEqual({ other: "x" });
    expect(stored.spec?.podCIDRs).toEqual(["10.9.2.0/24"]);
    const events = (await watch).lines;
    expect(events.map((e) => e.type)).toEqual(["MODIFIED", "MODIFIED"]);
    expect((events[0]?.object as V1Node | undefined)?.metadata?.annotations).toEqual({
      [WIREGUARD_KEY_ANNOTATION]: "k1",
    });
    const missing = await mergePatch(kc, "/api/v1/nodes/node-9", patch).catch((e: unknown) => e);
    expect((missing as ApiError).code).toBe(404);
  });

  it("lists in chunks at one resourceVersion and watches from it in chunked JSON lines", async () => {
    const first = await get(api, "/api/v1/nodes?limit=2");
    const list = first.lines[0] as { kind: string; metadata: Record<string, string>; items: V1Node[] };
    expect(list.kind).toBe("NodeList");
    expect(list.items.map((n) => n.metadata?.name)).toEqual(["node-1", "node-2"]);
    expect(list.items[0]).not.toHaveProperty("kind");
    const rv = list.metadata.resourceVersion;
    api.addNode({ name: "node-0", podCIDRs: ["10.9.0.0/24"] }); // after the list: not in its chunks
    const rest = (await get(api, `/api/v1/nodes?limit=2&continue=${encodeURIComponent(list.metadata.continue ?? "")}`))
      .lines[0] as typeof list;
    expect(rest.items.map((n) => n.metadata?.name)).toEqual(["node-3"]);
    expect(rest.metadata.resourceVersion).toBe(rv);
    expect(rest.metadata.continue).toBeUndefined();

    // From the list's version: what happened since, in order, then live changes.
    const watch = get(api, `/api/v1/nodes?watch=true&resourceVersion=${rv}`, (l) => l.length >= 3);
    await until("the watch", () => api.openWatches === 1);
    api.updateNode("node-1", (n) => {
      (n.metadata as Record<string, unknown>).labels = { a: "b" };
    });
    api.deleteNode("node-2");
    const w = await watch;
    expect(w.headers["transfer-encoding"]).toBe("chunked");
    expect(w.lines.map((e) => [e.type, (e.object as V1Node).metadata?.name])).toEqual([
      ["ADDED", "node-0"],
      ["MODIFIED", "node-1"],
      ["DELETED", "node-2"],
    ]);
    const versions = w.lines.map((e) => Number((e.object as V1Node).metadata?.resourceVersion));
    expect(versions).toEqual([...versions].sort((a, b) => a - b));
    expect(versions[0]).toBeGreaterThan(Number(rv));
  });

  it("starts a watch without a resourceVersion with ADDED for every node; sends bookmarks only when asked", async () => {
    const all = await get(api, "/api/v1/nodes?watch=true&timeoutSeconds=1");
    expect(all.lines.map((e) => [e.type, (e.object as V1Node).metadata?.name])).toEqual([
      ["ADDED", "node-1"],
      ["ADDED", "node-2"],
      ["ADDED", "node-3"],
    ]);
    const plain = await get(api, `/api/v1/nodes?watch=true&resourceVersion=${api.resourceVersion}&timeoutSeconds=1`);
    expect(plain.lines).toEqual([]);

    // The server's own timer sends bookmarks too, maybe before node-4 (carrying the
    // version before it): the one that counts is the first after node-4's event.
    const rv = api.resourceVersion;
    const afterAdded = (l: Raw["lines"]) => l.slice(l.findIndex((e) => e.type === "ADDED") + 1);
    const watch = get(
      api,
      `/api/v1/nodes?watch=true&resourceVersion=${rv}&allowWatchBookmarks=true`,
      (l) => l.some((e) => e.type === "ADDED") && afterAdded(l).some((e) => e.type === "BOOKMARK"),
    );
    await until("the watch", () => api.openWatches === 1);
    api.addNode({ name: "node-4" });
    api.bookmark();
    const w = await watch;
    expect(
      w.lines.filter((e) => e.type !== "BOOKMARK").map((e) => [e.type, (e.object as V1Node).metadata?.name]),
    ).toEqual([["ADDED", "node-4"]]);
    const bookmark = afterAdded(w.lines).find((e) => e.type === "BOOKMARK")?.object as V1Node;
    expect(bookmark).toEqual({ kind: "Node", apiVersion: "v1", metadata: { resourceVersion: api.resourceVersion } });
  });

  it("answers a watch from a compacted version with an ERROR event carrying a 410 Status, then ends it", async () => {
    const old = api.resourceVersion;
    api.addNode({ name: "node-4" });
    api.compact();
    const w = await get(api, `/api/v1/nodes?watch=true&resourceVersion=${old}`);
    expect(w.status).toBe(200);
    expect(w.lines).toEqual([
      {
        type: "ERROR",
        object: expect.objectContaining({ kind: "Status", status: "Failure", reason: "Expired", code: 410 }),
      },
    ]);
    const unauth = await new Promise<number | undefined>((resolve) =>
      https.get(`${api.url}/api/v1/nodes`, { ca: fs.readFileSync(api.caFile) }, (res) => {
        res.resume();
        resolve(res.statusCode);
      }),
    );
    expect(unauth).toBe(401);
  });

  it("keeps the informer's view current: list, watch with bookmarks, resume, 410 relist, outage, garbage", async () => {
    const changes: string[] = [];
    const failures: string[] = [];
    let lists = 0;
    let synced = 0;
    const kc = loadKubeConfig(api.kubeconfig(), {});
    const informer = new ApiInformer<NodeFacts>(kc, "/api/v1/nodes", nodeObject, {
      failed: (e) => failures.push(e.message),
      listed: () => {
        lists++;
      },
    });
    informer.onSynced(() => synced++);
    informer.onChange((key, before, after) => changes.push(`${before ? (after ? "~" : "-") : "+"}${key}`));
    informer.start();
    try {
      await until("the first list", () => lists === 1);
      expect(synced).toBe(1);
      expect(names(informer)).toEqual(["node-1", "node-2", "node-3"]);
      expect(changes).toEqual([]); // the first list is told as a whole, by onSynced
      const listReq = api.requests.find((r) => r.query.watch === undefined);
      expect(listReq).toMatchObject({ path: "/api/v1/nodes", query: { limit: "500" }, auth: "Bearer stand-in-token" });
      await until("the watch", () => api.openWatches === 1);
      const watchReq = api.requests.find((r) => r.query.watch === "true");
      expect(watchReq?.query).toMatchObject({ allowWatchBookmarks: "true", resourceVersion: "1003" });

      api.deleteNode("node-2");
      await until("the delete", () => names(informer).join() === "node-1,node-3");
      // A change the agent keeps nothing of (a label, a heartbeat) is no change.
      api.updateNode("node-1", (n) => {
        (n.metadata as Record<string, unknown>).labels = { heartbeat: "1" };
      });
      api.updateNode("node-1", (n) => {
        (n.spec as Record<string, unknown>).podCIDRs = ["10.9.11.0/24"];
      });
      await until("node-1's change", () => changes.includes("~node-1"));
      expect(changes).toEqual(["-node-2", "~node-1"]);

      // A watch the server ends resumes from the last version (a bookmark's): no relist.
      await until("a bookmark", () => informer.version === api.resourceVersion);
      api.dropWatches();
      api.addNode({ name: "node-5" });
      await until("node-5", () => names(informer).includes("node-5"));
      expect(lists).toBe(1);
      const resumed = api.requests.filter((r) => r.query.watch === "true").at(-1);
      expect(Number(resumed?.query.resourceVersion)).toBeGreaterThan(1003);

      // The watch ends, a node changes and the history is compacted before the informer
      // is back: its watch gets 410 Gone, it lists again and tells what changed meanwhile.
      await until("the watch", () => api.openWatches === 1);
      const beforeCompaction = lists;
      changes.length = 0;
      api.dropWatches();
      api.updateNode("node-3", (n) => {
        (n.spec as Record<string, unknown>).podCIDRs = ["10.9.33.0/24"];
      });
      api.compact();
      await until("the relist", () => lists > beforeCompaction, 15_000);
      const gone = api.requests.findLast(
        (r) => r.query.watch === "true" && Number(r.query.resourceVersion) < Number(api.resourceVersion),
      );
      expect(gone).toBeDefined();
      expect(informer.get("node-3")?.podCidrs.map((c) => c.text)).toEqual(["10.9.33.0/24"]);
      expect(changes).toEqual(["~node-3"]);
      expect(synced).toBe(1);
      await until("the watch", () => api.openWatches === 1);
      // (An outage while nodes change.)
      await api.down();
      await until("a failure", () => failures.length > 0, 15_000);
      expect(names(informer)).toEqual(["node-1", "node-3", "node-5"]); // the last view stays
      api.deleteNode("node-1");
      api.compact();
      await api.up();
      await until("node-1 gone after the outage", () => !names(informer).includes("node-1"), 20_000);
      expect(changes.at(-1)).toBe("-node-1");

      // Garbage: failures reported, the view kept, then served again.
      const failed = failures.length;
      api.garbage(true);
      api.dropWatches();
      api.compact();
      await until("a garbage failure", () => failures.length > failed, 15_000);
      expect(names(informer)).toEqual(["node-3", "node-5"]);
      api.garbage(false);
      api.addNode({ name: "node-6" });
      await until("node-6", () => names(informer).includes("node-6"), 20_000);
    } finally {
      informer.stop();
    }
  }, 90_000);
});
