/**
 * SHA-256, for the names and identities derived from hashes (device names, lock files,
 * build names). Under Bun it uses Bun's native hasher: loading node:crypto there pulls in
 * Node's stream machinery, several milliseconds of every start. Under Node, node:crypto,
 * loaded on first use. Both give the same digest; names made by one runtime's executable
 * are found by the other's.
 */
import * as fs from "node:fs";

interface Hasher {
  update(data: string | Uint8Array): unknown;
  digest(): Uint8Array;
}

interface BunGlobal {
  CryptoHasher: new (algorithm: "sha256") => Hasher;
}

function newHasher(): Hasher {
  const bun = (globalThis as { Bun?: BunGlobal }).Bun;
  if (bun !== undefined) return new bun.CryptoHasher("sha256");
  const { createHash }: typeof import("node:crypto") = require("node:crypto");
  return createHash("sha256");
}

/** The digest of the parts, concatenated (strings as UTF-8). */
export function sha256(...parts: (string | Uint8Array)[]): Buffer {
  const h = newHasher();
  for (const p of parts) h.update(p);
  const d = h.digest();
  return Buffer.from(d.buffer, d.byteOffset, d.byteLength);
}

/** The digest as lowercase hex, cut to `digits` if given. */
export function sha256Hex(parts: (string | Uint8Array)[], digits?: number): string {
  const hex = sha256(...parts).toString("hex");
  return digits === undefined ? hex : hex.slice(0, digits);
}

/**
 * The digest of a file as lowercase hex, read a chunk at a time: an executable of a
 * hundred megabytes is hashed in a megabyte of memory.
 */
export function sha256FileHex(file: string, chunkBytes = 1 << 20): string {
  const h = newHasher();
  const buf = Buffer.alloc(chunkBytes);
  const fd = fs.openSync(file, "r");
  try {
    for (let n = fs.readSync(fd, buf); n > 0; n = fs.readSync(fd, buf)) h.update(buf.subarray(0, n));
  } finally {
    fs.closeSync(fd);
  }
  return Buffer.from(h.digest()).toString("hex");
}
