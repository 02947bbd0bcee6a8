/** The lock tests' child processes: the worker bundled once, started, watched and always killed. */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { buildSync } from "esbuild";

export interface Child {
  name: string;
  process: ChildProcess;
  /** Every event the child printed so far. */
  events: Record<string, unknown>[];
  /** Resolves with the first event matching `pred` (rejects if the child exits first). */
  event(pred: (e: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
  exited: Promise<number | null>;
}

export class Children {
  private readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), "netkit-lock-worker-"));
  private readonly worker = path.join(this.dir, "worker.js");
  private readonly running: ChildProcess[] = [];
  /** Every child's events in the order they arrived here. */
  readonly log: { name: string; event: Record<string, unknown> }[] = [];

  constructor() {
    buildSync({
      entryPoints: [path.join(__dirname, "lock-worker-entry.ts")],
      bundle: true,
      platform: "node",
      external: ["ffi-rs", "bun:ffi"],
      outfile: this.worker,
      logLevel: "error",
    });
  }

  start(name: string, ...args: string[]): Child {
    const child = spawn(process.execPath, [this.worker, ...args], {
      stdio: ["ignore", "pipe", "inherit"],
      // The bundle lives in a temp dir; ffi-rs (external) comes from the project's node_modules.
      env: { ...process.env, NODE_PATH: path.resolve(__dirname, "../../../node_modules") },
    });
    this.running.push(child);
    const events: Record<string, unknown>[] = [];
    const waiters: { pred: (e: Record<string, unknown>) => boolean; resolve: (e: Record<string, unknown>) => void }[] =
      [];
    let buffered = "";
    child.stdout?.on("data", (d: Buffer) => {
      buffered += d.toString();
      for (let nl = buffered.indexOf("\n"); nl !== -1; nl = buffered.indexOf("\n")) {
        const event = JSON.parse(buffered.slice(0, nl)) as Record<string, unknown>;
        buffered = buffered.slice(nl + 1);
        events.push(event);
        this.log.push({ name, event });
        for (const w of waiters.filter((w) => w.pred(event))) w.resolve(event);
      }
    });
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    return {
      name,
      process: child,
      events,
      exited,
      event: (pred) =>
        new Promise((resolve, reject) => {
          const seen = events.find(pred);
          if (seen) return resolve(seen);
          waiters.push({ pred, resolve });
          void exited.then((code) =>
            reject(new Error(`worker exited (${code}) before the event; saw ${JSON.stringify(events)}`)),
          );
        }),
    };
  }

  /** Kills every child still running and waits for each to be gone. */
  async killAll(): Promise<void> {
    this.log.splice(0);
    const alive = this.running.splice(0).filter((c) => c.exitCode === null && c.signalCode === null);
    await Promise.all(
      alive.map(
        (c) =>
          new Promise<void>((resolve) => {
            c.on("exit", () => resolve());
            if (!c.kill("SIGKILL") || c.exitCode !== null || c.signalCode !== null) resolve();
          }),
      ),
    );
  }

  dispose(): void {
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
