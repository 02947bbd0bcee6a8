/** Shared by the IPAM tests: throwaway data directories and configs built from plain objects. */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { CniError } from "../../../src/cni/errors";
import { type EmbeddedIpamConfig, parseIpamConfig } from "../../../src/ipam/index";

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
