/**
 * Where an application process runs: inside a netns (entered with nsenter --net only, so
 * the bpffs pins and the files stay visible) and inside a cgroup v2 directory of this run,
 * which both counts its CPU and, for the socket bypass, decides whether sock_ops sees its
 * sockets. Servers are registered with the fixture and killed however the run ends.
 */
import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import type { Fixture } from "../../../test/support/harness";

export interface Place {
  netns: string;
  cgroup: string;
}

export const sleepMs = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** argv for `sh`: join the cgroup first, so every child the command forks is counted too. */
export const inside = (p: Place, cmd: string[]) => [
  "-c",
  `echo $$ > ${p.cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${p.netns} "$@"`,
  "app",
  ...cmd,
];

export function listening(netns: string, port: number): boolean {
  const r = spawnSync("nsenter", [`--net=/run/netns/${netns}`, "ss", "-Hltn", `sport = :${port}`], {
    encoding: "utf8",
  });
  return r.status === 0 && r.stdout.trim() !== "";
}

/** Gone or a zombie (a child of ours is reaped only when the event loop turns). */
function exited(pid: number): boolean {
  try {
    return /^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return true;
  }
}

/**
 * Starts a server in the foreground of its own process group; returns once `port` listens.
 * Stopping asks first (`stopSignal` to the server: PostgreSQL's fast shutdown is SIGINT,
 * and it removes its shared memory only then), then kills the group.
 */
export function startDaemon(
  fx: Fixture,
  p: Place,
  cmd: string[],
  port: number,
  logFile: string,
  stopSignal: NodeJS.Signals = "SIGTERM",
): void {
  const log = fs.openSync(logFile, "a");
  const child = spawn("sh", inside(p, cmd), { detached: true, stdio: ["ignore", log, log] });
  fs.closeSync(log);
  fx.processes.push({
    kill: () => {
      const pid = child.pid;
      if (!pid) return;
      try {
        process.kill(pid, stopSignal);
        for (let i = 0; i < 100 && !exited(pid); i++) sleepMs(50);
      } catch {
        // already gone
      }
      try {
        process.kill(-pid, "SIGKILL");
      } catch {
        // already gone
      }
    },
  });
  const deadline = Date.now() + 20_000;
  while (!listening(p.netns, port)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      const tail = fs.readFileSync(logFile, "utf8").trim().split("\n").slice(-5).join("\n");
      throw new Error(`${cmd[0]} did not listen on ${port} in ${p.netns}:\n${tail}`);
    }
    sleepMs(50);
  }
}

export interface ClientRun {
  status: number | null;
  out: string;
}

/** A load client, bounded in time: killed `seconds` + 20 s after it starts. */
export function runClient(p: Place, cmd: string[], seconds: number, cwd?: string): ClientRun {
  const r = spawnSync("sh", inside(p, cmd), {
    encoding: "utf8",
    timeout: (seconds + 20) * 1000,
    killSignal: "SIGKILL",
    cwd,
    maxBuffer: 64 * 1024 * 1024,
  });
  return { status: r.status, out: `${r.stdout ?? ""}\n${r.stderr ?? ""}` };
}

export function cpuUsec(cgroup: string): number {
  const m = /^usage_usec (\d+)$/m.exec(fs.readFileSync(`${cgroup}/cpu.stat`, "utf8"));
  return m ? Number(m[1]) : Number.NaN;
}
