import { describe, expect, it } from "vitest";
import { MAX_BURST, podBandwidth } from "../../src/cni/bandwidth";
import { parseNetConf } from "../../src/cni/config";
import { CniError } from "../../src/cni/errors";

const good = {
  cniVersion: "1.1.0",
  name: "pods",
  type: "netkit-cni",
  ipam: { type: "host-local", ranges: [[{ subnet: "10.1.0.0/24" }]] },
};

const bandwidthOf = (conf: Record<string, unknown>) =>
  podBandwidth(parseNetConf(JSON.stringify(conf)).bandwidthRequest);
const capability = (bw: unknown) => ({ ...good, runtimeConfig: { bandwidth: bw } });

function refusal(conf: Record<string, unknown>): CniError {
  // Parsing never refuses the values: DEL of a refused pod must still go through.
  const parsed = parseNetConf(JSON.stringify(conf));
  try {
    podBandwidth(parsed.bandwidthRequest);
  } catch (e) {
    if (e instanceof CniError) return e;
    throw e;
  }
  throw new Error("expected a CniError");
}

describe("podBandwidth", () => {
  it("has no limits without keys or capability", () => {
    expect(bandwidthOf(good)).toBeUndefined();
    expect(bandwidthOf(capability({}))).toBeUndefined();
    expect(bandwidthOf(capability(null))).toBeUndefined();
  });

  it("reads the capability in bits per second and bits", () => {
    expect(bandwidthOf(capability({ ingressRate: 10_000_000, ingressBurst: 20_000_000 }))).toEqual({
      ingress: { rate: 10_000_000, burst: 20_000_000 },
    });
    expect(bandwidthOf(capability({ egressRate: 1_000_000, egressBurst: 8_000 }))).toEqual({
      egress: { rate: 1_000_000, burst: 8_000 },
    });
  });

  it("takes zeros for the direction a runtime does not limit", () => {
    // containerd's annotation for egress only, with its 2^32 - 1 bit burst.
    const bw = { ingressRate: 0, ingressBurst: 0, egressRate: 5_000_000, egressBurst: 4294967295 };
    expect(bandwidthOf(capability(bw))).toEqual({ egress: { rate: 5_000_000, burst: 4294967295 } });
    expect(bandwidthOf(capability({ ingressRate: 0, ingressBurst: 0, egressRate: 0, egressBurst: 0 }))).toBeUndefined();
  });

  it("matches keys without regard to case, as containerd spells them (go-cni has no JSON tags)", () => {
    const containerd = { IngressRate: 10_000_000, IngressBurst: 4294967295, EgressRate: 0, EgressBurst: 0 };
    expect(bandwidthOf(capability(containerd))).toEqual({ ingress: { rate: 10_000_000, burst: 4294967295 } });
    expect(refusal(capability({ EgressRate: 1e6, EgressBurst: 0 })).message).toContain("egressBurst");
  });

  it("takes CRI-O's burst, just under 4 GiB", () => {
    expect(bandwidthOf(capability({ ingressRate: 1e9, ingressBurst: MAX_BURST }))?.ingress?.burst).toBe(MAX_BURST);
  });

  it("prefers the config's own keys over the capability, as the reference plugin does", () => {
    const conf = { ...capability({ ingressRate: 1e9, ingressBurst: 1e9 }), egressRate: 2e6, egressBurst: 2e6 };
    expect(bandwidthOf(conf)).toEqual({ egress: { rate: 2e6, burst: 2e6 } });
  });

  it.each([
    [{ egressRate: -1, egressBurst: 1000 }, "runtimeConfig.bandwidth.egressRate", "non-negative integer"],
    [{ ingressRate: 1e6, ingressBurst: -5 }, "runtimeConfig.bandwidth.ingressBurst", "non-negative integer"],
    [{ ingressRate: 1500.5, ingressBurst: 1e4 }, "runtimeConfig.bandwidth.ingressRate", "integer"],
    [{ ingressRate: "10M", ingressBurst: 1e4 }, "runtimeConfig.bandwidth.ingressRate", "integer"],
    [{ egressRate: 1e6 }, "runtimeConfig.bandwidth.egressBurst", "must be set when"],
    [{ egressRate: 1e6, egressBurst: 0 }, "runtimeConfig.bandwidth.egressBurst", "must be set when"],
    [{ ingressBurst: 1e6 }, "runtimeConfig.bandwidth.ingressRate", "must be set when"],
    [{ ingressRate: 0, ingressBurst: 1e6 }, "runtimeConfig.bandwidth.ingressRate", "must be set when"],
    [{ egressRate: 999, egressBurst: 1e6 }, "runtimeConfig.bandwidth.egressRate", "from 1000"],
    [{ egressRate: 1e16, egressBurst: 1e6 }, "runtimeConfig.bandwidth.egressRate", "from 1000"],
    [{ egressRate: 1e40, egressBurst: 1e6 }, "runtimeConfig.bandwidth.egressRate", "from 1000"],
    [{ ingressRate: 1e6, ingressBurst: MAX_BURST + 1 }, "runtimeConfig.bandwidth.ingressBurst", "below 4 GiB"],
  ])("refuses %j with code 7 naming %s", (bw, field, why) => {
    const e = refusal(capability(bw));
    expect(e.code).toBe(7);
    expect(e.message).toContain(`"${field}"`);
    expect(e.message).toContain(why);
  });

  it("names the top-level field when the config's own keys are bad", () => {
    const e = refusal({ ...good, egressRate: 1e6 });
    expect(e.code).toBe(7);
    expect(e.message).toContain(`"egressBurst"`);
  });

  it("refuses a capability that is not an object", () => {
    const e = refusal(capability([1, 2]));
    expect(e.code).toBe(7);
    expect(e.message).toContain(`"runtimeConfig.bandwidth"`);
  });
});
