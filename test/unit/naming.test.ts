import { describe, expect, it } from "vitest";
import { hostDeviceMac, hostDeviceName, ownerAlias, parseOwnerAlias } from "../../src/datapath/naming";
import { podDefaultRoutes } from "../../src/datapath/pod-end";

describe("host device naming", () => {
  it("is stable, at most 15 characters, and differs per ifname and container", () => {
    const id = "0123456789abcdef".repeat(4);
    const a = hostDeviceName(id, "eth0");
    expect(a).toBe(hostDeviceName(id, "eth0"));
    expect(a).toMatch(/^nk[0-9a-f]{13}$/);
    expect(hostDeviceName(id, "eth1")).not.toBe(a);
    expect(hostDeviceName(`${id}x`, "eth0")).not.toBe(a);
  });

  it("never lets container ID text into the name", () => {
    expect(hostDeviceName("../../etc", "eth0")).toMatch(/^nk[0-9a-f]{13}$/);
  });

  it("gives a locally administered unicast MAC", () => {
    const mac = hostDeviceMac("c1", "eth0");
    expect(mac).toMatch(/^02(:[0-9a-f]{2}){5}$/);
  });

  it("round-trips the ownership alias, ifname first so IDs may hold any allowed character", () => {
    expect(parseOwnerAlias(ownerAlias("c.1_x-y", "net1"))).toEqual({ containerId: "c.1_x-y", ifname: "net1" });
    expect(parseOwnerAlias("something else")).toBeUndefined();
    expect(parseOwnerAlias(undefined)).toBeUndefined();
  });
});

describe("pod routes", () => {
  it("gives one default route per family present", () => {
    expect(podDefaultRoutes(["10.0.0.5/24"])).toEqual([{ dst: "0.0.0.0/0", gw: "169.254.1.1" }]);
    expect(podDefaultRoutes(["fd00::5/64"])).toEqual([{ dst: "::/0", gw: "fe80::1" }]);
    expect(podDefaultRoutes(["10.0.0.5/24", "fd00::5/64"])).toHaveLength(2);
  });
});
