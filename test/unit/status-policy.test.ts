/**
 * What `status` reads of the agent's NetworkPolicy account (src/cli/status-policy.ts):
 * the files its writer leaves (src/agent/policy/writer.ts), an older agent's policies.json
 * without problems, and nothing at all.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { writePolicyFile, writePolicyProblemsFile } from "../../src/agent/policy/writer";
import { podKey } from "../../src/bpf/index";
import { readAgentAccount } from "../../src/cli/status-policy";

const dirs: string[] = [];
const stateDir = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkc-polstat-"));
  dirs.push(dir);
  return dir;
};

afterEach(() => {
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

describe("the agent's NetworkPolicy account as status reads it", () => {
  it("reads each pod's problems and the skipped policies the agent wrote", () => {
    const dir = stateDir();
    const bound = {
      policy: "x/many",
      kind: "rules-bound" as const,
      reason: "egress: 65 rules after merging, the datapath holds 64; all egress denied",
      direction: "egress" as const,
    };
    writePolicyFile(dir, {
      "x/a": { selectedBy: ["x/many"], isolated: { ingress: false, egress: true }, slot: 3, problems: [bound] },
    });
    const skipped = { policy: "x/bad", kind: "protocol" as const, reason: "spec.ingress[0].ports[0].protocol: bad" };
    writePolicyProblemsFile(dir, [skipped]);
    const account = readAgentAccount(dir);
    expect(account.pods.get(podKey("x", "a").toString(16))).toMatchObject({ pod: "x/a", problems: [bound] });
    expect(account.unreadable).toEqual([skipped]);
    expect(fs.readdirSync(dir).sort()).toEqual(["policies.json", "policy-problems.json"]);
  });

  it("takes an older agent's policies.json, and nothing where no agent wrote", () => {
    const dir = stateDir();
    const key = podKey("x", "a").toString(16);
    fs.writeFileSync(path.join(dir, "policies.json"), JSON.stringify({ [key]: { pod: "x/a", selectedBy: ["x/p"] } }));
    const account = readAgentAccount(dir);
    expect(account.pods.get(key)).toEqual({ pod: "x/a", selectedBy: ["x/p"] });
    expect(account.unreadable).toEqual([]);
    fs.writeFileSync(path.join(dir, "policy-problems.json"), "{ half");
    expect(readAgentAccount(dir).unreadable).toEqual([]);
    const empty = readAgentAccount(stateDir());
    expect([empty.pods.size, empty.unreadable]).toEqual([0, []]);
  });
});
