/**
 * `--pod-hook` of `netkit-cni install` and `netkit-cni agent`: the conflist asks for tc
 * filters in place of tcx links only when told, the plugin reads it back, and a word it
 * does not know is refused before anything is written.
 */
import { describe, expect, it } from "vitest";
import { installOptionsFor, parseAgentOptions } from "../../src/agent/options";
import { parseNetConf } from "../../src/cni/config";
import { generateConflist } from "../../src/install/install";
import { parseInstallOptions } from "../../src/install/options";

type Conflist = { name: string; plugins: Record<string, unknown>[] };

const pluginConf = (conflist: Conflist) =>
  parseNetConf(JSON.stringify({ ...conflist.plugins[0], cniVersion: "1.1.0", name: conflist.name }));

describe("--pod-hook", () => {
  it("writes tc filters into install's conflist only when asked", () => {
    const tc = generateConflist(parseInstallOptions(["--pod-cidr=10.40.1.0/24", "--pod-hook=tc"]).generate) as Conflist;
    expect(tc.plugins[0]?.podHook).toBe("tc");
    expect(pluginConf(tc).fastPath.podHook).toBe("tc");
    const plain = generateConflist(parseInstallOptions(["--pod-cidr=10.40.1.0/24"]).generate) as Conflist;
    expect(plain.plugins[0]).not.toHaveProperty("podHook");
    expect(pluginConf(plain).fastPath.podHook).toBe("tcx");
  });

  it("is passed on by the agent into the conflist it writes", () => {
    const conflistOf = (args: string[]) => {
      const opts = parseAgentOptions(["--cluster-cidr=10.40.0.0/16", ...args], {}, "node-a");
      return generateConflist(installOptionsFor(opts, ["10.40.1.0/24"]).generate) as Conflist;
    };
    expect(pluginConf(conflistOf([])).fastPath.podHook).toBe("tcx");
    expect(pluginConf(conflistOf(["--pod-hook=tc"])).fastPath.podHook).toBe("tc");
  });

  it("refuses what it does not know, naming the choices", () => {
    expect(() => parseInstallOptions(["--pod-cidr=10.40.1.0/24", "--pod-hook=xdp"])).toThrow(
      '--pod-hook: "xdp" is not one of tcx, tc',
    );
    expect(() => parseAgentOptions(["--cluster-cidr=10.40.0.0/16", "--pod-hook=xdp"], {}, "node-a")).toThrow(
      /--pod-hook: "xdp"/,
    );
  });
});
