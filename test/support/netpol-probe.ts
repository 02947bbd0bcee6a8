/**
 * tools/netpol-probe.py's probes run from a pod (its network namespace): what the
 * NetworkPolicy tests ask of the datapath, each target "HOST PORT tcp|udp|sctp [sport=N]
 * [size=N]" (the tool's header says what each means).
 */
import { spawn } from "node:child_process";
import * as path from "node:path";

export const NETPOL_PROBE = path.resolve(__dirname, "../integration/tools/netpol-probe.py");

/** The probe's output, one line per target in the order given ("HOST PORT PROTO yes|no"). */
export function probeOutput(netns: string, timeoutS: number, targets: string[]): Promise<string> {
  return new Promise((resolve) => {
    const child = spawn(
      "nsenter",
      [`--net=/run/netns/${netns}`, "python3", NETPOL_PROBE, "probe", String(timeoutS), ...targets],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.on("close", () => resolve(out));
  });
}

/** "yes" or "no" for each target, in the order given. */
export async function probeAnswers(netns: string, timeoutS: number, targets: string[]): Promise<string[]> {
  const out = await probeOutput(netns, timeoutS, targets);
  return out
    .trim()
    .split("\n")
    .map((l) => l.split(" ").pop() ?? "");
}
