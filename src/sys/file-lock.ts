/**
 * An exclusive flock(2) on a lock file, taken synchronously, in order of arrival, with a
 * deadline on a monotonic clock. Everything stays on the main thread, as the netns rules
 * require.
 *
 * Why not flock alone. A blocking flock cannot be given a deadline from one synchronous
 * thread (a signal would not even interrupt it: Node installs its handlers with
 * SA_RESTART), and a stuck holder must cost an ADD "try again later", not a hung pod. So
 * the lock is polled with LOCK_NB, and polling alone is unfair: whoever asks right after
 * a release wins. A process that just arrived (or just let go and wants it again) asks
 * straight away, while one that has waited long sleeps between its polls, so in a burst
 * of pods the newcomers keep overtaking it until its deadline passes. Short jittered polls
 * would spread that bad luck evenly, but not bound it: with 64 waiters and long enough
 * holds, someone still loses every round until the deadline.
 *
 * So contenders queue. One that finds the lock busy takes a ticket: a file in the lock's
 * queue directory, named by its arrival time on CLOCK_MONOTONIC (one clock for every
 * process on the host) and flock'ed by its owner for as long as it queues or holds the
 * lock. Only the first ticket (the head) polls the lock file, every millisecond or so;
 * the others wait until no ticket is ahead of theirs, polling less often the further back
 * they stand and the slower the queue moves. A holder keeps its ticket until it has let
 * go, and a newcomer goes straight for the lock only when the queue is empty, so nobody
 * overtakes a waiter: each waits for the holds of those ahead of it, and no longer.
 * The kernel drops a dead process's flocks, so an unlocked ticket is a crashed
 * contender's; whoever stands right behind it removes it and moves up.
 *
 * A turn lasts as long as the holder takes to get its CPU time, and in a burst the CPU is
 * shared with every other contender still starting up: at nice 0 a holder needing 3 ms
 * of CPU held the lock for 90 ms, so those at the back of a 64-deep queue waited out their
 * deadline. A holder therefore runs at raised priority (when root, as the plugin is) until
 * it lets go; its critical section is short, and everyone waits for it anyway.
 *
 * The queue is an agreement among our own processes: host-local, which takes the IPAM
 * store's lock with a plain blocking flock, still competes with the head, and exclusion
 * itself is only ever the lock file's flock. Queues live under /run (gone at boot, like
 * the flocks they mirror), one directory per lock file, removed when empty. Where no
 * queue can be made, a contender still gets the lock by polling as the head does.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { monotonicMs, monotonicNs } from "./clock";
import { flock, LOCK_EX, LOCK_NB, LOCK_SH, LOCK_UN } from "./libc";
import { mkdirs } from "./mkdirs";

/** Where each lock file's queue directory is made, named by the file's device and inode. */
export const QUEUE_ROOT = "/run/netkit-cni/lock-queues";

/** The head polls the lock file this often, backing off to the maximum behind a long holder. */
const HEAD_POLL_MIN_MS = 0.5;
const HEAD_POLL_MAX_MS = 2;
/** Those behind the head poll as their place in the queue warrants, within these bounds. */
const WAIT_POLL_MIN_MS = 0.5;
const WAIT_POLL_MAX_MS = 50;
/** The one right behind the head polls at least this often. */
const NEXT_POLL_MAX_MS = 1;
/** The nice value of a holder: every waiter waits for its CPU time. */
const HOLDER_PRIORITY = os.constants.priority.PRIORITY_HIGH;
/** Attempts at making a ticket before waiting unqueued instead. */
const TICKET_ATTEMPTS = 8;

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

/** The queue directory of a lock file (`st`: its fstat or stat): one per file, by its device
 * and inode, wherever it is found from. */
export const queueDirOf = (st: fs.Stats, queueRoot = QUEUE_ROOT) => path.join(queueRoot, `${st.dev}-${st.ino}`);

/** `ms` give or take a quarter, so that waiters do not poll in step. */
const jittered = (ms: number) => ms * (0.75 + Math.random() / 2);

const errnoCode = (e: unknown) => (e as NodeJS.ErrnoException | undefined)?.code;

/**
 * Runs `fn` holding an exclusive lock on `lockPath` (created 0600 if missing). Throws
 * LockTimeoutError when the lock is not ours within `timeoutMs`. `queueRoot` is for tests.
 */
export function withFileLock<T>(lockPath: string, timeoutMs: number, fn: () => T, queueRoot = QUEUE_ROOT): T {
  const release = hold(lockPath, timeoutMs, queueRoot);
  try {
    return fn();
  } finally {
    release();
  }
}

/**
 * `withFileLock` for a critical section written with our netlink calls, which are
 * synchronous underneath but async in signature: nothing else runs on the thread
 * meanwhile, so the hold is as short as the synchronous form's.
 */
export async function withFileLockAsync<T>(
  lockPath: string,
  timeoutMs: number,
  fn: () => Promise<T>,
  queueRoot = QUEUE_ROOT,
): Promise<T> {
  const release = hold(lockPath, timeoutMs, queueRoot);
  try {
    return await fn();
  } finally {
    release();
  }
}

/** Takes the lock and returns its release. */
function hold(lockPath: string, timeoutMs: number, queueRoot: string): () => void {
  // Read-only is enough for flock, and is how host-local opens its lock file.
  const fd = fs.openSync(lockPath, fs.constants.O_RDONLY | fs.constants.O_CREAT, 0o600);
  let ticket: Ticket | undefined;
  try {
    ticket = acquire(fd, lockPath, timeoutMs, queueRoot);
  } catch (e) {
    fs.closeSync(fd);
    throw e;
  }
  const restore = raisePriority();
  return () => {
    try {
      // Let go first, then leave the queue: the one behind us finds the lock free.
      flock(fd, LOCK_UN);
      ticket?.leave();
      restore();
    } finally {
      fs.closeSync(fd);
    }
  };
}

/**
 * Runs the holder at HOLDER_PRIORITY until the returned function is called, unless it runs
 * at that or higher already or may not raise it (not root). Linux nice values are per
 * thread; the lock is held by the main thread, which is the one calling this.
 */
function raisePriority(): () => void {
  let before: number;
  try {
    before = os.getPriority();
    if (before <= HOLDER_PRIORITY) return () => {};
    os.setPriority(HOLDER_PRIORITY);
  } catch {
    return () => {};
  }
  return () => os.setPriority(before);
}

/** Takes the lock, returning the ticket to give up after the release (none if unqueued). */
function acquire(fd: number, lockPath: string, timeoutMs: number, queueRoot: string): Ticket | undefined {
  const deadline = monotonicMs() + timeoutMs;
  const queueDir = queueDirOf(fs.fstatSync(fd), queueRoot);
  // Nobody waiting: a free lock is ours at once, as with a plain flock.
  if (Ticket.queueEmpty(queueDir) && flock(fd, LOCK_EX | LOCK_NB)) return undefined;
  const ticket = Ticket.take(queueDir);
  try {
    waitForTurn(fd, ticket, deadline, () => new LockTimeoutError(lockPath, timeoutMs));
    return ticket;
  } catch (e) {
    ticket?.leave();
    throw e;
  }
}

function waitForTurn(fd: number, ticket: Ticket | undefined, deadline: number, timeout: () => Error): void {
  const queuedAt = monotonicMs();
  let firstPlace: number | undefined;
  let headPoll = HEAD_POLL_MIN_MS;
  for (;;) {
    const ahead = ticket?.ahead() ?? [];
    const next = ahead.at(-1);
    let pause: number;
    if (next === undefined) {
      if (flock(fd, LOCK_EX | LOCK_NB)) return;
      pause = headPoll;
      headPoll = Math.min(headPoll * 2, HEAD_POLL_MAX_MS);
    } else if (ticket?.isGone(next)) {
      continue; // the one ahead just left or had crashed: look again at once
    } else {
      // Half the wait this place should still take, judged by how fast the queue has
      // moved so far: a few polls from the back, more as the front nears, and about every
      // millisecond once next, so that a turn is handed on promptly.
      firstPlace ??= ahead.length;
      const waited = monotonicMs() - queuedAt;
      const moved = firstPlace - ahead.length;
      const perTurn = moved > 0 ? waited / moved : Math.max(waited, WAIT_POLL_MIN_MS);
      const most = ahead.length === 1 ? NEXT_POLL_MAX_MS : WAIT_POLL_MAX_MS;
      pause = Math.min(Math.max((ahead.length * perTurn) / 2, WAIT_POLL_MIN_MS), most);
    }
    const left = deadline - monotonicMs();
    if (left <= 0) throw timeout();
    sleepSync(Math.min(jittered(pause), left));
  }
}

/**
 * A place in a lock's queue: the file `<arrival ns, 20 digits>.<pid>.<random>` in the
 * queue directory, flock'ed by its owner while it waits for or holds the lock. Names sort
 * in order of arrival.
 */
class Ticket {
  private constructor(
    private readonly dir: string,
    private readonly name: string,
    private readonly fd: number,
  ) {}

  static queueEmpty(dir: string): boolean {
    try {
      return fs.readdirSync(dir).length === 0;
    } catch {
      return true; // no queue yet, or none that can be read: nobody waits in it
    }
  }

  /** A new ticket at the back of the queue; undefined when the queue cannot be used. */
  static take(dir: string): Ticket | undefined {
    const arrived = monotonicNs().toString().padStart(20, "0");
    for (let attempt = 0; attempt < TICKET_ATTEMPTS; attempt++) {
      const name = `${arrived}.${process.pid}.${Buffer.from(crypto.getRandomValues(new Uint8Array(4))).toString("hex")}`;
      const file = path.join(dir, name);
      let fd: number;
      try {
        mkdirs(dir, 0o700);
        fd = fs.openSync(file, "wx", 0o600);
      } catch (e) {
        // A leaver removed the empty directory between our mkdir and open: make it again.
        if (errnoCode(e) === "ENOENT") continue;
        return undefined;
      }
      // Until it is locked, a contender behind it may take it for a crashed one's and
      // remove it; then take another (under another name, which that one cannot remove).
      let placed = false;
      try {
        placed = flock(fd, LOCK_EX | LOCK_NB) && fs.fstatSync(fd).nlink > 0;
      } finally {
        if (!placed) {
          fs.rmSync(file, { force: true });
          fs.closeSync(fd);
        }
      }
      if (placed) return new Ticket(dir, name, fd);
    }
    return undefined;
  }

  /** The tickets ahead of this one, first first. */
  ahead(): string[] {
    return fs
      .readdirSync(this.dir)
      .filter((n) => n < this.name)
      .sort();
  }

  /**
   * Whether the ticket `name` is out of the queue: it left, or its owner died, in which
   * case the ticket is removed here. A held ticket is there.
   */
  isGone(name: string): boolean {
    const file = path.join(this.dir, name);
    let fd: number;
    try {
      fd = fs.openSync(file, "r");
    } catch (e) {
      if (errnoCode(e) === "ENOENT") return true;
      throw e;
    }
    try {
      if (!flock(fd, LOCK_SH | LOCK_NB)) return false;
      fs.rmSync(file, { force: true });
      return true;
    } finally {
      fs.closeSync(fd);
    }
  }

  leave(): void {
    fs.rmSync(path.join(this.dir, this.name), { force: true });
    fs.closeSync(this.fd);
    try {
      fs.rmdirSync(this.dir);
    } catch {
      // others are queued (ENOTEMPTY), or the last of them removed it already
    }
  }
}
