/**
 * `--teardown` of `netkit-cni install` and `netkit-cni agent`: the conflist asks for DEL's
 * deferred teardown only when told, the plugin reads it back, and a word it does not know
 * is refused before anything is written.
 */
import { describe, expect, it } from "vitest";
import { installOptionsFor, parseAgentOptions } from "../../src/agent/options";
import { parseNetConf } from "../../src/cni/config";
import { generateConflist } from "../../src/install/install";
import { parseInstallOptions } from "../../src/install/options";

type Conflist = { name: string; plugins: Record<string, unknown>[] };

const pluginConf = (conflist: Conflist) =>
  parseNetConf(JSON.stringify({ ...conflist.plugins[0], cniVersion: "1.1.0", name: conflist.name }));

describe("--teardown", () => {
  it("writes a deferred teardown into install's conflist only when asked", () => {
    const deferred = generateConflist(
      parseInstallOptions(["--pod-cidr=10.40.1.0/24", "--teardown=deferred"]).generate,
    ) as Conflist;
    expect(deferred.plugins[0]?.teardown).toBe("deferred");
    expect(pluginConf(deferred).teardown).toBe("deferred");
    const plain = generateConflist(parseInstallOptions(["--pod-cidr=10.40.1.0/24"]).generate) as Conflist;
    expect(plain.plugins[0]).not.toHaveProperty("teardown");
    expect(pluginConf(plain).teardown).toBe("inline");
  });

  it("is deferred in the agent's conflist unless the agent is told otherwise", () => {
    const conflistOf = (args: string[]) => {
      const opts = parseAgentOptions(["--cluster-cidr=10.40.0.0/16", ...args], {}, "node-a");
      return generateConflist(installOptionsFor(opts, ["10.40.1.0/24"]).generate) as Conflist;
    };
    expect(pluginConf(conflistOf([])).teardown).toBe("deferred");
    expect(pluginConf(conflistOf(["--teardown=inline"])).teardown).toBe("inline");
  });

  it("refuses what it does not know, naming the choices", () => {
    expect(() => parseInstallOptions(["--pod-cidr=10.40.1.0/24", "--teardown=later"])).toThrow(
      '--teardown: "later" is not one of inline, deferred',
    );
    expect(() => parseAgentOptions(["--cluster-cidr=10.40.0.0/16", "--teardown=later"], {}, "node-a")).toThrow(
      /--teardown: "later"/,
    );
  });
});
