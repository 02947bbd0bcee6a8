/**
 * The on-disk reservation store, in host-local's layout so an admin can switch between
 * the two plugins (and both can run at once: they take the same flock):
 *   <storeDir>/<ip>                  one file per reserved address: "<containerID>\r\n<ifname>"
 *                                    (older host-local wrote only "<containerID>")
 *   <storeDir>/last_reserved_ip.<N>  the address last reserved from range set N
 *   <storeDir>/lock                  flock(2)ed exclusively around every change
 * Owns the files and the lock; knows nothing about ranges or allocation policy.
 * Never writes a file in place (a process killed mid-write must not leave a half-written
 * reservation: the content is written aside and linked in whole), never builds a path
 * from a container ID, never creates subdirectories (host-local walks the whole tree),
 * and never changes anything without holding the lock.
 *
 * Every ADD and DEL on the node waits for that lock, so what happens under it is short:
 * - No fsync. A killed process leaves a reservation whole or absent either way; only a
 *   crash of the whole node can leave one empty or lose it, and the containers such files
 *   name died in that crash: the runtime's DEL and GC free their addresses (an empty file
 *   names nobody, so GC frees it). host-local does not sync either.
 * - No reading of every reservation where a file or two will do: reserving tries
 *   addresses by linking them exclusively (taken ones fail with EEXIST), and known
 *   addresses are read one file each. Finding what an attachment holds without knowing
 *   its addresses does read every file (the format has no index); the verbs do that
 *   before taking the lock (`IpStore.scan`) and confirm what they found under it.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { canonicalAddress } from "../cni/address";
import { CniError, ErrorCode } from "../cni/errors";
import { LockTimeoutError, withFileLock } from "../sys/file-lock";
import { mkdirs } from "../sys/mkdirs";

/** host-local's separator between container ID and ifname, kept for compatibility. */
export const LINE_BREAK = "\r\n";
export const LAST_RESERVED_PREFIX = "last_reserved_ip.";
export const LOCK_FILE = "lock";
/** Files starting with this are ours, mid-write; only ever present while the lock is held. */
const TEMP_PREFIX = ".netkit-cni-tmp.";
/** The one temp file: a single writer at a time holds the lock. */
const TEMP_FILE = `${TEMP_PREFIX}pending`;

// Only root (the container runtime) reads or writes reservations; they name every
// container on the node, so nobody else needs to see them. host-local runs as root too,
// so it still reads and removes what we write.
const DIR_MODE = 0o700;
const FILE_MODE = 0o600;

/** Who holds an address. `ifname` is undefined for legacy files that name only the container. */
export interface Owner {
  containerId: string;
  ifname: string | undefined;
}

export interface Reservation {
  /** Canonical text form of the address (the file name host-local would use). */
  ip: string;
  /** The file's name: `ip`, unless someone wrote the address otherwise. */
  file: string;
  owner: Owner;
}

export function ownerContent(containerId: string, ifname: string): string {
  return `${containerId.trim()}${LINE_BREAK}${ifname}`;
}

export function parseOwner(content: string): Owner {
  const at = content.indexOf(LINE_BREAK);
  if (at === -1) return { containerId: content.trim(), ifname: undefined };
  return { containerId: content.slice(0, at).trim(), ifname: content.slice(at + LINE_BREAK.length) };
}

const ioError = (what: string, e: unknown) =>
  new CniError(ErrorCode.IoFailure, `IPAM store: ${what}: ${(e as Error).message}`);

function errnoCode(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException | undefined)?.code;
}

/** The operations that need the lock; only reachable through `IpStore.withLock`. */
export interface LockedStore {
  readonly dir: string;
  /** Every reservation file, keyed by canonical address. Reads them all. */
  reservations(): Map<string, Reservation>;
  /** The reservation in `file` (by default the one named `ip`); undefined when there is none. */
  reservation(ip: string, file?: string): Reservation | undefined;
  /** The reserved addresses, by file name alone. */
  addresses(): Set<string>;
  /**
   * Reserves the first address of `ips` that is free for the attachment and returns it;
   * undefined when every one was taken. Each is tried by linking in a file that already
   * holds the whole content: link(2) fails if the address is taken.
   */
  reserveFirst(ips: Iterable<string>, containerId: string, ifname: string): string | undefined;
  /** Removes the reservation file of `ip` (or the given file) if it is still there. */
  remove(ip: string, file?: string): void;
  lastReserved(rangeSet: number): string | undefined;
  setLastReserved(rangeSet: number, ip: string): void;
  /** Removes temp files that processes killed mid-write left behind. */
  removeTemps(): void;
}

export class IpStore {
  constructor(
    readonly dir: string,
    private readonly lockTimeoutMs: number,
  ) {}

  get lockPath(): string {
    return path.join(this.dir, LOCK_FILE);
  }

  exists(): boolean {
    return fs.existsSync(this.dir);
  }

  /** The reserved addresses by file name alone; safe without the lock (read-only snapshot). */
  reservedAddresses(): Set<string> {
    const out = new Set<string>();
    for (const name of this.listNames()) {
      // Undefined for the files that are not reservations: lock, last_reserved_ip.N.
      const ip = canonicalAddress(name);
      if (ip) out.add(ip);
    }
    return out;
  }

  /**
   * Every reservation, read without the lock: a snapshot in which a reservation of ours
   * is complete if present (never written in place), while a file host-local is writing
   * may read as empty. Anything found here is confirmed under the lock before it is used.
   */
  scan(): Map<string, Reservation> {
    return readReservations(this.dir, this.listNames());
  }

  /** The reservation in `file` (by default the one named `ip`), read without the lock, like `scan`. */
  read(ip: string, file = ip): Reservation | undefined {
    return readReservation(this.dir, ip, file);
  }

  /**
   * Runs `fn` holding the store's exclusive lock, creating the store directory first.
   * Waits for the lock up to the timeout, then fails with "try again later" (code 11):
   * another ADD/DEL is slow, not broken, and the runtime retries.
   */
  withLock<T>(fn: (store: LockedStore) => T): T {
    try {
      mkdirs(this.dir, DIR_MODE);
    } catch (e) {
      throw ioError(`cannot create ${this.dir}`, e);
    }
    try {
      return withFileLock(this.lockPath, this.lockTimeoutMs, () => fn(new Locked(this)));
    } catch (e) {
      if (e instanceof LockTimeoutError) {
        throw new CniError(ErrorCode.TryAgainLater, `IPAM store is busy: ${e.message}; try again later`);
      }
      throw e;
    }
  }

  listNames(): string[] {
    try {
      return fs.readdirSync(this.dir);
    } catch (e) {
      if (errnoCode(e) === "ENOENT") return [];
      throw ioError(`cannot read ${this.dir}`, e);
    }
  }
}

/** The reservation in `dir`/`file` for address `ip`; undefined when there is no such file. */
function readReservation(dir: string, ip: string, file: string): Reservation | undefined {
  const full = path.join(dir, file);
  let content: string;
  try {
    // Only regular files: a FIFO named like an address would block the read forever.
    if (!fs.statSync(full).isFile()) return undefined;
    content = fs.readFileSync(full, "utf8");
  } catch (e) {
    if (errnoCode(e) === "ENOENT") return undefined;
    throw ioError(`cannot read ${full}`, e);
  }
  return { ip, file, owner: parseOwner(content) };
}

function readReservations(dir: string, names: string[]): Map<string, Reservation> {
  const out = new Map<string, Reservation>();
  for (const name of names) {
    const ip = canonicalAddress(name);
    const r = ip === undefined ? undefined : readReservation(dir, ip, name);
    if (r) out.set(r.ip, r);
  }
  return out;
}

class Locked implements LockedStore {
  readonly dir: string;

  constructor(private readonly store: IpStore) {
    this.dir = store.dir;
  }

  reservations(): Map<string, Reservation> {
    return readReservations(this.dir, this.store.listNames());
  }

  reservation(ip: string, file = ip): Reservation | undefined {
    return readReservation(this.dir, ip, file);
  }

  addresses(): Set<string> {
    return this.store.reservedAddresses();
  }

  reserveFirst(ips: Iterable<string>, containerId: string, ifname: string): string | undefined {
    const tmp = this.writeTemp(ownerContent(containerId, ifname));
    try {
      for (const ip of ips) {
        const final = path.join(this.dir, ip);
        try {
          fs.linkSync(tmp, final);
          return ip;
        } catch (e) {
          if (errnoCode(e) !== "EEXIST") throw ioError(`cannot reserve ${ip} (${final})`, e);
        }
      }
      return undefined;
    } finally {
      fs.rmSync(tmp, { force: true });
    }
  }

  remove(ip: string, file = ip): void {
    const full = path.join(this.dir, file);
    try {
      fs.unlinkSync(full);
    } catch (e) {
      if (errnoCode(e) !== "ENOENT") throw ioError(`cannot release ${ip} (${full})`, e);
    }
  }

  lastReserved(rangeSet: number): string | undefined {
    const file = path.join(this.dir, `${LAST_RESERVED_PREFIX}${rangeSet}`);
    try {
      // Garbage here only costs round-robin order once, as in host-local: ignore it.
      return canonicalAddress(fs.readFileSync(file, "utf8").trim());
    } catch (e) {
      if (errnoCode(e) === "ENOENT") return undefined;
      throw ioError(`cannot read ${file}`, e);
    }
  }

  setLastReserved(rangeSet: number, ip: string): void {
    const file = path.join(this.dir, `${LAST_RESERVED_PREFIX}${rangeSet}`);
    const tmp = this.writeTemp(ip);
    try {
      fs.renameSync(tmp, file);
    } catch (e) {
      fs.rmSync(tmp, { force: true });
      throw ioError(`cannot write ${file}`, e);
    }
  }

  removeTemps(): void {
    for (const name of this.store.listNames()) {
      if (name.startsWith(TEMP_PREFIX)) fs.rmSync(path.join(this.dir, name), { force: true });
    }
  }

  /**
   * Writes `content` to the temp file, made afresh: one a killed writer left behind may
   * still be linked to a reservation, so it is unlinked, never truncated.
   */
  private writeTemp(content: string): string {
    const tmp = path.join(this.dir, TEMP_FILE);
    try {
      fs.rmSync(tmp, { force: true });
      const fd = fs.openSync(tmp, "wx", FILE_MODE);
      try {
        fs.writeSync(fd, content);
      } finally {
        fs.closeSync(fd);
      }
    } catch (e) {
      fs.rmSync(tmp, { force: true });
      throw ioError(`cannot write ${tmp}`, e);
    }
    return tmp;
  }
}
