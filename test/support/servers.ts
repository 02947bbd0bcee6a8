/**
 * Server processes the bench starts: each in its own process group, registered with the
 * fixture so it is killed however the run ends, and waited for until it listens.
 */
import { spawn, spawnSync } from "node:child_process";
import type { Fixture } from "./harness";

const sleepMs = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** Whether something listens on TCP `port` in `netns` (a name under /run/netns). */
export function listening(netns: string, port: number): boolean {
  const r = spawnSync("nsenter", [`--net=/run/netns/${netns}`, "ss", "-Hltn", `sport = :${port}`], {
    encoding: "utf8",
  });
  return r.status === 0 && r.stdout.trim() !== "";
}

/**
 * Runs `argv` detached and returns once TCP `port` listens in `netns`; throws naming `what`
 * when the process exits first or 10 s pass.
 */
export function startListening(fx: Fixture, argv: string[], netns: string, port: number, what: string): void {
  const [cmd, ...args] = argv;
  if (!cmd) throw new Error("startListening: empty command");
  const child = spawn(cmd, args, { detached: true, stdio: "ignore" });
  fx.processes.push({
    kill: () => {
      try {
        if (child.pid) process.kill(-child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    },
  });
  const deadline = Date.now() + 10_000;
  while (!listening(netns, port)) {
    if (child.exitCode !== null || Date.now() > deadline)
      throw new Error(`${what} did not start in ${netns} on port ${port}`);
    sleepMs(50);
  }
}
