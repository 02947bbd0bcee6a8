/**
 * One ADD or DEL of an attachment (container ID + ifname) at a time. A runtime that gives
 * up on an ADD sends a DEL for the attachment, and the ADD it gave up on may still be
 * running: without this, that DEL would release the ADD's addresses and delete what it had
 * made so far, and the ADD would go on to finish a pod with an address IPAM hands out
 * again, or report success for devices that are gone. Held for the whole verb, the lock
 * makes the DEL wait for the ADD to end, either way, and then remove all it left.
 *
 * Striped: a fixed set of lock files, an attachment's chosen by a hash of it, so no file
 * is ever removed (removing a lock file lets a waiter lock a name nobody else will) and
 * /run holds at most STRIPES of them. Two attachments sharing a stripe only wait for each
 * other's verb. Taken before any other lock of ours, and released after them.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { CniError, ErrorCode } from "../cni/errors";
import { LockTimeoutError, withFileLockAsync } from "../sys/file-lock";
import { mkdirs } from "../sys/mkdirs";
import { sha256Hex } from "../sys/sha256";

const LOCK_DIR = "/run/netkit-cni/attachment-locks";
/** 16^3 stripes: three hex digits of the attachment's hash name its lock file. */
const STRIPE_DIGITS = 3;
/** Long enough for an ADD that waits out the node's own locks (10 s each) to finish. */
const LOCK_TIMEOUT_MS = 30_000;

/** The lock file of an attachment; the container ID appears in it only hashed. */
export function attachmentLockPath(containerId: string, ifname: string): string {
  return path.join(LOCK_DIR, `${sha256Hex([containerId, "\0", ifname], STRIPE_DIGITS)}.lock`);
}

export async function withAttachmentLock<T>(containerId: string, ifname: string, fn: () => Promise<T>): Promise<T> {
  const lockPath = attachmentLockPath(containerId, ifname);
  if (!fs.existsSync(LOCK_DIR)) mkdirs(LOCK_DIR, 0o700);
  try {
    return await withFileLockAsync(lockPath, LOCK_TIMEOUT_MS, fn);
  } catch (e) {
    // Only our own wait: the verb's inner locks answer their timeouts themselves.
    if (e instanceof LockTimeoutError && e.lockPath === lockPath) {
      throw new CniError(
        ErrorCode.TryAgainLater,
        `another ADD or DEL of ${containerId}/${ifname} is still running: ${e.message}; try again later`,
      );
    }
    throw e;
  }
}
