/**
 * ClusterNetworkPolicy status conditions: one writer for the cluster, a write only when the
 * condition changed, a failed write tried again, the transition time kept while the
 * status stays.
 */
import { describe, expect, it } from "vitest";
import {
  ClusterPolicyConditions,
  CONDITION_TYPE,
  type Condition,
  firstByName,
} from "../../src/agent/policy/cluster-conditions";

const settle = () => new Promise((r) => setTimeout(r, 0));
const problem = (reason: string) => ({ policy: "p", kind: "peer" as const, reason });

function setup(writes = () => true) {
  const applied: { name: string; condition: Condition }[] = [];
  let fail = false;
  let clock = Date.parse("2026-12-06T10:00:00Z");
  const failures: string[] = [];
  const conditions = new ClusterPolicyConditions(
    async (name, condition) => {
      if (fail) throw new Error("HTTP 503");
      applied.push({ name, condition });
    },
    writes,
    (name, e) => failures.push(`${name}: ${e.message}`),
    () => new Date(clock),
  );
  return {
    conditions,
    applied,
    failures,
    failNext: (f: boolean) => {
      fail = f;
    },
    tick: (ms: number) => {
      clock += ms;
    },
  };
}

describe("ClusterNetworkPolicy conditions", () => {
  it("says a policy read in full is enforced, once, with the generation it read", async () => {
    const t = setup();
    t.conditions.report([{ name: "a", generation: 3, problems: [] }]);
    await settle();
    t.conditions.report([{ name: "a", generation: 3, problems: [] }]);
    await settle();
    expect(t.applied).toEqual([
      {
        name: "a",
        condition: {
          type: CONDITION_TYPE,
          status: "True",
          reason: "Enforced",
          message: "read in full and enforced",
          observedGeneration: 3,
          lastTransitionTime: "2026-12-06T10:00:00Z",
        },
      },
    ]);
  });

  it("names what it could not read; a new message keeps the transition time, a new status moves it", async () => {
    const t = setup();
    t.conditions.report([{ name: "a", generation: 1, problems: [problem("egress[0]: a peer with no known field")] }]);
    await settle();
    t.tick(60_000);
    t.conditions.report([
      { name: "a", generation: 2, problems: [problem("egress[0]: a peer with no known field"), problem("x")] },
    ]);
    await settle();
    t.tick(60_000);
    t.conditions.report([{ name: "a", generation: 3, problems: [] }]);
    await settle();
    expect(t.applied.map((a) => [a.condition.status, a.condition.reason, a.condition.lastTransitionTime])).toEqual([
      ["False", "PartlyUnreadable", "2026-12-06T10:00:00Z"],
      ["False", "PartlyUnreadable", "2026-12-06T10:00:00Z"],
      ["True", "Enforced", "2026-12-06T10:02:00Z"],
    ]);
    expect(t.applied[1]?.condition.message).toBe("egress[0]: a peer with no known field; x");
  });

  it("tries a failed write again at the next report", async () => {
    const t = setup();
    t.failNext(true);
    t.conditions.report([{ name: "a", problems: [] }]);
    await settle();
    expect(t.failures).toEqual(["a: HTTP 503"]);
    t.failNext(false);
    t.conditions.report([{ name: "a", problems: [] }]);
    await settle();
    expect(t.applied.map((a) => a.name)).toEqual(["a"]);
  });

  it("writes nothing when another agent is the writer", async () => {
    const t = setup(() => false);
    t.conditions.report([{ name: "a", problems: [] }]);
    await settle();
    expect(t.applied).toEqual([]);
  });

  it("a policy deleted and made again is written again", async () => {
    const t = setup();
    t.conditions.report([{ name: "a", problems: [] }]);
    await settle();
    t.conditions.report([]);
    t.conditions.report([{ name: "a", problems: [] }]);
    await settle();
    expect(t.applied.map((a) => a.name)).toEqual(["a", "a"]);
  });

  it("the writer is the node first by name", () => {
    expect(firstByName("node-a", ["node-b", "node-a"])).toBe(true);
    expect(firstByName("node-b", ["node-b", "node-a"])).toBe(false);
    expect(firstByName("node-a", [])).toBe(true);
  });
});
