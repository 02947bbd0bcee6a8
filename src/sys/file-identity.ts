/**
 * What a path names on this side of a mount namespace: the device and inode of the path,
 * or of its nearest existing ancestor with the components still missing below it. Two
 * processes that get the same answer for a path create and open the same files through it.
 */
import * as fs from "node:fs";
import * as path from "node:path";

/** Where a path lands: the nearest existing ancestor's identity, and what is missing below it. */
export interface FileIdentity {
  path: string;
  dev: number;
  ino: number;
  /** Path components below the identified ancestor that do not exist (yet). */
  missing: string;
}

export function identify(file: string): FileIdentity {
  let at = path.resolve(file);
  const missing: string[] = [];
  for (;;) {
    try {
      const st = fs.statSync(at);
      return { path: file, dev: st.dev, ino: st.ino, missing: missing.join("/") };
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if ((code !== "ENOENT" && code !== "ENOTDIR") || at === "/") throw e;
      missing.unshift(path.basename(at));
      at = path.dirname(at);
    }
  }
}
