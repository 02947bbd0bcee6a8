/**
 * iperf3, for bulk TCP rates: a server inside the server's netns, the client run from the
 * client's (both through nsenter --net, as netperf is), its report read as JSON (`-J`).
 * Used beside netperf because its report has both what the receiver counted (a limit is
 * judged by what arrives, not by what was sent into a policer) and the sender's TCP
 * retransmissions (what a policer's drops cost the flow), in either direction from the
 * same client (`-R`).
 */
import { spawnSync } from "node:child_process";
import { runInBackground } from "../../test/support/background";
import type { Fixture } from "../../test/support/harness";
import { startListening } from "../../test/support/servers";

export const IPERF3_PORT = 5201;

export interface Iperf3Result {
  /** What the receiver counted, Mbit/s. */
  mbits: number;
  /** The sender's TCP retransmissions over the run. */
  retransmits: number;
  error?: string;
}

/** An iperf3 server in `netns`: one test at a time, as the rounds run them. */
export function startIperf3Server(fx: Fixture, netns: string): void {
  startListening(
    fx,
    ["nsenter", `--net=/run/netns/${netns}`, "iperf3", "-s", "-p", String(IPERF3_PORT)],
    netns,
    IPERF3_PORT,
    "iperf3 server",
  );
}

const sleepMs = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/**
 * Waits up to `ms` until the server in `netns` is between tests: listening, and nothing
 * of the last test left but TIME-WAITs; false if it never was. iperf3 serves one test at
 * a time and opens its listening socket anew after each, so a client started the moment
 * the last one exits can find no listener ("Connection refused") or one closing under it
 * ("reset by peer"): seen after a bulk flow through a queueing limit, whose last messages
 * reach the server late.
 */
export function waitIperf3Idle(netns: string, ms = 5000): boolean {
  const deadline = Date.now() + ms;
  for (;;) {
    const r = spawnSync("nsenter", [`--net=/run/netns/${netns}`, "ss", "-Htan", `sport = :${IPERF3_PORT}`], {
      encoding: "utf8",
    });
    const states = r.status === 0 ? r.stdout.split("\n").flatMap((l) => l.trim().split(/\s+/, 1).filter(Boolean)) : [];
    if (states.includes("LISTEN") && states.every((st) => st === "LISTEN" || st === "TIME-WAIT")) return true;
    if (Date.now() > deadline) return false;
    sleepMs(20);
  }
}

/** `reverse`: the server sends (the client pod receives). */
function clientArgs(client: string, server: string, seconds: number, reverse: boolean): string[] {
  return [
    `--net=/run/netns/${client}`,
    "iperf3",
    "-c",
    server,
    "-p",
    String(IPERF3_PORT),
    "-t",
    String(seconds),
    "-J",
    ...(reverse ? ["-R"] : []),
  ];
}

const timeoutMs = (seconds: number) => (seconds + 30) * 1000;

/** One run, waited for. */
export function iperf3(client: string, server: string, seconds: number, reverse: boolean): Iperf3Result {
  const what = `iperf3 ${client} ${reverse ? "←" : "→"} ${server}`;
  const r = spawnSync("nsenter", clientArgs(client, server, seconds, reverse), {
    encoding: "utf8",
    timeout: timeoutMs(seconds),
  });
  return parseIperf3(r.stdout ?? "", what, r.stderr);
}

/** One run in the background (the load under a latency test); resolves when it ends. */
export function iperf3Background(
  client: string,
  server: string,
  seconds: number,
  reverse = false,
): Promise<Iperf3Result> {
  const what = `iperf3 ${client} ${reverse ? "←" : "→"} ${server} (background)`;
  return runInBackground("nsenter", clientArgs(client, server, seconds, reverse), timeoutMs(seconds)).then(
    ({ stdout, stderr, error }) => parseIperf3(stdout, what, error ?? stderr),
  );
}

const nan = (what: string, why: string): Iperf3Result => ({
  mbits: Number.NaN,
  retransmits: Number.NaN,
  error: `${what}: ${why}`,
});

/**
 * The receiver's rate from iperf3's JSON report (end.sum_received; in reverse mode too,
 * where the client is the receiver). iperf3 3.12 exits 0 after a failed test with `-J`:
 * only the report's "error" says so.
 */
export function parseIperf3(stdout: string, what: string, stderr = ""): Iperf3Result {
  let report: { error?: unknown; end?: { sum_received?: { bits_per_second?: unknown }; sum_sent?: unknown } };
  try {
    report = JSON.parse(stdout) as typeof report;
  } catch {
    return nan(what, stderr.trim() || "no JSON report");
  }
  if (typeof report.error === "string") return nan(what, report.error);
  const bps = report.end?.sum_received?.bits_per_second;
  if (typeof bps !== "number" || !Number.isFinite(bps)) return nan(what, "no end.sum_received in the report");
  const sent = report.end?.sum_sent as { retransmits?: unknown } | undefined;
  const retransmits = typeof sent?.retransmits === "number" ? sent.retransmits : Number.NaN;
  return { mbits: bps / 1e6, retransmits };
}
