/**
 * The node's WireGuard key (src/agent/wireguard/keys.ts): X25519 as RFC 7748 defines it
 * (its test vector), made once with mode 0600 and read back after, never replaced when
 * the file holds something else.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { KEY_FILE, loadOrCreateKey, publicKeyOf } from "../../src/agent/wireguard/keys";

const dirs: string[] = [];
const tempDir = () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), "nkt-wgkey-"));
  dirs.push(d);
  return path.join(d, "agent");
};
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

const hex64 = (hex: string) => Buffer.from(hex, "hex").toString("base64");

describe("the node's WireGuard key", () => {
  it("derives the public key as RFC 7748 section 6.1 does (Alice's key pair)", () => {
    const alicePrivate = hex64("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
    const alicePublic = hex64("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
    expect(publicKeyOf(alicePrivate)).toBe(alicePublic);
  });

  it("is made once, 0600, and read back unchanged by the next start", () => {
    const dir = tempDir();
    const first = loadOrCreateKey(dir);
    expect(first.created).toBe(true);
    expect(fs.statSync(path.join(dir, KEY_FILE)).mode & 0o777).toBe(0o600);
    expect(Buffer.from(first.privateKey, "base64").length).toBe(32);
    expect(publicKeyOf(first.privateKey)).toBe(first.publicKey);
    const again = loadOrCreateKey(dir);
    expect(again).toEqual({ ...first, created: false });
    expect(fs.readdirSync(dir)).toEqual([KEY_FILE]);
  });

  it("a deleted file is a new key (rotation); a file that is no key is an error, kept", () => {
    const dir = tempDir();
    const first = loadOrCreateKey(dir);
    fs.rmSync(path.join(dir, KEY_FILE));
    const second = loadOrCreateKey(dir);
    expect(second.publicKey).not.toBe(first.publicKey);
    fs.writeFileSync(path.join(dir, KEY_FILE), "garbage\n", { mode: 0o644 });
    expect(() => loadOrCreateKey(dir)).toThrow(/holds no WireGuard private key/);
    expect(fs.readFileSync(path.join(dir, KEY_FILE), "utf8")).toBe("garbage\n");
  });
});
