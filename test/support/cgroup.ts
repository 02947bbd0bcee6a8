/**
 * Cgroups of a test's own, under the cgroup v2 hierarchy's root: where Service translation
 * and the socket bypass attach their programs in tests, and where the test's clients run.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { cgroup2Root } from "../../src/datapath/sockbypass";

/** Makes the cgroup `name` (unique to the test: uniqueName, or the pid in it) and says where. */
export function makeTestCgroup(name: string): string {
  const root = cgroup2Root();
  if (!root) throw new Error("no cgroup v2 hierarchy on this machine");
  const dir = path.join(root, name);
  fs.mkdirSync(dir);
  return dir;
}

/**
 * Removes a test's cgroup, its child cgroups first. rmdir succeeds once the killed
 * processes have left it: tried `attempts` times, 50 ms apart, then left.
 */
export function removeTestCgroup(dir: string, attempts = 100): void {
  if (!fs.existsSync(dir)) return;
  for (const child of fs.readdirSync(dir, { withFileTypes: true })) {
    if (child.isDirectory()) removeTestCgroup(path.join(dir, child.name), attempts);
  }
  for (let i = 0; i < attempts && fs.existsSync(dir); i++) {
    try {
      fs.rmdirSync(dir);
    } catch {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    }
  }
}
