/**
 * A command run in the background with its outputs kept: for a load beside a timed test
 * (bench/lib/iperf3.ts, the flow records' flood through netperf.ts).
 */
import { spawn } from "node:child_process";

export interface BackgroundOutcome {
  /** The exit code; null when killed (past `timeoutMs`) or never started. */
  code: number | null;
  stdout: string;
  stderr: string;
  /** Why it could not be started. */
  error?: string;
}

/** Runs `command args`, killed after `timeoutMs`; resolves when it has ended, never rejects. */
export function runInBackground(command: string, args: string[], timeoutMs: number): Promise<BackgroundOutcome> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", (e) => {
      clearTimeout(timer);
      resolve({ code: null, stdout, stderr, error: e.message });
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
