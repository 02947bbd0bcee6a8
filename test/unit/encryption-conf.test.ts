/**
 * How --encryption=wireguard reaches the plugin: the agent's conflist names it (and the
 * pods' MTU), the config reads it, and ADD waits (code 11, try again later) until the
 * agent's WireGuard device is ready, so no pod talks before its traffic is encrypted.
 */
import { describe, expect, it } from "vitest";
import { installOptionsFor, parseAgentOptions } from "../../src/agent/options";
import { parseNetConf } from "../../src/cni/config";
import { CniError } from "../../src/cni/errors";
import { WIREGUARD_ROOM } from "../../src/datapath/netkit-pair";
import { requireEncryption, WIREGUARD_DEVICE } from "../../src/datapath/uplink";
import { generateConflist } from "../../src/install/install";
import { parseAttrs } from "../../src/netlink/attrs";
import { IFLA_NETKIT_HEADROOM, IFLA_NETKIT_TAILROOM, netkitInfoData } from "../../src/netlink/netkit";

const uplink = { name: "eth0", index: 2 };

describe("encryption in the conflist and at ADD", () => {
  it("the agent's conflist names it and the pods' MTU; the plugin reads it back", () => {
    const opts = parseAgentOptions(["--cluster-cidr=10.40.0.0/16", "--encryption=wireguard"], {}, "node-a");
    expect(opts.encryptionStrict).toBe(true);
    opts.podMtu = 1420;
    const conflist = generateConflist(installOptionsFor(opts, ["10.40.1.0/24"]).generate) as {
      name: string;
      plugins: Record<string, unknown>[];
    };
    expect(conflist.plugins[0]).toMatchObject({ encryption: "wireguard", mtu: 1420 });
    const conf = parseNetConf(JSON.stringify({ ...conflist.plugins[0], cniVersion: "1.1.0", name: conflist.name }));
    expect(conf.encryption).toBe("wireguard");
    expect(parseNetConf(JSON.stringify({ cniVersion: "1.1.0", name: "n", type: "netkit-cni" })).encryption).toBe(
      "none",
    );
    expect(() =>
      parseNetConf(JSON.stringify({ cniVersion: "1.1.0", name: "n", type: "netkit-cni", encryption: "ipsec" })),
    ).toThrow(/"encryption" must be one of "none", "wireguard"/);
    expect(() => parseAgentOptions(["--cluster-cidr=10.40.0.0/16", "--encryption=ipsec"], {}, "a")).toThrow(
      /--encryption must be none or wireguard/,
    );
  });

  it("ADD waits for the device the agent made ready, and only where the network encrypts", () => {
    const code = (f: () => void) => {
      try {
        f();
        return 0;
      } catch (e) {
        return (e as CniError).code;
      }
    };
    const device = (ready: boolean) => ({ ...uplink, wireguard: { name: WIREGUARD_DEVICE, index: 9, ready } });
    expect(code(() => requireEncryption("wireguard", undefined))).toBe(11);
    expect(code(() => requireEncryption("wireguard", uplink))).toBe(11);
    expect(code(() => requireEncryption("wireguard", device(false)))).toBe(11);
    expect(code(() => requireEncryption("wireguard", device(true)))).toBe(0);
    expect(code(() => requireEncryption("none", uplink))).toBe(0);
    expect(() => requireEncryption("wireguard", uplink)).toThrow(CniError);
  });

  it("asks netkit for WireGuard's room as u16 attributes 8 and 9, and only when asked", () => {
    const opts = { mode: "l3", primaryPolicy: "pass", peerPolicy: "drop", scrub: true } as const;
    const room = parseAttrs(Buffer.concat(netkitInfoData({ ...opts, room: WIREGUARD_ROOM })));
    expect(room.get(IFLA_NETKIT_HEADROOM)?.readUInt16LE(0)).toBe(128);
    expect(room.get(IFLA_NETKIT_TAILROOM)?.readUInt16LE(0)).toBe(32);
    expect(room.get(IFLA_NETKIT_HEADROOM)?.length).toBe(2);
    const none = parseAttrs(Buffer.concat(netkitInfoData(opts)));
    expect([none.has(IFLA_NETKIT_HEADROOM), none.has(IFLA_NETKIT_TAILROOM)]).toEqual([false, false]);
  });
});
