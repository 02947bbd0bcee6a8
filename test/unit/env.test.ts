import { describe, expect, it } from "vitest";
import { ifnameProblem, parseCniArgs, parseEnv, validateContainerId, validateIfname } from "../../src/cni/env";
import { CniError } from "../../src/cni/errors";

const base = {
  CNI_COMMAND: "ADD",
  CNI_CONTAINERID: "abc123",
  CNI_NETNS: "/run/netns/pod",
  CNI_IFNAME: "eth0",
  CNI_PATH: "/opt/cni/bin:/usr/lib/cni",
};

function codeOf(fn: () => unknown): number | undefined {
  try {
    fn();
  } catch (e) {
    return e instanceof CniError ? e.code : -1;
  }
  return undefined;
}

describe("parseEnv", () => {
  it("parses a complete ADD environment", () => {
    const env = parseEnv({ ...base, CNI_ARGS: "K8S_POD_NAME=web;K8S_POD_NAMESPACE=default" });
    expect(env).toEqual({
      command: "ADD",
      containerId: "abc123",
      netns: "/run/netns/pod",
      ifname: "eth0",
      args: { K8S_POD_NAME: "web", K8S_POD_NAMESPACE: "default" },
      path: ["/opt/cni/bin", "/usr/lib/cni"],
    });
  });

  it.each([
    ["CNI_COMMAND", "ADD"],
    ["CNI_CONTAINERID", "ADD"],
    ["CNI_NETNS", "ADD"],
    ["CNI_IFNAME", "ADD"],
    ["CNI_PATH", "ADD"],
    ["CNI_NETNS", "CHECK"],
    ["CNI_CONTAINERID", "DEL"],
  ])("rejects a missing %s for %s with code 4", (name, verb) => {
    const env: Record<string, string> = { ...base, CNI_COMMAND: verb };
    delete env[name];
    expect(codeOf(() => parseEnv(env))).toBe(4);
  });

  it("accepts DEL without a netns: the pod may be gone", () => {
    expect(parseEnv({ ...base, CNI_COMMAND: "DEL", CNI_NETNS: "" }).netns).toBe("");
  });

  it("needs nothing but the command for VERSION, GC and STATUS get by without pod variables", () => {
    expect(parseEnv({ CNI_COMMAND: "VERSION" }).command).toBe("VERSION");
    expect(parseEnv({ CNI_COMMAND: "GC", CNI_PATH: "/opt/cni/bin" }).command).toBe("GC");
  });

  it("answers VERSION as libcni sends it, placeholders and all", () => {
    const env = { CNI_COMMAND: "VERSION", CNI_CONTAINERID: "dummy", CNI_NETNS: "dummy", CNI_IFNAME: "dummy" };
    expect(parseEnv(env).command).toBe("VERSION");
  });

  it("rejects unknown commands and relative netns paths", () => {
    expect(codeOf(() => parseEnv({ ...base, CNI_COMMAND: "UPDATE" }))).toBe(4);
    expect(codeOf(() => parseEnv({ ...base, CNI_NETNS: "run/netns/pod" }))).toBe(4);
  });

  it("rejects malformed CNI_ARGS", () => {
    expect(codeOf(() => parseCniArgs("novalue"))).toBe(4);
    expect(parseCniArgs("A=1;;B=x=y")).toEqual({ A: "1", B: "x=y" });
  });
});

describe("interface names", () => {
  it.each(["eth0", "net1", "a".repeat(15), "pod-if_1.2", "é".repeat(7)])("accepts %s", (name) => {
    expect(() => validateIfname(name)).not.toThrow();
  });
  it.each([
    "",
    "a".repeat(16),
    "é".repeat(8), // 8 characters, 16 bytes: the kernel counts bytes
    "eth/0",
    "eth:0",
    "eth 0",
    "eth\t0",
    "eth\n0",
    "eth\u00a00",
    ".",
    "..",
    "net%d",
    "%",
    "eth0%",
    "eth\u00010",
    "eth\u007f",
  ])("rejects %j with code 4, naming CNI_IFNAME", (name) => {
    expect(codeOf(() => validateIfname(name))).toBe(4);
    expect(ifnameProblem(name)).toMatch(/^CNI_IFNAME /);
  });
  it("says why a template is refused", () => {
    expect(ifnameProblem("net%d")).toBe(`CNI_IFNAME "net%d" contains '%': the kernel would take it as a name template`);
  });
  it.each(["ADD", "CHECK"])("%s refuses a name template", (verb) => {
    expect(codeOf(() => parseEnv({ ...base, CNI_COMMAND: verb, CNI_IFNAME: "net%d" }))).toBe(4);
  });
  it("leaves DEL's bad names to DEL, which has nothing to delete for them, but still needs one", () => {
    expect(parseEnv({ ...base, CNI_COMMAND: "DEL", CNI_IFNAME: "net%d" }).ifname).toBe("net%d");
    expect(codeOf(() => parseEnv({ ...base, CNI_COMMAND: "DEL", CNI_IFNAME: "" }))).toBe(4);
  });
});

describe("container IDs", () => {
  it.each(["a", "0123abcdef".repeat(6), "pod_1.x-y"])("accepts %s", (id) => {
    expect(() => validateContainerId(id)).not.toThrow();
  });
  it.each(["", "../etc/passwd", "-leading", "a/b", "a b", "x".repeat(201), "id\0nul"])("rejects %j", (id) => {
    expect(codeOf(() => validateContainerId(id))).toBe(4);
  });
});
