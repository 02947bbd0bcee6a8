/**
 * The agent's HTTP endpoints: /metrics (Prometheus text), /healthz (the process answers
 * and its loop is not wedged), /readyz (synced: the conflist and routes are written) and
 * /status (what the agent knows and does, as JSON: peers it cannot route and why) and, with
 * --flows, /flows (the newest flow records, then those to come: see serveFlows).
 */
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { FlowFilterError, filterFromQuery } from "../flows/filter";
import type { FlowStore } from "./flows/store";
import type { AgentMetrics } from "./metrics";

/** What /readyz reads of the agent's status (all of it goes to /status). */
export interface ServedStatus {
  /** The conflist and the routes of a complete node list are written. */
  synced: boolean;
  /** What the agent waits for, when it cannot go on. */
  waiting: string | undefined;
}

/** ":9968" → every address; "127.0.0.1:9968", "[::1]:9968". */
export function parseListenAddress(text: string): { host: string | undefined; port: number } {
  const m = text.match(/^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/);
  const port = Number(m?.[3]);
  if (!m || !Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`bad listen address "${text}"`);
  const host = m[1] ?? m[2];
  return { host: host === "" ? undefined : host, port };
}

export async function serve(
  address: string,
  metrics: AgentMetrics,
  status: () => ServedStatus,
  healthy: () => string | undefined,
  flows?: FlowStore,
): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const reply = (code: number, type: string, body: string) => {
      res.writeHead(code, { "content-type": type });
      res.end(body);
    };
    const [url, query] = (req.url ?? "/").split("?");
    if (url === "/metrics") {
      metrics
        .refresh()
        .then(() => metrics.registry.metrics())
        .then(
          (text) => reply(200, metrics.registry.contentType, text),
          (e: Error) => reply(500, "text/plain", `${e.message}\n`),
        );
    } else if (url === "/healthz") {
      const sick = healthy();
      reply(sick ? 503 : 200, "text/plain", `${sick ?? "ok"}\n`);
    } else if (url === "/readyz") {
      const s = status();
      reply(
        s.synced ? 200 : 503,
        "text/plain",
        s.synced ? "ok\n" : `not synced: waiting for ${s.waiting ?? "routes"}\n`,
      );
    } else if (url === "/status") {
      reply(200, "application/json", `${JSON.stringify(status(), null, 2)}\n`);
    } else if (url === "/flows") {
      if (!flows) reply(404, "text/plain", "flow records are off: start the agent with --flows\n");
      else serveFlows(flows, new URLSearchParams(query), res, reply);
    } else {
      reply(404, "text/plain", "not found\n");
    }
  });
  const { host, port } = parseListenAddress(address);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  return server;
}

/** How many records a request gets when it does not say (?last=N). */
const DEFAULT_LAST = 100;
/** What a follower may have unread before records are skipped for it (see serveFlows). */
const FOLLOW_BUFFER_BYTES = 4 << 20;

/**
 * GET /flows?last=N&follow=1&<filter>: the newest N records the filter (../flows/filter.ts)
 * matches, oldest first, one JSON object a line; with follow=1 the answer stays open and
 * each matching record follows as it is added, until the client goes. A follower that
 * reads slower than records come is not let grow the agent's memory: while more than
 * FOLLOW_BUFFER_BYTES wait for it, records are skipped, and the next line it gets says
 * how many ({"lost":N}).
 */
function serveFlows(
  flows: FlowStore,
  query: URLSearchParams,
  res: http.ServerResponse,
  reply: (code: number, type: string, body: string) => void,
): void {
  let filter: ReturnType<typeof filterFromQuery>;
  const lastText = query.get("last") ?? String(DEFAULT_LAST);
  const followText = query.get("follow") ?? "0";
  try {
    if (!/^\d+$/.test(lastText)) throw new FlowFilterError(`bad last "${lastText}": a number of records, 0 or more`);
    if (!["0", "1", "false", "true"].includes(followText))
      throw new FlowFilterError(`bad follow "${followText}": 1 or 0`);
    filter = filterFromQuery(query);
  } catch (e) {
    if (!(e instanceof FlowFilterError)) throw e;
    reply(400, "text/plain", `${e.message}\n`);
    return;
  }
  res.writeHead(200, { "content-type": "application/x-ndjson" });
  const lines = flows.last(Number(lastText), filter).map((r) => `${JSON.stringify(r)}\n`);
  if (followText === "0" || followText === "false") {
    res.end(lines.join(""));
    return;
  }
  // The headers go now, even before any record: a follower may wait long for the next one.
  res.flushHeaders();
  if (lines.length > 0) res.write(lines.join(""));
  let lost = 0;
  const unsubscribe = flows.subscribe(filter, (record) => {
    if (res.writableLength > FOLLOW_BUFFER_BYTES) {
      lost++;
      return;
    }
    if (lost > 0) res.write(`${JSON.stringify({ lost })}\n`);
    lost = 0;
    res.write(`${JSON.stringify(record)}\n`);
  });
  res.once("close", unsubscribe);
}

export const boundPort = (server: http.Server) => (server.address() as AddressInfo).port;
