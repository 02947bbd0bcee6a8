import { describe, expect, it } from "vitest";
import { CniError, ErrorCode, renderError } from "../../src/cni/errors";
import { parseResult, type Result, renderResult } from "../../src/cni/result";
import { negotiateVersion, requireVerbInVersion, versionInfo } from "../../src/cni/version";

const result: Result = {
  interfaces: [
    { name: "nk0123456789abc", mac: "02:00:00:00:00:01" },
    { name: "eth0", mtu: 1450, sandbox: "/run/netns/p" },
  ],
  ips: [
    { address: "10.1.0.5/32", gateway: "169.254.1.1", interface: 1 },
    { address: "fd00::5/128", gateway: "fe80::1", interface: 1 },
  ],
  routes: [{ dst: "0.0.0.0/0", gw: "169.254.1.1", mtu: 1400 }],
  dns: { nameservers: ["10.96.0.10"] },
};

describe("renderResult", () => {
  it("adds the IP version field before 1.0.0", () => {
    const out = renderResult(result, "0.4.0");
    expect(out.cniVersion).toBe("0.4.0");
    expect(out.ips).toEqual([
      { version: "4", address: "10.1.0.5/32", gateway: "169.254.1.1", interface: 1 },
      { version: "6", address: "fd00::5/128", gateway: "fe80::1", interface: 1 },
    ]);
  });

  it("drops the IP version from 1.0.0 on, and 1.1.0-only fields before 1.1.0", () => {
    const out = renderResult(result, "1.0.0");
    expect((out.ips as object[])[0]).toEqual({ address: "10.1.0.5/32", gateway: "169.254.1.1", interface: 1 });
    expect(out.routes).toEqual([{ dst: "0.0.0.0/0", gw: "169.254.1.1" }]);
    expect((out.interfaces as object[])[1]).toEqual({ name: "eth0", sandbox: "/run/netns/p" });
  });

  it("keeps route attributes and interface MTU in 1.1.0", () => {
    const out = renderResult(result, "1.1.0");
    expect(out.routes).toEqual([{ dst: "0.0.0.0/0", gw: "169.254.1.1", mtu: 1400 }]);
    expect((out.interfaces as object[])[1]).toEqual({ name: "eth0", mtu: 1450, sandbox: "/run/netns/p" });
    expect(out.dns).toEqual({ nameservers: ["10.96.0.10"] });
  });

  it("round-trips through parseResult for every version", () => {
    for (const v of ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] as const) {
      const back = parseResult(JSON.parse(JSON.stringify(renderResult(result, v))));
      expect(back.ips).toEqual(result.ips);
    }
  });
});

describe("errors", () => {
  it("renders the spec's error object", () => {
    expect(renderError(new CniError(ErrorCode.TryAgainLater, "busy", "lock held"), "1.0.0")).toEqual({
      cniVersion: "1.0.0",
      code: 11,
      msg: "busy",
      details: "lock held",
    });
    expect(renderError(new CniError(7, "bad"), "0.4.0")).toEqual({ cniVersion: "0.4.0", code: 7, msg: "bad" });
  });
});

describe("versions", () => {
  it("lists what VERSION answers", () => {
    expect(versionInfo("0.4.0")).toEqual({
      cniVersion: "0.4.0",
      supportedVersions: ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
    });
    expect(versionInfo("5.0.0").cniVersion).toBe("1.1.0");
  });

  it("allows CHECK from 0.4.0 and GC/STATUS from 1.1.0 only", () => {
    expect(() => requireVerbInVersion("CHECK", "0.3.1")).toThrow(/not defined/);
    expect(() => requireVerbInVersion("CHECK", "0.4.0")).not.toThrow();
    expect(() => requireVerbInVersion("GC", "1.0.0")).toThrow(CniError);
    expect(() => requireVerbInVersion("STATUS", "1.1.0")).not.toThrow();
  });

  it("refuses cniVersions with nothing in common", () => {
    expect(() => negotiateVersion(undefined, ["0.1.0", "2.0.0"])).toThrow(/incompatible/);
  });
});
