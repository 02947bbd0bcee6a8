/**
 * `netkit-cni flows`: the flow records the node's agent keeps (`netkit-cni agent --flows`),
 * read from its /flows as `hubble observe` reads its relay: the newest that match the
 * filter (../flows/filter.ts, the same query the agent reads), then, with --follow, each
 * new one until interrupted or --for-seconds pass. A line per flow: when, where judged,
 * the verdict, which way for which pod, both ends (the pod, else the kind) and the rule
 * that decided; -o json or jsonl: the record as the agent tells it, one a line.
 */
import { type FlowFilter, filterToQuery } from "../flows/filter";
import type { FlowEnd, FlowRecord } from "../flows/record";
import type { Output } from "./output";

/** The agent's default --metrics-address port (agent/options.ts), on this node. */
export const DEFAULT_AGENT_URL = "http://127.0.0.1:9968";

export interface FlowsOptions extends Required<FlowFilter> {
  /** The agent's HTTP address. */
  agent: string;
  /** The newest records shown first (0: none, only those to come with follow). */
  last: number;
  follow: boolean;
  /** Stop after this many milliseconds (tests, scripts); undefined: until interrupted, or the records so far. */
  forMs: number | undefined;
  output: Output;
}

const address = (ip: string, port: number) => `${ip.includes(":") ? `[${ip}]` : ip}:${port}`;

function endText(end: FlowEnd): string {
  const at = address(end.ip, end.port);
  switch (end.kind) {
    case "pod":
      return end.namespace && end.pod ? `${end.namespace}/${end.pod} ${at}` : at;
    case "service":
      return `service:${end.namespace ?? "?"}/${end.service ?? "?"} ${at}`;
    case "node":
      return `node:${end.node ?? "?"} ${at}`;
    default:
      return `${at} (world)`;
  }
}

/** An ended flow's counts: "ended: sent 5 packets 420 bytes, received 5 packets 420 bytes". */
function countsText(r: FlowRecord): string {
  if (r.state !== "ended" || !r.packets || !r.bytes) return "";
  const { packets, bytes } = r;
  return ` (ended: sent ${packets.sent} packets ${bytes.sent} bytes, received ${packets.received} packets ${bytes.received} bytes)`;
}

/** One line: "TIME NODE VERDICT DIRECTION SUBJECT PROTO SRC -> DST by POLICY", an ended flow's counts after it; wide adds why, tier, state and datapath. */
export function formatFlowLine(r: FlowRecord, wide: boolean): string {
  const line = `${r.time} ${r.node} ${r.verdict.toUpperCase()} ${r.direction} ${r.subject} ${r.protocol} ${endText(r.source)} -> ${endText(r.destination)} by ${r.policy}${countsText(r)}`;
  if (!wide) return line;
  return `${line} [reason=${r.reason} tier=${r.tier ?? "none"} state=${r.state} datapath=${r.datapath ?? "?"}]`;
}

export function flowsUrl(opts: FlowsOptions): string {
  const query = new URLSearchParams({ last: String(opts.last), ...(opts.follow ? { follow: "1" } : {}) });
  for (const [key, value] of filterToQuery(opts)) query.append(key, value);
  return `${opts.agent.replace(/\/+$/, "")}/flows?${query}`;
}

/**
 * Prints the records as they come (`write`, a line each; `warn` for what is not a record:
 * those the agent skipped for this reader). Throws, saying what to do, when the agent
 * cannot be reached or refuses.
 */
export async function runFlows(
  opts: FlowsOptions,
  write: (line: string) => void,
  warn: (line: string) => void,
): Promise<number> {
  const url = flowsUrl(opts);
  const abort = new AbortController();
  const timer = opts.forMs === undefined ? undefined : setTimeout(() => abort.abort(), opts.forMs);
  try {
    let res: Response;
    try {
      res = await fetch(url, { signal: abort.signal });
    } catch (e) {
      if (abort.signal.aborted) return 0;
      const cause = (e as Error & { cause?: Error }).cause?.message ?? (e as Error).message;
      throw new Error(
        `cannot reach the agent at ${opts.agent} (${cause}): it must run on this node with --flows (or give --agent URL)`,
      );
    }
    if (res.status !== 200) throw new Error((await res.text()).trim() || `${url}: HTTP ${res.status}`);
    const show = (text: string) => {
      if (text === "") return;
      const value = JSON.parse(text) as FlowRecord | { lost: number };
      if ("lost" in value) warn(`${value.lost} flow records not sent: this reader fell behind`);
      else if (opts.output === "json" || opts.output === "jsonl") write(text);
      else write(formatFlowLine(value, opts.output === "wide"));
    };
    const decoder = new TextDecoder();
    let pending = "";
    try {
      for await (const chunk of res.body ?? []) {
        pending += decoder.decode(chunk, { stream: true });
        const lines = pending.split("\n");
        pending = lines.pop() ?? "";
        for (const line of lines) show(line);
      }
    } catch (e) {
      if (!abort.signal.aborted) throw e;
    }
    show(pending);
    return 0;
  } finally {
    clearTimeout(timer);
  }
}
