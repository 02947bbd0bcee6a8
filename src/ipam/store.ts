/**
 * The on-disk reservation store, in host-local's layout so an admin can switch between
 * the two plugins (and both can run at once: they take the same flock):
 *   <storeDir>/<ip>                  one file per reserved address: "<containerID>\r\n<ifname>"
 *                                    (older host-local wrote only "<containerID>")
 *   <storeDir>/last_reserved_ip.<N>  the address last reserved from range set N
 *   <storeDir>/lock                  flock(2)ed exclusively around every change
 * Owns the files and the lock; knows nothing about ranges or allocation policy.
 * Never writes a file in place (a crash must not leave a half-written reservation), never
 * builds a path from a container ID, never creates subdirectories (host-local walks the
 * whole tree), and never changes anything without holding the lock.
 */
import { randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { CniError, ErrorCode } from "../cni/errors";
import { LockTimeoutError, withFileLock } from "../sys/file-lock";
import { mkdirs } from "../sys/mkdirs";
import { formatAddress, parseAddress } from "./ranges";

/** host-local's separator between container ID and ifname, kept for compatibility. */
export const LINE_BREAK = "\r\n";
export const LAST_RESERVED_PREFIX = "last_reserved_ip.";
export const LOCK_FILE = "lock";
/** Files starting with this are ours, mid-write; only ever present while the lock is held. */
const TEMP_PREFIX = ".netkit-cni-tmp.";

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
  /** Every reservation file, keyed by canonical address. */
  reservations(): Map<string, Reservation>;
  /** Creates the reservation file; false if the address is already taken. */
  reserve(ip: string, containerId: string, ifname: string): boolean;
  /** Removes the reservation file of `ip` if there is one. */
  remove(ip: string): void;
  lastReserved(rangeSet: number): string | undefined;
  setLastReserved(rangeSet: number, ip: string): void;
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
      const ip = canonicalName(name);
      if (ip) out.add(ip);
    }
    return out;
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
      return withFileLock(this.lockPath, this.lockTimeoutMs, () => {
        this.removeStaleTemps();
        return fn(new Locked(this));
      });
    } catch (e) {
      if (e instanceof LockTimeoutError) {
        throw new CniError(ErrorCode.TryAgainLater, `IPAM store is busy: ${e.message}; try again later`);
      }
      throw e;
    }
  }

  /** Temp files left by a process killed mid-write; nobody else writes while we hold the lock. */
  private removeStaleTemps(): void {
    for (const name of this.listNames()) {
      if (name.startsWith(TEMP_PREFIX)) fs.rmSync(path.join(this.dir, name), { force: true });
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

/** A file name that is an address, in canonical form; undefined for lock, last_reserved_ip.N, etc. */
function canonicalName(name: string): string | undefined {
  const addr = parseAddress(name);
  return addr ? formatAddress(addr.family, addr.value) : undefined;
}

class Locked implements LockedStore {
  readonly dir: string;
  /** Actual file name per canonical address (host-local's names are canonical, but be lenient). */
  private readonly fileOf = new Map<string, string>();

  constructor(private readonly store: IpStore) {
    this.dir = store.dir;
  }

  reservations(): Map<string, Reservation> {
    const out = new Map<string, Reservation>();
    for (const name of this.store.listNames()) {
      const ip = canonicalName(name);
      if (!ip) continue;
      const file = path.join(this.dir, name);
      let content: string;
      try {
        const st = fs.statSync(file);
        if (!st.isFile()) continue;
        content = fs.readFileSync(file, "utf8");
      } catch (e) {
        if (errnoCode(e) === "ENOENT") continue;
        throw ioError(`cannot read ${file}`, e);
      }
      this.fileOf.set(ip, name);
      out.set(ip, { ip, owner: parseOwner(content) });
    }
    return out;
  }

  reserve(ip: string, containerId: string, ifname: string): boolean {
    const final = path.join(this.dir, ip);
    // Write the whole content aside, then link it in: link(2) is atomic and fails with
    // EEXIST when the address is taken, so a reservation is exclusive and never partial.
    const tmp = this.writeTemp(ownerContent(containerId, ifname));
    try {
      fs.linkSync(tmp, final);
      this.fileOf.set(ip, ip);
      return true;
    } catch (e) {
      if (errnoCode(e) === "EEXIST") return false;
      throw ioError(`cannot reserve ${ip} (${final})`, e);
    } finally {
      fs.rmSync(tmp, { force: true });
    }
  }

  remove(ip: string): void {
    const file = path.join(this.dir, this.fileOf.get(ip) ?? ip);
    try {
      fs.unlinkSync(file);
    } catch (e) {
      if (errnoCode(e) !== "ENOENT") throw ioError(`cannot release ${ip} (${file})`, e);
    }
    this.fileOf.delete(ip);
  }

  lastReserved(rangeSet: number): string | undefined {
    const file = path.join(this.dir, `${LAST_RESERVED_PREFIX}${rangeSet}`);
    try {
      // Garbage here only costs round-robin order once, as in host-local: ignore it.
      const addr = parseAddress(fs.readFileSync(file, "utf8").trim());
      return addr ? formatAddress(addr.family, addr.value) : undefined;
    } catch (e) {
      if (errnoCode(e) === "ENOENT") return undefined;
      throw ioError(`cannot read ${file}`, e);
    }
  }

  setLastReserved(rangeSet: number, ip: string): void {
    const file = path.join(this.dir, `${LAST_RESERVED_PREFIX}${rangeSet}`);
    // No fsync: garbage or an older address here only costs round-robin order once.
    const tmp = this.writeTemp(ip, false);
    try {
      fs.renameSync(tmp, file);
    } catch (e) {
      fs.rmSync(tmp, { force: true });
      throw ioError(`cannot write ${file}`, e);
    }
  }

  private writeTemp(content: string, durable = true): string {
    const tmp = path.join(this.dir, `${TEMP_PREFIX}${process.pid}.${randomBytes(6).toString("hex")}`);
    try {
      const fd = fs.openSync(tmp, "wx", FILE_MODE);
      try {
        fs.writeSync(fd, content);
        // On disk before it becomes visible: a reservation must not turn up empty after a crash.
        if (durable) fs.fsyncSync(fd);
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
