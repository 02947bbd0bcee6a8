/**
 * netperf, the paper's tool: a netserver inside each server netns (entered with
 * nsenter --net only: `ip netns exec` would remount /sys and hide the bpffs pins), netperf
 * run from the client's netns. Servers run in their own process group, registered with
 * the fixture so they are killed however the run ends.
 */
import { spawnSync } from "node:child_process";
import { runInBackground } from "./background";
import type { Fixture } from "./harness";
import { startListening } from "./servers";

/** TCP_MAERTS: TCP_STREAM the other way (the server sends). */
export type NetperfTest = "TCP_RR" | "TCP_CRR" | "TCP_STREAM" | "TCP_MAERTS";

export const UNITS: Record<NetperfTest, string> = {
  TCP_RR: "transactions/s",
  TCP_CRR: "connections/s",
  TCP_STREAM: "Mbit/s",
  TCP_MAERTS: "Mbit/s",
};

/** A netserver in `netns` on its default port, 12865. */
export function startNetserver(fx: Fixture, netns: string): void {
  startListening(fx, ["nsenter", `--net=/run/netns/${netns}`, "netserver", "-D", "-4"], netns, 12865, "netserver");
}

export interface NetperfResult {
  value: number;
  error?: string;
}

/**
 * One netperf test. `length` > 0: seconds; < 0: a fixed number of transactions (RR tests).
 * `testArgs` go after `--` (e.g. ["-r", "1000,1200"]).
 */
export function netperf(
  client: string,
  server: string,
  test: NetperfTest,
  length: number,
  testArgs: string[] = [],
): NetperfResult {
  const r = netperfFields(client, server, test, length, ["THROUGHPUT"], testArgs);
  return r.error ? { value: Number.NaN, error: r.error } : { value: r.values[0] as number };
}

/**
 * The same test with other output selectors (`-o`, e.g. P50_LATENCY): their values in the
 * order asked for, all numbers, or an error.
 */
export function netperfFields(
  client: string,
  server: string,
  test: NetperfTest,
  length: number,
  fields: string[],
  testArgs: string[] = [],
): { values: number[]; error?: string } {
  const r = spawnSync("nsenter", netperfArgs(client, server, test, length, fields, testArgs), {
    encoding: "utf8",
    timeout: (Math.abs(length) + 30) * 1000,
  });
  return netperfOutcome(r.status, r.stdout, r.stderr, { client, server, test }, fields.length);
}

/** The same test's throughput, run in the background: resolves when it is done. */
export function netperfInBackground(
  client: string,
  server: string,
  test: NetperfTest,
  length: number,
  testArgs: string[] = [],
): Promise<NetperfResult> {
  const args = netperfArgs(client, server, test, length, ["THROUGHPUT"], testArgs);
  return runInBackground("nsenter", args, (Math.abs(length) + 30) * 1000).then(({ code, stdout, stderr, error }) => {
    const r = netperfOutcome(code, stdout, error ?? stderr, { client, server, test }, 1);
    return r.error ? { value: Number.NaN, error: r.error } : { value: r.values[0] as number };
  });
}

function netperfArgs(
  client: string,
  server: string,
  test: NetperfTest,
  length: number,
  fields: string[],
  testArgs: string[],
): string[] {
  return [
    `--net=/run/netns/${client}`,
    "netperf",
    "-4",
    "-H",
    server,
    "-t",
    test,
    "-l",
    String(length),
    "-P",
    "0",
    "--",
    ...testArgs,
    "-o",
    fields.join(","),
  ];
}

function netperfOutcome(
  status: number | null,
  stdout: string,
  stderr: string,
  run: { client: string; server: string; test: NetperfTest },
  count: number,
): { values: number[]; error?: string } {
  const values = status === 0 ? parseNetperfCsv(stdout, count) : undefined;
  if (!values)
    return { values: [], error: `${run.test} ${run.client} → ${run.server}: ${(stderr || stdout || "").trim()}` };
  return { values };
}

/**
 * netperf's `-o` output without its banner (`-P 0`): the selected values comma-separated
 * on the last line. Undefined unless it holds `count` numbers.
 */
export function parseNetperfCsv(stdout: string, count: number): number[] | undefined {
  const line = stdout.trim().split("\n").pop() ?? "";
  const values = line.split(",").map((v) => (v.trim() === "" ? Number.NaN : Number(v)));
  return values.length === count && values.every(Number.isFinite) ? values : undefined;
}
