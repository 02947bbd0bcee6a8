import { describe, expect, it } from "vitest";
import { MAX_CONTAINER_ID_LENGTH } from "../../src/cni/env";
import {
  aliasClaims,
  hostDeviceMac,
  hostDeviceName,
  isRetiredDevice,
  NETWORK_TOKEN_MAX,
  networkToken,
  ownerAlias,
  parseOwnerAlias,
  parseRetiredAlias,
  retiredAlias,
} from "../../src/datapath/naming";
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

  it("round-trips the ownership alias, which names network, ifname and container", () => {
    const alias = ownerAlias("podman", "c.1_x-y", "net1");
    expect(alias).toBe("netkit-cni:podman/net1/c.1_x-y");
    expect(parseOwnerAlias(alias)).toEqual({ network: "podman", containerId: "c.1_x-y", ifname: "net1" });
    expect(parseOwnerAlias("something else")).toBeUndefined();
    expect(parseOwnerAlias("netkit-cni:a/b/c/d")).toBeUndefined();
    expect(parseOwnerAlias("netkit-cni:a//c")).toBeUndefined();
    expect(parseOwnerAlias("netkit-cni:eth0/c")).toBeUndefined();
    expect(parseOwnerAlias(undefined)).toBeUndefined();
  });

  it("keeps every alias within IFLA_IFALIAS's 255 bytes, hashing only long network names", () => {
    const longest = ownerAlias("n".repeat(300), "c".repeat(MAX_CONTAINER_ID_LENGTH), "e".repeat(15));
    expect(Buffer.byteLength(longest)).toBeLessThanOrEqual(255);
    const fits = "a".repeat(NETWORK_TOKEN_MAX);
    expect(networkToken(fits)).toBe(fits);
    expect(Buffer.byteLength(ownerAlias(fits, "c".repeat(MAX_CONTAINER_ID_LENGTH), "e".repeat(15)))).toBe(255);
    const long1 = `${"x".repeat(NETWORK_TOKEN_MAX)}-one`;
    const long2 = `${"x".repeat(NETWORK_TOKEN_MAX)}-two`;
    expect(networkToken(long1)).toHaveLength(NETWORK_TOKEN_MAX);
    expect(networkToken(long1)).toMatch(/^x+~[0-9a-f]{12}$/);
    expect(networkToken(long1)).not.toBe(networkToken(long2));
    expect(parseOwnerAlias(ownerAlias(long1, "c", "eth0"))?.network).toBe(networkToken(long1));
  });

  it("lets DEL and CHECK claim their network's device for the attachment, and no other", () => {
    const mine = ownerAlias("net-a", "c1", "eth0");
    expect(aliasClaims(mine, "net-a", "c1", "eth0")).toBe(true);
    expect(aliasClaims(mine, "net-b", "c1", "eth0")).toBe(false);
    expect(aliasClaims(mine, "net-a", "c1", "net1")).toBe(false);
    expect(aliasClaims(mine, "net-a", "c2", "eth0")).toBe(false);
    expect(aliasClaims("hand-written", "net-a", "c1", "eth0")).toBe(false);
  });
});

describe("retired devices", () => {
  it("marks a DEL'd attachment's device with an alias no owner test claims, as long as the owner's", () => {
    const retired = retiredAlias("net-a", "c1", "eth0");
    expect(retired).toBe("netkit-del:net-a/eth0/c1");
    expect(parseRetiredAlias(retired)).toEqual({ network: "net-a", containerId: "c1", ifname: "eth0" });
    expect(parseOwnerAlias(retired)).toBeUndefined();
    expect(aliasClaims(retired, "net-a", "c1", "eth0")).toBe(false);
    expect(parseRetiredAlias(ownerAlias("net-a", "c1", "eth0"))).toBeUndefined();
    const longest = ["n".repeat(300), "c".repeat(MAX_CONTAINER_ID_LENGTH), "e".repeat(15)] as const;
    expect(Buffer.byteLength(retiredAlias(...longest))).toBe(Buffer.byteLength(ownerAlias(...longest)));
  });

  it("counts a device as retired only under its attachment's own name", () => {
    const alias = retiredAlias("net-a", "c1", "eth0");
    expect(isRetiredDevice({ name: hostDeviceName("c1", "eth0"), alias })).toBe(true);
    expect(isRetiredDevice({ name: hostDeviceName("c2", "eth0"), alias })).toBe(false);
    expect(isRetiredDevice({ name: "eth9", alias })).toBe(false);
    expect(isRetiredDevice({ name: hostDeviceName("c1", "eth0"), alias: ownerAlias("net-a", "c1", "eth0") })).toBe(
      false,
    );
    expect(isRetiredDevice({ name: hostDeviceName("c1", "eth0"), alias: undefined })).toBe(false);
  });
});

describe("pod routes", () => {
  it("gives one default route per family present", () => {
    expect(podDefaultRoutes(["10.0.0.5/24"])).toEqual([{ dst: "0.0.0.0/0", gw: "169.254.1.1" }]);
    expect(podDefaultRoutes(["fd00::5/64"])).toEqual([{ dst: "::/0", gw: "fe80::1" }]);
    expect(podDefaultRoutes(["10.0.0.5/24", "fd00::5/64"])).toHaveLength(2);
  });
});
