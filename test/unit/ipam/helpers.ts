/** Shared by the IPAM tests: throwaway data directories and configs built from plain objects. */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { parseAddressOrCidr } from "../../../src/cni/address";
import { CniError } from "../../../src/cni/errors";
import { type EmbeddedIpamConfig, parseIpamConfig } from "../../../src/ipam/index";
import { IpStore } from "../../../src/ipam/store";

export const NETWORK = "testnet";

const made: string[] = [];

/** A fresh data directory, removed by `cleanupDirs` (call it from afterEach). */
export function tempDataDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "netkit-ipam-"));
  made.push(dir);
  return dir;
}

export function cleanupDirs(): void {
  for (const dir of made.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
}

export function config(ipam: Record<string, unknown>, lockTimeoutMs = 2_000): EmbeddedIpamConfig {
  return parseIpamConfig({ type: "netkit-cni", ...ipam }, NETWORK, { lockTimeoutMs });
}

/** The CniError `fn` throws (fails the test when it throws something else or nothing). */
export function cniErrorOf(fn: () => unknown): CniError {
  try {
    fn();
  } catch (e) {
    if (e instanceof CniError) return e;
    throw e;
  }
  throw new Error("expected a CniError, nothing was thrown");
}

/** The address part of each "ip/len" in a result. */
export const addressesOf = (ips: { address: string }[]) => ips.map((ip) => ip.address.split("/")[0]);

export interface Allocation {
  ip: string;
  containerId: string;
  /** Undefined for legacy reservations that recorded only the container. */
  ifname: string | undefined;
}

/** Every reservation in the store, ordered by address. */
export function listAllocations(cfg: EmbeddedIpamConfig): Allocation[] {
  const store = new IpStore(cfg.storeDir, cfg.lockTimeoutMs);
  if (!store.exists()) return [];
  const all = store.withLock((locked) => [...locked.reservations().values()]);
  return all
    .map((r) => ({ ip: r.ip, containerId: r.owner.containerId, ifname: r.owner.ifname }))
    .sort((a, b) => compareIps(a.ip, b.ip));
}

function compareIps(a: string, b: string): number {
  const x = parseAddressOrCidr(a);
  const y = parseAddressOrCidr(b);
  if (!x || !y) return a.localeCompare(b);
  if (x.family !== y.family) return x.family - y.family;
  return x.value < y.value ? -1 : x.value > y.value ? 1 : 0;
}
