/**
 * Which proxy entries the node needs for another plugin's pods to reach ours: only on
 * devices not ours whose connected route covers one of our pods, only entries of ours
 * removed, and proxy_ndp switched back off only when we switched it on.
 */
import { describe, expect, it } from "vitest";
import {
  connectedRoutes,
  coveringRoutes,
  mayNeedProxies,
  ndpChanges,
  PROXY_PROTOCOL,
  PROXY_PROTOCOL_NDP_SET,
  type ProxyFact,
  planProxies,
  podAddresses,
  type RouteFact,
} from "../../src/datapath/coexist-plan";

const CNI0 = 3;
const UPLINK = 2;
const OTHER = 4;
const POD_A = 10;
const POD_B = 11;
const ours = new Set([POD_A, POD_B]);

const routes: RouteFact[] = [
  { family: 2, dst: "0.0.0.0/0", gateway: "192.168.1.1", ifindex: UPLINK },
  { family: 2, dst: "192.168.1.0/24", ifindex: UPLINK },
  { family: 2, dst: "10.231.90.0/24", ifindex: CNI0 },
  { family: 2, dst: "10.231.0.0/16", gateway: "192.168.1.7", ifindex: UPLINK },
  { family: 2, dst: "172.17.0.0/16", ifindex: OTHER },
  { family: 2, dst: "10.231.90.5/32", ifindex: POD_A },
  { family: 2, dst: "10.231.91.5/32", ifindex: POD_B },
  { family: 10, dst: "fd31:90::/64", ifindex: CNI0 },
  { family: 10, dst: "fe80::/64", ifindex: CNI0 },
  { family: 10, dst: "fe80::/64", ifindex: POD_A },
  { family: 10, dst: "fd31:90::5/128", ifindex: POD_A },
  { family: 10, dst: "::/0", gateway: "fe80::1", ifindex: UPLINK },
];

describe("which device covers an address", () => {
  const connected = connectedRoutes(routes, ours);

  it("takes connected routes of devices not ours, neither host prefixes nor defaults nor via a gateway nor link-local", () => {
    expect(connected.map((c) => c.dst)).toEqual(["192.168.1.0/24", "10.231.90.0/24", "172.17.0.0/16", "fd31:90::/64"]);
  });

  it("finds the bridge for an address inside its subnet, nothing for one outside", () => {
    expect(coveringRoutes("10.231.90.5", connected)).toEqual([{ ifindex: CNI0, dst: "10.231.90.0/24" }]);
    expect(coveringRoutes("fd31:90::5", connected)).toEqual([{ ifindex: CNI0, dst: "fd31:90::/64" }]);
    expect(coveringRoutes("10.231.91.5", connected)).toEqual([]);
    expect(coveringRoutes("fd31:91::5", connected)).toEqual([]);
  });

  it("reads our pods' addresses from the host routes through our devices", () => {
    expect(podAddresses(routes, ours)).toEqual(["10.231.90.5", "10.231.91.5", "fd31:90::5"]);
  });
});

describe("the cheap test before asking which devices are ours", () => {
  it("is true when a host route lies in another device's connected subnet", () => {
    expect(mayNeedProxies(routes)).toBe(true);
  });

  it("is false without one: host routes outside every connected subnet, or inside their own device's", () => {
    const none = routes.filter((r) => r.ifindex !== CNI0);
    expect(mayNeedProxies(none)).toBe(false);
    expect(mayNeedProxies([...none, { family: 2, dst: "192.168.1.9/32", ifindex: UPLINK }])).toBe(false);
  });
});

describe("planning proxy entries", () => {
  it("adds an entry on the covering device for each covered pod address, and nothing else", () => {
    const plan = planProxies({ routes, ourDevices: ours, proxies: [] });
    expect(plan.add).toEqual([
      { address: "10.231.90.5", ifindex: CNI0, because: "10.231.90.0/24" },
      { address: "fd31:90::5", ifindex: CNI0, because: "fd31:90::/64" },
    ]);
    expect(plan.remove).toEqual([]);
  });

  it("changes nothing when the entries are there; removes ours no pod needs; never another's", () => {
    const proxies: ProxyFact[] = [
      { address: "10.231.90.5", ifindex: CNI0, protocol: PROXY_PROTOCOL },
      { address: "fd31:90::5", ifindex: CNI0, protocol: PROXY_PROTOCOL_NDP_SET },
      { address: "10.231.90.9", ifindex: CNI0, protocol: PROXY_PROTOCOL },
      { address: "10.231.90.77", ifindex: CNI0, protocol: 0 },
    ];
    const plan = planProxies({ routes, ourDevices: ours, proxies });
    expect(plan.add).toEqual([]);
    expect(plan.remove).toEqual([{ address: "10.231.90.9", ifindex: CNI0, protocol: PROXY_PROTOCOL }]);
  });

  it("leaves an address someone else already proxies to them", () => {
    const proxies: ProxyFact[] = [{ address: "10.231.90.5", ifindex: CNI0, protocol: 0 }];
    const plan = planProxies({ routes, ourDevices: ours, proxies });
    expect(plan.add.map((e) => e.address)).toEqual(["fd31:90::5"]);
  });

  it("leaves out a failing ADD's addresses although its routes still exist", () => {
    const proxies: ProxyFact[] = [{ address: "fd31:90::5", ifindex: CNI0, protocol: PROXY_PROTOCOL_NDP_SET }];
    const plan = planProxies({ routes, ourDevices: ours, proxies, without: new Set(["10.231.90.5", "fd31:90::5"]) });
    expect(plan).toEqual({ add: [], remove: proxies });
  });
});

describe("proxy_ndp", () => {
  const v6 = (address: string, protocol = PROXY_PROTOCOL_NDP_SET): ProxyFact => ({ address, ifindex: CNI0, protocol });

  it("asks the switch for a device's first entry of ours", () => {
    const plan = { add: [{ address: "fd31:90::5", ifindex: CNI0 }], remove: [] };
    expect(ndpChanges(plan, [])).toEqual([{ ifindex: CNI0, tag: "ask", restore: false }]);
  });

  it("keeps the mark of the entries before, and restores only with the last of ours that we switched on", () => {
    const a = v6("fd31:90::5");
    const b = v6("fd31:90::6");
    expect(ndpChanges({ add: [], remove: [a] }, [a, b])).toEqual([
      { ifindex: CNI0, tag: PROXY_PROTOCOL_NDP_SET, restore: false },
    ]);
    expect(ndpChanges({ add: [], remove: [a, b] }, [a, b])).toEqual([
      { ifindex: CNI0, tag: PROXY_PROTOCOL_NDP_SET, restore: true },
    ]);
    const kept = v6("fd31:90::5", PROXY_PROTOCOL);
    expect(ndpChanges({ add: [], remove: [kept] }, [kept])).toEqual([
      { ifindex: CNI0, tag: PROXY_PROTOCOL, restore: false },
    ]);
  });

  it("does not switch off when the last entry is replaced by a new one in the same pass", () => {
    const a = v6("fd31:90::5");
    expect(ndpChanges({ add: [{ address: "fd31:90::7", ifindex: CNI0 }], remove: [a] }, [a])).toEqual([
      { ifindex: CNI0, tag: PROXY_PROTOCOL_NDP_SET, restore: false },
    ]);
  });

  it("ignores IPv4 entries: ARP needs no switch", () => {
    expect(ndpChanges({ add: [{ address: "10.231.90.5", ifindex: CNI0 }], remove: [] }, [])).toEqual([]);
  });
});
