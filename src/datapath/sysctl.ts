/**
 * Kernel settings under /proc/sys, named by their path there ("net/ipv4/ip_forward";
 * slashes, since device names may contain dots). /proc/sys/net reflects the network
 * namespace of the thread that opens the file, so callers write inside `inNetns` for a
 * pod's settings. Writes are skipped when the value is already right, which keeps
 * concurrent ADDs from racing on the same global switches.
 */
import * as fs from "node:fs";

export function ensureSysctl(key: string, value: string): void {
  const file = `/proc/sys/${key}`;
  if (fs.readFileSync(file, "utf8").trim() === value) return;
  fs.writeFileSync(file, value);
}

export function readSysctl(key: string): string | undefined {
  try {
    return fs.readFileSync(`/proc/sys/${key}`, "utf8").trim();
  } catch {
    return undefined;
  }
}
