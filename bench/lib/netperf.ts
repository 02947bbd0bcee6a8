/**
 * netperf, the paper's tool: a netserver inside each server netns (entered with
 * nsenter --net only: `ip netns exec` would remount /sys and hide the bpffs pins), netperf
 * run from the client's netns. Servers run in their own process group, registered with
 * the fixture so they are killed however the run ends.
 */
import { spawnSync } from "node:child_process";
import type { Fixture } from "../../test/integration/harness";
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
  const r = spawnSync(
    "nsenter",
    [
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
      "THROUGHPUT",
    ],
    { encoding: "utf8", timeout: (Math.abs(length) + 30) * 1000 },
  );
  const value = Number.parseFloat(r.stdout.trim().split("\n").pop() ?? "");
  if (r.status !== 0 || !Number.isFinite(value)) {
    return { value: Number.NaN, error: `${test} ${client} → ${server}: ${(r.stderr || r.stdout || "").trim()}` };
  }
  return { value };
}
