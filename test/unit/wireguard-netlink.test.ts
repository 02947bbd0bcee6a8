/**
 * WireGuard's generic netlink messages (src/netlink/wireguard.ts) against the uapi's
 * layouts: a SET_DEVICE read back by the GET_DEVICE parser (the kernel answers with the
 * same nesting), sockaddrs byte for byte, peers split across dump messages, and keys
 * that are not 32 bytes of base64 refused before anything is sent.
 */
import { describe, expect, it } from "vitest";
import { attr, attrNested } from "../../src/netlink/attrs";
import { keyBytes, parseDevice, setDeviceAttrs, sockaddr } from "../../src/netlink/wireguard";

const KEY_A = Buffer.alloc(32, 1).toString("base64");
const KEY_B = Buffer.alloc(32, 2).toString("base64");

describe("WireGuard's generic netlink family", () => {
  it("encodes a device's peers as the dump decodes them: endpoint, allowed IPs of both families", () => {
    const message = setDeviceAttrs({
      ifname: "netkit-wg0",
      listenPort: 51871,
      peers: [
        {
          publicKey: KEY_A,
          endpoint: { address: "10.220.0.2", port: 51871 },
          allowedIps: ["10.221.2.0/24", "fd21:2::/64", "10.220.0.2/32"],
        },
        { publicKey: KEY_B, endpoint: { address: "fd20::3", port: 51871 }, allowedIps: [] },
      ],
    });
    const device = parseDevice([message]);
    expect(device.ifname).toBe("netkit-wg0");
    expect(device.listenPort).toBe(51871);
    expect(device.peers.map((p) => [p.publicKey, p.endpoint, p.allowedIps])).toEqual([
      [KEY_A, { address: "10.220.0.2", port: 51871 }, ["10.221.2.0/24", "fd21:2::/64", "10.220.0.2/32"]],
      [KEY_B, { address: "fd20::3", port: 51871 }, []],
    ]);
  });

  it("lays out sockaddr_in and sockaddr_in6: family in host order, port in network order", () => {
    expect(sockaddr({ address: "10.0.0.1", port: 0x1234 }).toString("hex")).toBe(
      "020012340a000001" + "0000000000000000",
    );
    const v6 = sockaddr({ address: "fd00::1", port: 51871 });
    expect(v6.length).toBe(28);
    expect(v6.readUInt16LE(0)).toBe(10);
    expect(v6.readUInt16BE(2)).toBe(51871);
    expect(v6.subarray(8, 24).toString("hex")).toBe("fd000000000000000000000000000001");
  });

  it("asks for a peer's removal with its key and WGPEER_F_REMOVE_ME alone", () => {
    const message = setDeviceAttrs({ ifname: "wg", peers: [{ publicKey: KEY_A, remove: true }] });
    // ifname "wg\0" (8 bytes), then PEERS (8) > peer (4) > key (36) and flags (8: u32 1).
    const flags = message.subarray(message.length - 8);
    expect(flags.readUInt16LE(2)).toBe(3); // WGPEER_A_FLAGS
    expect(flags.readUInt32LE(4)).toBe(1); // WGPEER_F_REMOVE_ME
    expect(parseDevice([message]).peers[0]?.allowedIps).toEqual([]);
  });

  it("merges a peer continued in the next message, and reads handshakes and byte counts", () => {
    const u64 = (n: bigint) => {
      const b = Buffer.alloc(8);
      b.writeBigUInt64LE(n);
      return b;
    };
    const handshake = Buffer.alloc(16);
    handshake.writeBigInt64LE(1_700_000_000n);
    const first = setDeviceAttrs({ ifname: "wg", peers: [{ publicKey: KEY_A, allowedIps: ["10.1.0.0/16"] }] });
    const stats = attrNested(8, [
      attrNested(0, [attr(1, keyBytes(KEY_A)), attr(6, handshake), attr(7, u64(1234n)), attr(8, u64(99n))]),
    ]);
    const second = setDeviceAttrs({ ifname: "wg", peers: [{ publicKey: KEY_A, allowedIps: ["fd01::/64"] }] });
    const [peer, ...rest] = parseDevice([first, stats, second]).peers;
    expect(rest).toEqual([]);
    expect(peer?.allowedIps).toEqual(["10.1.0.0/16", "fd01::/64"]);
    expect(peer?.lastHandshake).toBe(1_700_000_000);
    expect([peer?.rxBytes, peer?.txBytes]).toEqual([1234n, 99n]);
  });

  it("refuses a key that is not 32 bytes of canonical base64", () => {
    expect(() => keyBytes(Buffer.alloc(31).toString("base64"))).toThrow(/not a WireGuard key/);
    expect(() => keyBytes("not base64 at all")).toThrow(/not a WireGuard key/);
    expect(keyBytes(KEY_A).length).toBe(32);
  });
});
