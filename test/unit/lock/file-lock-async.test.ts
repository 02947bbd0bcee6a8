/**
 * `withFileLockAsync`: the lock is held across the critical section's awaits and let go
 * when it settles, whether it resolved or threw.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, beforeEach, expect, it } from "vitest";
import { withFileLockAsync } from "../../../src/sys/file-lock";
import { flock, LOCK_EX, LOCK_NB, LOCK_UN } from "../../../src/sys/libc";

let dir = "";
let lock = "";
let queues = "";

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "netkit-lock-async-"));
  lock = path.join(dir, "lock");
  queues = path.join(dir, "queues");
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

/** Whether another open file description could take the lock now. */
function free(): boolean {
  const fd = fs.openSync(lock, "r");
  try {
    const got = flock(fd, LOCK_EX | LOCK_NB);
    if (got) flock(fd, LOCK_UN);
    return got;
  } finally {
    fs.closeSync(fd);
  }
}

it("holds the lock across awaits and releases it after", async () => {
  const seen = await withFileLockAsync(
    lock,
    1000,
    async () => {
      await Promise.resolve();
      return free();
    },
    queues,
  );
  expect(seen).toBe(false);
  expect(free()).toBe(true);
});

it("releases the lock when the critical section throws", async () => {
  await expect(
    withFileLockAsync(
      lock,
      1000,
      async () => {
        throw new Error("boom");
      },
      queues,
    ),
  ).rejects.toThrow("boom");
  expect(free()).toBe(true);
});
