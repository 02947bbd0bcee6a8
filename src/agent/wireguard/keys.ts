/**
 * The node's WireGuard key: an X25519 private key made once (node:crypto, the same
 * under Node and Bun) and kept in the agent's data directory, mode 0600, written through
 * a temporary file and a rename so a crash never leaves half a key. Only the public half
 * leaves the node (the Node annotation). Deleting the file and restarting the agent
 * rotates it: the next start makes a new one and publishes it.
 */
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";

export const KEY_FILE = "wireguard.key";

/** PKCS#8's fixed prefix for a raw X25519 private key (RFC 8410): what node:crypto imports. */
const PKCS8_X25519 = Buffer.from("302e020100300506032b656e04220420", "hex");

export interface NodeKey {
  /** base64, as WireGuard writes keys. */
  privateKey: string;
  publicKey: string;
  /** Made by this start (no file was there). */
  created: boolean;
}

/** The public key of a raw 32-byte X25519 private key (base64 in, base64 out). */
export function publicKeyOf(privateKey: string): string {
  const raw = Buffer.from(privateKey, "base64");
  if (raw.length !== 32) throw new Error("a WireGuard private key is 32 bytes");
  const key = crypto.createPrivateKey({ key: Buffer.concat([PKCS8_X25519, raw]), format: "der", type: "pkcs8" });
  const jwk = crypto.createPublicKey(key).export({ format: "jwk" });
  return Buffer.from(String(jwk.x), "base64url").toString("base64");
}

function generate(): string {
  const { privateKey } = crypto.generateKeyPairSync("x25519");
  return Buffer.from(String(privateKey.export({ format: "jwk" }).d), "base64url").toString("base64");
}

/** The key in `dir`, made first when there is none. A file that is not a key is an error, never replaced. */
export function loadOrCreateKey(dir: string): NodeKey {
  const file = path.join(dir, KEY_FILE);
  let text: string | undefined;
  try {
    text = fs.readFileSync(file, "utf8").trim();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
  }
  if (text !== undefined) {
    if ((fs.statSync(file).mode & 0o077) !== 0) fs.chmodSync(file, 0o600);
    try {
      return { privateKey: text, publicKey: publicKeyOf(text), created: false };
    } catch {
      throw new Error(`${file} holds no WireGuard private key (delete it to make a new one)`);
    }
  }
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const privateKey = generate();
  const temp = path.join(dir, `.${KEY_FILE}.${process.pid}`);
  const fd = fs.openSync(temp, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
  try {
    fs.writeSync(fd, `${privateKey}\n`);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(temp, file);
  return { privateKey, publicKey: publicKeyOf(privateKey), created: true };
}
