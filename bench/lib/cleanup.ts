/**
 * Everything a benchmark run creates (namespaces, links inside them, bpffs pins, temp
 * folders, netserver processes, a tracefs instance) is registered here and removed when
 * the run ends, however it ends: normal exit, an exception, or SIGINT/SIGTERM/SIGHUP.
 * Removal is synchronous so it can run from the process's exit handler.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { Fixture } from "../../test/support/harness";

/** The bench-only bpffs folder: every bpffs root of this run lives inside it. */
export const BENCH_BPFFS = `/sys/fs/bpf/netkit-cni-bench-${process.pid}`;

/** A test fixture whose bpffs root sits under this run's bench folder. */
export class BenchFixture extends Fixture {
  override readonly bpffsRoot: string;

  constructor(name: string) {
    super();
    this.bpffsRoot = path.join(BENCH_BPFFS, name);
  }
}

type Undo = () => void;

const undos: Undo[] = [];
/** Run before any removal: stop what could still be creating things (plugin invocations). */
const stoppers: Undo[] = [];
let installed = false;
let done = false;

/** Runs every registered removal, newest first; each one is attempted even if another fails. */
export function cleanupAll(): void {
  if (done) return;
  done = true;
  for (const undo of [...stoppers.splice(0), ...undos.splice(0).reverse()]) {
    try {
      undo();
    } catch (e) {
      process.stderr.write(`cleanup: ${(e as Error).message}\n`);
    }
  }
}

function install(): void {
  if (installed) return;
  installed = true;
  process.on("exit", cleanupAll);
  for (const [signal, code] of [
    ["SIGINT", 130],
    ["SIGTERM", 143],
    ["SIGHUP", 129],
  ] as const) {
    process.on(signal, () => {
      process.stderr.write(`\nbench: ${signal}, cleaning up\n`);
      cleanupAll();
      process.exit(code);
    });
  }
  // Last to run: the run's bpffs folder, whatever is left in it.
  undos.push(() => fs.rmSync(BENCH_BPFFS, { recursive: true, force: true }));
}

export function onCleanup(undo: Undo): void {
  install();
  undos.push(undo);
}

export function onStop(stop: Undo): void {
  install();
  stoppers.push(stop);
}

/**
 * Lets the event loop turn. The measurements run external commands synchronously; a
 * signal handler only runs when the loop turns, so long phases call this between steps
 * to be interruptible within one step.
 */
export const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A new fixture (namespaces, temp folders, bpffs root, processes) removed at the end. */
export function newFixture(name: string): BenchFixture {
  const fx = new BenchFixture(name);
  onCleanup(() => fx.cleanup());
  return fx;
}
