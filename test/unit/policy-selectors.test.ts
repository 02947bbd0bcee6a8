/**
 * Label selectors as NetworkPolicy reads them (src/agent/policy/model/selectors.ts):
 * matching as Kubernetes matches, and selectors the API server would refuse reported as
 * invalid, never read as everything or nothing.
 */
import { describe, expect, it } from "vitest";
import {
  EVERYTHING,
  parseSelector,
  type Selector,
  selectorMatches,
  selectorText,
} from "../../src/agent/policy/model/selectors";

function selector(raw: unknown): Selector {
  const parsed = parseSelector(raw);
  if (!parsed.ok) throw new Error(parsed.reason);
  return parsed.selector;
}

describe("label selectors", () => {
  it("select everything when empty, absent or null", () => {
    for (const raw of [{}, undefined, null, { matchLabels: {}, matchExpressions: [] }]) {
      expect(selector(raw)).toEqual(EVERYTHING);
    }
    expect(selectorMatches(EVERYTHING, {})).toBe(true);
  });

  it("AND matchLabels and every operator, as Kubernetes reads them", () => {
    const s = selector({
      matchLabels: { app: "web" },
      matchExpressions: [
        { key: "tier", operator: "In", values: ["a", "b"] },
        { key: "env", operator: "NotIn", values: ["prod"] },
        { key: "team", operator: "Exists" },
        { key: "legacy", operator: "DoesNotExist", values: [] },
      ],
    });
    const base = { app: "web", tier: "a", team: "t" };
    expect(selectorMatches(s, base)).toBe(true);
    // NotIn holds for an object without the label, fails for one with a listed value.
    expect(selectorMatches(s, { ...base, env: "dev" })).toBe(true);
    expect(selectorMatches(s, { ...base, env: "prod" })).toBe(false);
    expect(selectorMatches(s, { ...base, tier: "c" })).toBe(false);
    expect(selectorMatches(s, { ...base, app: "db" })).toBe(false);
    expect(selectorMatches(s, { app: "web", tier: "a" })).toBe(false);
    expect(selectorMatches(s, { ...base, legacy: "" })).toBe(false);
    // An empty value is a value: "k=" matches only a label k with the empty value.
    expect(selectorMatches(selector({ matchLabels: { k: "" } }), { k: "" })).toBe(true);
    expect(selectorMatches(selector({ matchLabels: { k: "" } }), {})).toBe(false);
    // Labels inherited from Object.prototype are no labels.
    expect(selectorMatches(selector({ matchExpressions: [{ key: "constructor", operator: "Exists" }] }), {})).toBe(
      false,
    );
  });

  it("give equal keys to selectors that select alike, however written", () => {
    const a = selector({
      matchLabels: { b: "2", a: "1" },
      matchExpressions: [{ key: "c", operator: "In", values: ["y", "x", "x"] }],
    });
    const b = selector({
      matchExpressions: [
        { key: "c", operator: "In", values: ["x", "y"] },
        { key: "a", operator: "In", values: ["1"] },
      ],
      matchLabels: { b: "2" },
    });
    expect(a.key).toBe(b.key);
    expect(selectorText(a)).toBe("a=1,b=2,c in (x,y)");
    expect(selector({ matchLabels: { a: "1" } }).key).not.toBe(selector({ matchLabels: { a: "2" } }).key);
    expect(selectorText(selector({ matchExpressions: [{ key: "k", operator: "DoesNotExist" }] }))).toBe("!k");
  });

  it("are invalid, with a reason, when the API server would refuse them", () => {
    const reasons = [
      { matchExpressions: [{ key: "k", operator: "Equals", values: ["v"] }] },
      { matchExpressions: [{ key: "k", operator: "In", values: [] }] },
      { matchExpressions: [{ key: "k", operator: "NotIn" }] },
      { matchExpressions: [{ key: "k", operator: "Exists", values: ["v"] }] },
      { matchExpressions: [{ key: "", operator: "Exists" }] },
      { matchExpressions: [{ key: "k", operator: "In", values: [1] }] },
      { matchExpressions: {} },
      { matchLabels: { k: 1 } },
      { matchLabels: [] },
      "app=web",
    ].map((raw) => {
      const parsed = parseSelector(raw);
      return parsed.ok ? "read" : parsed.reason;
    });
    expect(reasons).toEqual([
      'matchExpressions[0]: unknown operator "Equals"',
      "matchExpressions[0]: In needs at least one value",
      "matchExpressions[0]: NotIn needs at least one value",
      "matchExpressions[0]: Exists takes no values",
      "matchExpressions[0]: key must be a non-empty string",
      "matchExpressions[0]: values must be strings",
      "matchExpressions must be a list",
      'matchLabels["k"] is not a string',
      "matchLabels must be an object",
      "a selector must be an object",
    ]);
  });
});
