/**
 * `netkit-cni flows` against a real agent server fed by a FlowStore: its flags, its lines,
 * following until --for-seconds pass, and what it says when the agent is away or refuses.
 */
import * as http from "node:http";
import { describe, expect, it } from "vitest";
import { FlowStore } from "../../src/agent/flows/store";
import { boundPort } from "../../src/agent/server";
import { DEFAULT_AGENT_URL, flowsUrl, formatFlowLine, runFlows } from "../../src/cli/flows";
import { parseFlowsOptions, UsageError } from "../../src/cli/view-options";
import { useFlowAgent } from "../support/flow-agent";
import { flowRecord } from "../support/flow-record";

const agent = useFlowAgent();

const denied = flowRecord({
  time: "2026-12-06T10:00:01.000Z",
  verdict: "dropped",
  reason: "denied",
  policy: "default deny",
  policies: ["b/deny-all"],
  source: { ip: "203.0.113.9", port: 5000, kind: "world" },
});

async function run(args: string[]) {
  const out: string[] = [];
  const warnings: string[] = [];
  const code = await runFlows(
    parseFlowsOptions(args),
    (line) => out.push(line),
    (line) => warnings.push(line),
  );
  return { code, out, warnings };
}

describe("netkit-cni flows", () => {
  it("reads its flags, filters repeated, into the agent's query", () => {
    const opts = parseFlowsOptions(["-f", "--verdict", "dropped", "--verdict=audit", "--to-pod", "b/", "--port", "80"]);
    expect(opts).toMatchObject({ agent: DEFAULT_AGENT_URL, last: 100, follow: true, verdict: ["dropped", "audit"] });
    expect(flowsUrl(opts)).toBe(
      "http://127.0.0.1:9968/flows?last=100&follow=1&to-pod=b%2F&verdict=dropped&verdict=audit&port=80",
    );
    expect(() => parseFlowsOptions(["--verdict", "allowed"])).toThrow(
      new UsageError('bad verdict "allowed": forwarded | dropped | audit'),
    );
    expect(() => parseFlowsOptions(["--from-pod", "client"])).toThrow(UsageError);
    expect(() => parseFlowsOptions(["--last", "many"])).toThrow(/--last must be a number/);
    expect(() => parseFlowsOptions(["--agent", "127.0.0.1:9968"])).toThrow(/--agent must be an http/);
  });

  it("prints a line per flow: time, node, verdict, direction, subject, protocol, both ends and the rule", () => {
    expect(formatFlowLine(flowRecord(), false)).toBe(
      "2026-12-06T10:00:00.123Z node-a FORWARDED ingress b/server TCP a/client 10.0.0.5:41234 -> b/server 10.0.1.7:80 by b/allow-a ingress rule 0",
    );
    expect(formatFlowLine(denied, true)).toBe(
      "2026-12-06T10:00:01.000Z node-a DROPPED ingress b/server TCP 203.0.113.9:5000 (world) -> b/server 10.0.1.7:80 by default deny [reason=denied tier=networkPolicy state=new datapath=netkit]",
    );
  });

  it("shows the agent's newest records that match, as lines or JSON", async () => {
    const store = new FlowStore();
    store.add(flowRecord());
    store.add(denied);
    const url = await agent(store);
    const table = await run(["--agent", url, "--verdict", "dropped"]);
    expect(table).toEqual({ code: 0, out: [formatFlowLine(denied, false)], warnings: [] });
    const json = await run(["--agent", `${url}/`, "-o", "jsonl"]);
    expect(json.out.map((line) => JSON.parse(line))).toEqual([flowRecord(), denied]);
  });

  it("follows new records until --for-seconds pass", async () => {
    const store = new FlowStore();
    store.add(flowRecord());
    const url = await agent(store);
    const started = Date.now();
    const following = run(["--agent", url, "--last", "0", "-f", "--to-pod", "b/server", "--for-seconds", "1"]);
    await expect.poll(() => store.following).toBe(1);
    store.add(denied);
    store.add(flowRecord({ destination: { ip: "10.0.1.9", port: 80, kind: "pod", namespace: "b", pod: "other" } }));
    const { code, out } = await following;
    expect(code).toBe(0);
    expect(out).toEqual([formatFlowLine(denied, false)]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    await expect.poll(() => store.following).toBe(0);
  });

  it("says which agent it could not reach, and what the agent refused", async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = boundPort(closed);
    await new Promise((resolve) => closed.close(resolve));
    await expect(run(["--agent", `http://127.0.0.1:${port}`])).rejects.toThrow(
      new RegExp(`cannot reach the agent at http://127.0.0.1:${port} .*it must run on this node with --flows`),
    );
    await expect(run(["--agent", await agent()])).rejects.toThrow(
      /^flow records are off: start the agent with --flows$/,
    );
    await expect(run(["--agent", await agent(new FlowStore()), "--protocol", "47", "--port", "0"])).resolves.toEqual({
      code: 0,
      out: [],
      warnings: [],
    });
  });
});
