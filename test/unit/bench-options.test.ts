/**
 * The bench's options (bench/lib/options.ts): each kind's defaults, the flags read as the
 * CLI reads its own, in the order given.
 */
import { describe, expect, it } from "vitest";
import { parseOptions, SECTIONS } from "../../bench/lib/options";

describe("bench options", () => {
  it("start from the kind's defaults: the full bench here, a correctness round in the guest", () => {
    expect(parseOptions("host", [])).toMatchObject({ rounds: 7, cycles: 30, skip: new Set() });
    expect(parseOptions("vm", [])).toMatchObject({
      rounds: 3,
      cycles: 0,
      skip: new Set(["control", "startup", "agent"]),
    });
  });

  it("take a value after the flag or after '=', and apply the flags in order", () => {
    const o = parseOptions("host", ["--rounds", "4", "--seconds=3", "--quick", "--cycles", "9"]);
    // --quick lowers what came before it; what comes after it stands.
    expect(o).toMatchObject({ rounds: 1, seconds: 1, cycles: 9, storm: 10 });
  });

  it("--only skips every other section, --smoke all but the applications", () => {
    const only = parseOptions("host", ["--only", "crossings,netperf"]);
    expect([...only.skip].sort()).toEqual(SECTIONS.filter((s) => s !== "crossings" && s !== "netperf").sort());
    const smoke = parseOptions("host", ["--smoke"]);
    expect(smoke.smoke).toBe(true);
    expect([...smoke.skip].sort()).toEqual(SECTIONS.filter((s) => s !== "apps").sort());
  });

  it("refuse what they do not know, a missing number, a negative one and an unknown section", () => {
    expect(() => parseOptions("host", ["--round", "3"])).toThrow("unknown option --round");
    expect(() => parseOptions("host", ["extra"])).toThrow("unknown option extra");
    expect(() => parseOptions("host", ["--quick=yes"])).toThrow("unknown option --quick=yes");
    expect(() => parseOptions("host", ["--rounds"])).toThrow("--rounds needs a value");
    expect(() => parseOptions("host", ["--rounds", "-1"])).toThrow("--rounds needs a number");
    expect(() => parseOptions("host", ["--only", "crossings,nope"])).toThrow("--only: unknown section nope");
    expect(() => parseOptions("host", ["--baseline", "/nonexistent/nkc"])).toThrow("does not exist");
  });
});
