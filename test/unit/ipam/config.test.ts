import { describe, expect, it } from "vitest";
import { AF_INET, AF_INET6, formatAddress } from "../../../src/cni/address";
import { ErrorCode } from "../../../src/cni/errors";
import { DEFAULT_DATA_DIR, parseIpamConfig } from "../../../src/ipam/index";
import { cniErrorOf } from "./helpers";

const parse = (ipam: Record<string, unknown>, name = "net1") => parseIpamConfig({ type: "netkit-cni", ...ipam }, name);

/** Each range as "start-end gw" text, per range set. */
function described(ipam: Record<string, unknown>): string[][] {
  return parse(ipam).rangeSets.map((set) =>
    set.ranges.map(
      (r) =>
        `${formatAddress(set.family, r.start)}-${formatAddress(set.family, r.end)} gw ${formatAddress(set.family, r.gateway)}`,
    ),
  );
}

describe("parseIpamConfig defaults", () => {
  it("fills in host-local's defaults for IPv4 and IPv6", () => {
    expect(described({ ranges: [[{ subnet: "10.1.0.0/24" }], [{ subnet: "fd00::/64" }]] })).toEqual([
      ["10.1.0.1-10.1.0.254 gw 10.1.0.1"],
      ["fd00::1-fd00::ffff:ffff:ffff:ffff gw fd00::1"],
    ]);
  });

  it("keeps explicit start, end and gateway", () => {
    expect(
      described({
        ranges: [[{ subnet: "10.1.0.0/24", rangeStart: "10.1.0.10", rangeEnd: "10.1.0.200", gateway: "10.1.0.254" }]],
      }),
    ).toEqual([["10.1.0.10-10.1.0.200 gw 10.1.0.254"]]);
  });

  it("accepts the legacy single range at the top level, before any ranges", () => {
    const cfg = parse({
      subnet: "10.2.0.0/16",
      rangeStart: "10.2.1.0",
      gateway: "10.2.0.1",
      ranges: [[{ subnet: "fd01::/120" }]],
    });
    expect(cfg.rangeSets.map((s) => s.family)).toEqual([AF_INET, AF_INET6]);
    expect(formatAddress(AF_INET, cfg.rangeSets[0]?.ranges[0]?.start ?? 0n)).toBe("10.2.1.0");
  });

  it("defaults dataDir to host-local's and puts the store under the network name", () => {
    const cfg = parse({ subnet: "10.1.0.0/24" });
    expect(cfg.dataDir).toBe(DEFAULT_DATA_DIR);
    expect(cfg.storeDir).toBe("/var/lib/cni/networks/net1");
    expect(parse({ subnet: "10.1.0.0/24", dataDir: "/run/ipam/" }).storeDir).toBe("/run/ipam/net1");
  });

  it("passes routes and dns through", () => {
    const cfg = parse({
      subnet: "10.1.0.0/24",
      routes: [{ dst: "0.0.0.0/0" }, { dst: "192.168.0.0/16", gw: "10.1.0.1" }],
      dns: { nameservers: ["10.96.0.10"], search: ["svc.cluster.local"] },
    });
    expect(cfg.routes).toEqual([{ dst: "0.0.0.0/0" }, { dst: "192.168.0.0/16", gw: "10.1.0.1" }]);
    expect(cfg.dns).toEqual({ nameservers: ["10.96.0.10"], search: ["svc.cluster.local"] });
  });

  it("accepts the smallest usable subnets, /30 and /126", () => {
    expect(described({ ranges: [[{ subnet: "10.1.0.0/30" }], [{ subnet: "fd00::/126" }]] })).toEqual([
      ["10.1.0.1-10.1.0.2 gw 10.1.0.1"],
      ["fd00::1-fd00::3 gw fd00::1"],
    ]);
  });
});

describe("parseIpamConfig rejects bad configuration with code 7 and names the field", () => {
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ["no ranges at all", {}, /"ipam.ranges" must hold at least one range set/],
    ["ranges not a list", { ranges: { subnet: "10.1.0.0/24" } }, /"ipam.ranges" must be a list of range sets/],
    ["an empty range set", { ranges: [[]] }, /"ipam.ranges\[0\]" must be a non-empty list/],
    ["a range that is not an object", { ranges: [["10.1.0.0/24"]] }, /"ipam.ranges\[0\]\[0\]" must be an object/],
    ["a missing subnet", { ranges: [[{ rangeStart: "10.1.0.2" }]] }, /"ipam.ranges\[0\]\[0\].subnet" is required/],
    [
      "a subnet that is not a CIDR",
      { ranges: [[{ subnet: "10.1.0.0" }]] },
      /"ipam.ranges\[0\]\[0\].subnet" must be a CIDR/,
    ],
    ["a subnet with a bad prefix", { ranges: [[{ subnet: "10.1.0.0/33" }]] }, /\.subnet" must be a CIDR/],
    [
      "a subnet with host bits set",
      { ranges: [[{ subnet: "10.1.0.5/24" }]] },
      /\.subnet" 10.1.0.5\/24 has host bits set; the network address is 10.1.0.0/,
    ],
    ["a /31", { ranges: [[{ subnet: "10.1.0.0/31" }]] }, /\.subnet" 10.1.0.0\/31 is too small to allocate from/],
    ["a /32", { subnet: "10.1.0.1/32" }, /"ipam.subnet" 10.1.0.1\/32 is too small/],
    ["a /127", { ranges: [[{ subnet: "fd00::/127" }]] }, /fd00::\/127 is too small/],
    ["a /128", { ranges: [[{ subnet: "fd00::1/128" }]] }, /fd00::1\/128 is too small/],
    [
      "rangeStart outside the subnet",
      { ranges: [[{ subnet: "10.1.0.0/24", rangeStart: "10.1.1.10" }]] },
      /"ipam.ranges\[0\]\[0\].rangeStart" 10.1.1.10 is not in subnet 10.1.0.0\/24/,
    ],
    [
      "rangeEnd outside the subnet",
      { ranges: [[{ subnet: "10.1.0.0/24", rangeEnd: "10.2.0.10" }]] },
      /\.rangeEnd" 10.2.0.10 is not in subnet 10.1.0.0\/24/,
    ],
    [
      "rangeStart after rangeEnd",
      { ranges: [[{ subnet: "10.1.0.0/24", rangeStart: "10.1.0.100", rangeEnd: "10.1.0.50" }]] },
      /\.rangeStart" 10.1.0.100 is after "ipam.ranges\[0\]\[0\].rangeEnd" 10.1.0.50/,
    ],
    [
      "rangeStart not an address",
      { subnet: "10.1.0.0/24", rangeStart: "ten" },
      /"ipam.rangeStart" must be an IP address/,
    ],
    [
      "rangeStart the network address",
      { subnet: "10.1.0.0/24", rangeStart: "10.1.0.0" },
      /"ipam.rangeStart" 10.1.0.0 is the network address/,
    ],
    [
      "rangeEnd the broadcast address",
      { subnet: "10.1.0.0/24", rangeEnd: "10.1.0.255" },
      /"ipam.rangeEnd" 10.1.0.255 is the broadcast address/,
    ],
    [
      "a gateway of the other family",
      { ranges: [[{ subnet: "fd00::/64", gateway: "10.1.0.1" }]] },
      /\.gateway" 10.1.0.1 is not an IPv6 address like its subnet/,
    ],
    [
      "a range holding only its gateway",
      { subnet: "10.1.0.0/24", rangeStart: "10.1.0.1", rangeEnd: "10.1.0.1" },
      /"ipam" \(10.1.0.1-10.1.0.1\) holds no address besides its gateway/,
    ],
    [
      "a range set mixing families",
      { ranges: [[{ subnet: "10.1.0.0/24" }, { subnet: "fd00::/64" }]] },
      /"ipam.ranges\[0\]" mixes IPv4 and IPv6 ranges/,
    ],
    [
      "overlapping ranges in one set",
      {
        ranges: [
          [
            { subnet: "10.1.0.0/24", rangeEnd: "10.1.0.100" },
            { subnet: "10.1.0.0/24", rangeStart: "10.1.0.50" },
          ],
        ],
      },
      /range set 0 range 1 \(10.1.0.50-10.1.0.254\) overlaps range set 0 range 0 \(10.1.0.1-10.1.0.100\)/,
    ],
    [
      "overlapping range sets",
      { ranges: [[{ subnet: "10.1.0.0/16" }], [{ subnet: "10.1.5.0/24" }]] },
      /range set 1 range 0 \(10.1.5.1-10.1.5.254\) overlaps range set 0 range 0/,
    ],
    [
      "a relative dataDir",
      { subnet: "10.1.0.0/24", dataDir: "var/lib/cni" },
      /"ipam.dataDir" must be an absolute path/,
    ],
    [
      "a dataDir that is not a string",
      { subnet: "10.1.0.0/24", dataDir: 5 },
      /"ipam.dataDir" must be an absolute path/,
    ],
    [
      "a route without dst",
      { subnet: "10.1.0.0/24", routes: [{ gw: "10.1.0.1" }] },
      /"ipam.routes\[0\].dst" must be a CIDR/,
    ],
    [
      "a route gateway that is not an address",
      { subnet: "10.1.0.0/24", routes: [{ dst: "0.0.0.0/0", gw: "router" }] },
      /"ipam.routes\[0\].gw" must be an IP address/,
    ],
    ["dns that is not an object", { subnet: "10.1.0.0/24", dns: ["10.96.0.10"] }, /"ipam.dns" must be an object/],
    [
      "legacy rangeStart without a subnet",
      { rangeStart: "10.1.0.5" },
      /"ipam.rangeStart" is given without "ipam.subnet"/,
    ],
    [
      "resolvConf, which only host-local reads",
      { subnet: "10.1.0.0/24", resolvConf: "/etc/resolv.conf" },
      /"ipam.resolvConf" is not supported/,
    ],
  ];

  it.each(cases)("%s", (_, ipam, message) => {
    const err = cniErrorOf(() => parse(ipam));
    expect(err.code).toBe(ErrorCode.InvalidNetworkConfig);
    expect(err.message).toMatch(message);
  });

  it("a network name that cannot be a directory name", () => {
    const err = cniErrorOf(() => parse({ subnet: "10.1.0.0/24" }, "../etc"));
    expect(err.code).toBe(ErrorCode.InvalidNetworkConfig);
    expect(err.message).toMatch(/network name "..\/etc" cannot name an IPAM store directory/);
  });
});
