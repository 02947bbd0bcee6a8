/**
 * An exclusive flock(2) on a lock file, taken synchronously with a deadline: polling
 * LOCK_NB with growing sleeps, because a blocking flock would hang the plugin forever
 * behind a stuck holder. Everything stays on the main thread, as the netns rules require.
 */
import * as fs from "node:fs";
import { flock, LOCK_EX, LOCK_NB, LOCK_UN } from "./libc";

const POLL_MIN_MS = 5;
const POLL_MAX_MS = 50;

export class LockTimeoutError extends Error {
  constructor(
    readonly lockPath: string,
    readonly timeoutMs: number,
  ) {
    super(`timed out after ${timeoutMs} ms waiting for the lock ${lockPath}`);
    this.name = "LockTimeoutError";
  }
}

/** Blocks the thread for `ms` milliseconds. */
export function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Runs `fn` holding an exclusive lock on `lockPath` (created 0600 if missing). Throws
 * LockTimeoutError when the lock is not free within `timeoutMs`.
 */
export function withFileLock<T>(lockPath: string, timeoutMs: number, fn: () => T): T {
  // Read-only is enough for flock, and is how host-local opens its lock file.
  const fd = fs.openSync(lockPath, fs.constants.O_RDONLY | fs.constants.O_CREAT, 0o600);
  try {
    acquire(fd, lockPath, timeoutMs);
    try {
      return fn();
    } finally {
      flock(fd, LOCK_UN);
    }
  } finally {
    fs.closeSync(fd);
  }
}

function acquire(fd: number, lockPath: string, timeoutMs: number): void {
  const deadline = Date.now() + timeoutMs;
  let pause = POLL_MIN_MS;
  while (!flock(fd, LOCK_EX | LOCK_NB)) {
    const left = deadline - Date.now();
    if (left <= 0) throw new LockTimeoutError(lockPath, timeoutMs);
    sleepSync(Math.min(pause, left));
    pause = Math.min(pause * 2, POLL_MAX_MS);
  }
}
