/**
 * Runs any CNI plugin (ours or a reference plugin) the way a runtime does: env + stdin,
 * from inside a node's network namespace, and times it from the caller's side (fork,
 * nsenter's exec, the plugin's whole life, exit). Every plugin is run by the same code,
 * so the timings compare like with like.
 */
import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { BINARY, CNI_PATH } from "../../test/support/harness";
import { onStop } from "./cleanup";

/** Invocations in flight (the storm): killed before cleanup removes what they work on. */
const running = new Set<{ kill(signal: NodeJS.Signals): boolean }>();
let stopRegistered = false;

export const OUR_PLUGIN = BINARY;
/** The Node SEA executable of the same build (scripts/build.mjs). */
export const OUR_NODE_PLUGIN = path.join(path.dirname(BINARY), "netkit-cni-node");
export const refPlugin = (type: string) => path.join(CNI_PATH, type);

export interface Attachment {
  containerId: string;
  netns: string;
  ifname: string;
}

export interface CniRun {
  status: number | null;
  stdout: string;
  json: Record<string, unknown> | undefined;
  /** Wall time of the invocation, in milliseconds, as the caller saw it. */
  ms: number;
}

export function cniEnv(verb: string, att: Attachment): Record<string, string> {
  return {
    PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
    CNI_COMMAND: verb,
    CNI_PATH,
    CNI_CONTAINERID: att.containerId,
    CNI_NETNS: att.netns,
    CNI_IFNAME: att.ifname,
  };
}

function parse(status: number | null, stdout: string, ms: number): CniRun {
  let json: Record<string, unknown> | undefined;
  try {
    json = stdout.trim() ? (JSON.parse(stdout) as Record<string, unknown>) : undefined;
  } catch {
    json = undefined;
  }
  return { status, stdout, json, ms };
}

const msSince = (t0: bigint) => Number(process.hrtime.bigint() - t0) / 1e6;

/** One invocation, waited for. `wrapper` goes between nsenter and the plugin (e.g. /usr/bin/time). */
export function runCni(
  plugin: string,
  node: string,
  verb: string,
  att: Attachment,
  conf: unknown,
  opts: { wrapper?: string[]; extraEnv?: Record<string, string> } = {},
): CniRun {
  const t0 = process.hrtime.bigint();
  const r = spawnSync("nsenter", [`--net=/run/netns/${node}`, ...(opts.wrapper ?? []), plugin], {
    input: JSON.stringify(conf),
    env: { ...cniEnv(verb, att), ...opts.extraEnv },
    encoding: "utf8",
    timeout: 60_000,
  });
  return parse(r.status, r.stdout ?? "", msSince(t0));
}

/** The same without blocking, for concurrent invocations (the ADD storm). */
export function runCniAsync(
  plugin: string,
  node: string,
  verb: string,
  att: Attachment,
  conf: unknown,
): Promise<CniRun> {
  return new Promise((resolve) => {
    const t0 = process.hrtime.bigint();
    const child = spawn("nsenter", [`--net=/run/netns/${node}`, plugin], { env: cniEnv(verb, att) });
    if (!stopRegistered) {
      stopRegistered = true;
      onStop(() => {
        for (const c of running) c.kill("SIGKILL");
      });
    }
    running.add(child);
    let stdout = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("error", () => {
      clearTimeout(timer);
      running.delete(child);
      resolve(parse(null, stdout, msSince(t0)));
    });
    child.on("close", (status) => {
      clearTimeout(timer);
      running.delete(child);
      resolve(parse(status, stdout, msSince(t0)));
    });
    child.stdin.on("error", () => undefined);
    child.stdin.end(JSON.stringify(conf));
  });
}

/** Peak resident set (kB) of one invocation: GNU time's %M of the plugin process itself. */
export function runCniPeakRss(
  plugin: string,
  node: string,
  verb: string,
  att: Attachment,
  conf: unknown,
  scratch: string,
): { run: CniRun; peakKb: number; cpuMs: number } {
  const out = path.join(scratch, `rss-${process.hrtime.bigint()}`);
  // GNU time: peak RSS in KiB, then user and system CPU seconds.
  const run = runCni(plugin, node, verb, att, conf, { wrapper: ["/usr/bin/time", "-f", "%M %U %S", "-o", out] });
  const [kb, user, sys] = (fs.readFileSync(out, "utf8").trim().split("\n").pop() ?? "").split(" ").map(Number);
  fs.rmSync(out, { force: true });
  return { run, peakKb: kb ?? Number.NaN, cpuMs: ((user ?? Number.NaN) + (sys ?? Number.NaN)) * 1000 };
}

/** The pod's IPv4 address from a CNI result. */
export function resultV4(json: Record<string, unknown> | undefined): string {
  const ips = (json?.ips ?? []) as { address: string }[];
  return ips.find((i) => !i.address.includes(":"))?.address.split("/")[0] ?? "";
}
