/**
 * Counting backlog-queue crossings: every packet that enters the per-CPU backlog fires
 * the net:netif_rx tracepoint once. The count for a fixed number of packets does not
 * depend on machine noise, which makes it the measure of what netkit + redirect_peer
 * remove. Needs tracefs (mounted here if absent) and must be the only traffic running.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";

const TRACEFS = "/sys/kernel/tracing";

function ensureTracefs(): void {
  if (fs.existsSync(`${TRACEFS}/events/net/netif_rx`)) return;
  execFileSync("mount", ["-t", "tracefs", "tracefs", TRACEFS]);
}

/** netif_rx events while `fn` runs. */
export function countNetifRx(fn: () => void): number {
  ensureTracefs();
  const enable = `${TRACEFS}/events/net/netif_rx/enable`;
  fs.writeFileSync(`${TRACEFS}/trace`, "");
  fs.writeFileSync(enable, "1");
  try {
    fn();
  } finally {
    fs.writeFileSync(enable, "0");
  }
  return fs
    .readFileSync(`${TRACEFS}/trace`, "utf8")
    .split("\n")
    .filter((l) => l.includes("netif_rx:")).length;
}

/** `count` pings, fast, from a netns; throws if any is lost. */
export function pingMany(netns: string, target: string, count: number): void {
  execFileSync(
    "nsenter",
    [`--net=/run/netns/${netns}`, "ping", "-q", "-c", String(count), "-i", "0.002", "-W", "2", target],
    { stdio: "pipe" },
  );
}
