import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { DATAPATH_ANNOTATION, parseNetConf, podDatapath } from "../../src/cni/config";
import { CniError } from "../../src/cni/errors";

const good = {
  cniVersion: "1.0.0",
  name: "pods",
  type: "netkit-cni",
  ipam: { type: "host-local", ranges: [[{ subnet: "10.1.0.0/24" }]] },
};

function errorOf(input: unknown): CniError {
  try {
    parseNetConf(typeof input === "string" ? input : JSON.stringify(input));
  } catch (e) {
    if (e instanceof CniError) return e;
    throw e;
  }
  throw new Error("expected a CniError");
}

describe("parseNetConf", () => {
  it("parses a minimal config with defaults", () => {
    const conf = parseNetConf(JSON.stringify(good));
    expect(conf).toMatchObject({
      cniVersion: "1.0.0",
      name: "pods",
      datapath: "auto",
      mode: "l3",
      logLevel: "info",
      logFile: "/var/log/netkit-cni.log",
      mtu: undefined,
      teardown: "inline",
    });
    expect(conf.ipam?.type).toBe("host-local");
    expect(conf.fastPath.natCheck).toBe("auto");
    expect(conf.raw).toEqual(good);
  });

  it("takes a deferred teardown", () => {
    expect(parseNetConf(JSON.stringify({ ...good, teardown: "deferred" })).teardown).toBe("deferred");
  });

  it("takes where a veth pod's programs run, tcx links unless told", () => {
    expect(parseNetConf(JSON.stringify(good)).fastPath.podHook).toBe("tcx");
    expect(parseNetConf(JSON.stringify({ ...good, podHook: "tc" })).fastPath.podHook).toBe("tc");
  });

  it("takes a NAT check variant", () => {
    expect(parseNetConf(JSON.stringify({ ...good, natCheck: "memory" })).fastPath.natCheck).toBe("memory");
    expect(parseNetConf(JSON.stringify({ ...good, natCheck: "conntrack" })).fastPath.natCheck).toBe("conntrack");
  });

  it("leaves the socket bypass off unless asked, on the node's cgroup v2 root unless told", () => {
    expect(parseNetConf(JSON.stringify(good)).fastPath).toMatchObject({
      sockBypass: false,
      sockBypassCgroup: undefined,
    });
    const on = parseNetConf(JSON.stringify({ ...good, sockBypass: true, sockBypassCgroup: "/sys/fs/cgroup/pods" }));
    expect(on.fastPath).toMatchObject({ sockBypass: true, sockBypassCgroup: "/sys/fs/cgroup/pods" });
  });

  it("leaves Service translation off unless asked, on the node's cgroup v2 root unless told", () => {
    expect(parseNetConf(JSON.stringify(good)).fastPath).toMatchObject({
      serviceTranslation: false,
      serviceTranslationCgroup: undefined,
    });
    const on = parseNetConf(
      JSON.stringify({ ...good, serviceTranslation: true, serviceTranslationCgroup: "/sys/fs/cgroup/pods" }),
    );
    expect(on.fastPath).toMatchObject({ serviceTranslation: true, serviceTranslationCgroup: "/sys/fs/cgroup/pods" });
  });

  it("picks the highest supported version from a conflist's cniVersions", () => {
    const { cniVersion, ...rest } = good;
    expect(parseNetConf(JSON.stringify({ ...rest, cniVersions: ["0.3.1", "1.0.0", "9.9.9"] })).cniVersion).toBe(
      "1.0.0",
    );
  });

  it.each([
    ["empty input", "", 6],
    ["not JSON", "{nope", 6],
    ["a JSON array", "[]", 6],
    ["unsupported cniVersion", { ...good, cniVersion: "0.2.0" }, 1],
    ["unknown cniVersion", { ...good, cniVersion: "7.0.0" }, 1],
    ["missing cniVersion", { ...good, cniVersion: undefined }, 7],
    ["missing name", { ...good, name: undefined }, 7],
    ["bad name", { ...good, name: "-x" }, 7],
    ["numeric name", { ...good, name: 3 }, 7],
    ["missing type", { ...good, type: undefined }, 7],
    ["unknown datapath", { ...good, datapath: "bridge" }, 7],
    ["unknown netkit mode", { ...good, mode: "l4" }, 7],
    ["unknown teardown", { ...good, teardown: "later" }, 7],
    ["fastPath not a boolean", { ...good, fastPath: "yes" }, 7],
    ["serviceTranslation not a boolean", { ...good, serviceTranslation: 1 }, 7],
    ["serviceTranslationCgroup relative", { ...good, serviceTranslationCgroup: "pods" }, 7],
    ["serviceTranslationCgroup climbing out", { ...good, serviceTranslationCgroup: "/sys/fs/cgroup/../x" }, 7],
    ["relative bpffsRoot", { ...good, bpffsRoot: "bpf/x" }, 7],
    ["bpffsRoot escaping with ..", { ...good, bpffsRoot: "/sys/fs/bpf/../../etc" }, 7],
    ["hostInterface with a slash", { ...good, hostInterface: "eth0/1" }, 7],
    ["clusterCIDRs not CIDRs", { ...good, clusterCIDRs: ["10.0.0.0"] }, 7],
    ["natCheck unknown", { ...good, natCheck: "lru" }, 7],
    ["podHook unknown", { ...good, podHook: "xdp" }, 7],
    ["sockBypass not a boolean", { ...good, sockBypass: "on" }, 7],
    ["relative sockBypassCgroup", { ...good, sockBypassCgroup: "kubepods" }, 7],
    ["sockBypassCgroup escaping with ..", { ...good, sockBypassCgroup: "/sys/fs/cgroup/../../etc" }, 7],
    ["tiny mtu", { ...good, mtu: 20 }, 7],
    ["fractional mtu", { ...good, mtu: 1400.5 }, 7],
    ["ipam not an object", { ...good, ipam: "host-local" }, 7],
    ["ipam type a path", { ...good, ipam: { type: "../../bin/sh" } }, 7],
    ["bad log level", { ...good, logLevel: "loud" }, 7],
    ["bad valid-attachments", { ...good, "cni.dev/valid-attachments": [{ containerID: 1 }] }, 7],
    ["prevResult with a bad address", { ...good, prevResult: { ips: [{ address: "10.0.0.1" }] } }, 6],
  ])("rejects %s with code %i", (_what, input, code) => {
    const err = errorOf(input);
    expect(err.code).toBe(code);
    expect(err.message.length).toBeGreaterThan(10);
  });

  it("refuses configs over 1 MiB", () => {
    const err = errorOf({ ...good, padding: "x".repeat(1 << 20) });
    expect(err.code).toBe(6);
    expect(err.message).toContain("larger than");
  });

  it("ignores unknown fields, as the spec asks", () => {
    expect(parseNetConf(JSON.stringify({ ...good, somethingNew: { a: 1 } })).name).toBe("pods");
  });

  it("parses prevResult of an older version and GC's attachment list", () => {
    const conf = parseNetConf(
      JSON.stringify({
        ...good,
        prevResult: { cniVersion: "0.4.0", ips: [{ version: "4", address: "10.1.0.5/32", interface: 1 }] },
        "cni.dev/valid-attachments": [{ containerID: "c1", ifname: "eth0" }],
      }),
    );
    expect(conf.prevResult?.ips).toEqual([{ address: "10.1.0.5/32", interface: 1 }]);
    expect(conf.validAttachments).toEqual([{ containerId: "c1", ifname: "eth0" }]);
  });
});

describe("a pod's datapath annotation (CRI's io.kubernetes.cri.pod-annotations capability)", () => {
  const withAnnotations = (datapath: string, annotations: unknown) =>
    parseNetConf(
      JSON.stringify({
        ...good,
        datapath,
        runtimeConfig: { "io.kubernetes.cri.pod-annotations": annotations, portMappings: [] },
      }),
    );

  it.each([
    ["netkit", { [DATAPATH_ANNOTATION]: "veth" }, "veth"],
    ["veth", { [DATAPATH_ANNOTATION]: "netkit" }, "netkit"],
    ["auto", { [DATAPATH_ANNOTATION]: "veth" }, "veth"],
    ["netkit", { "other.io/thing": "veth" }, "netkit"],
    ["auto", {}, "auto"],
    ["veth", null, "veth"],
  ])("network %s with annotations %j: the pod gets %s", (network, annotations, expected) => {
    expect(podDatapath(withAnnotations(network, annotations))).toBe(expected);
  });

  it("no runtimeConfig, or one without annotations: the network's datapath", () => {
    expect(podDatapath(parseNetConf(JSON.stringify({ ...good, datapath: "veth" })))).toBe("veth");
    expect(podDatapath(parseNetConf(JSON.stringify({ ...good, runtimeConfig: { bandwidth: {} } })))).toBe("auto");
  });

  it.each([["auto"], ["Veth"], [""], ["macvlan"], [7], [true]])(
    "refuses %j with code 7 naming the annotation, at ADD only",
    (value) => {
      // Parsing succeeds (DEL and CHECK of such a pod must still work); choosing refuses.
      const conf = withAnnotations("auto", { [DATAPATH_ANNOTATION]: value });
      let err: unknown;
      try {
        podDatapath(conf);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(CniError);
      expect((err as CniError).code).toBe(7);
      expect((err as CniError).message).toContain(DATAPATH_ANNOTATION);
      expect((err as CniError).message).toContain(JSON.stringify(value));
    },
  );
});

describe("the example conflists in cni-conf/", () => {
  it("each plugin config of ours parses as a runtime would pass it", () => {
    const dir = path.resolve(__dirname, "../../cni-conf");
    const files = fs.readdirSync(dir).filter((f) => f.endsWith(".conflist"));
    expect(files.length).toBeGreaterThan(0);
    for (const file of files) {
      const list = JSON.parse(fs.readFileSync(path.join(dir, file), "utf8"));
      for (const plugin of list.plugins.filter((p: { type: string }) => p.type === "netkit-cni")) {
        const conf = parseNetConf(JSON.stringify({ cniVersion: list.cniVersion, name: list.name, ...plugin }));
        expect(conf.ipam?.type, file).toBeDefined();
      }
    }
  });
});
