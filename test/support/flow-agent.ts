/**
 * The agent's HTTP server on 127.0.0.1 (any port), serving /flows from a FlowStore, as
 * the flows tests meet it: each test's servers and their scratch directories are gone
 * after it.
 */
import * as fs from "node:fs";
import type * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach } from "vitest";
import type { FlowStore } from "../../src/agent/flows/store";
import { AgentMetrics } from "../../src/agent/metrics";
import { boundPort, serve } from "../../src/agent/server";

/** Registers the clean-up; returns a function starting a server (without a store: flows off) and giving its URL. */
export function useFlowAgent(): (flows?: FlowStore) => Promise<string> {
  const servers: http.Server[] = [];
  const dirs: string[] = [];
  afterEach(() => {
    for (const s of servers.splice(0)) {
      s.closeAllConnections();
      s.close();
    }
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });
  return async (flows) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkc-flows-"));
    dirs.push(dir);
    const server = await serve(
      "127.0.0.1:0",
      new AgentMetrics(dir, dir),
      () => ({ synced: true, waiting: undefined }),
      () => undefined,
      flows,
    );
    servers.push(server);
    return `http://127.0.0.1:${boundPort(server)}`;
  };
}
