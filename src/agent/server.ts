/**
 * The agent's HTTP endpoints: /metrics (Prometheus text), /healthz (the process answers
 * and its loop is not wedged), /readyz (synced: the conflist and routes are written) and
 * /status (what the agent knows and does, as JSON: peers it cannot route and why).
 */
import * as http from "node:http";
import type { AddressInfo } from "node:net";
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
): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const reply = (code: number, type: string, body: string) => {
      res.writeHead(code, { "content-type": type });
      res.end(body);
    };
    const url = (req.url ?? "/").split("?")[0];
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

export const boundPort = (server: http.Server) => (server.address() as AddressInfo).port;
