/**
 * `mkdir -p`, one component at a time. Node's own `mkdirSync(…, {recursive: true})` spins
 * forever on paths under /proc (mkdir there answers ENOENT for a parent that exists), and
 * paths come from configuration (dataDir, logFile, bpffsRoot): an admin's typo must be an
 * error, not a hung pod start.
 */
import * as fs from "node:fs";
import * as path from "node:path";

export function mkdirs(dir: string, mode: number): void {
  const absolute = path.resolve(dir);
  const parts = absolute.split(path.sep).filter(Boolean);
  let current: string = path.sep;
  for (const part of parts) {
    current = path.join(current, part);
    try {
      fs.mkdirSync(current, { mode });
    } catch (e) {
      // Something already there is fine only if it is a directory.
      if ((e as NodeJS.ErrnoException).code !== "EEXIST" || !fs.statSync(current).isDirectory()) throw e;
    }
  }
}
