import { describe, expect, it } from "vitest";
import { readFlags } from "../../src/cli/args";

const TABLE = { json: { type: "boolean" }, dir: { type: "string" } } as const;
const ERRORS = {
  unknown: (arg: string) => new Error(`unknown option ${arg}`),
  noValue: (flag: string) => new Error(`${flag} needs a value`),
};
const read = (...args: string[]) => [...readFlags(args, TABLE, ERRORS)].map((f) => [f.name, f.value]);

describe("readFlags", () => {
  it("reads flags in order, with the value after a string flag or after =", () => {
    expect(read("--json", "--dir", "a", "--dir=b")).toEqual([
      ["json", undefined],
      ["dir", "a"],
      ["dir", "b"],
    ]);
  });

  it("takes the next argument as a string flag's value, whatever it looks like", () => {
    expect(read("--dir", "--json")).toEqual([["dir", "--json"]]);
  });

  it.each([
    [["--bogus"], "unknown option --bogus"],
    [["-j"], "unknown option -j"],
    [["positional"], "unknown option positional"],
    [["--"], "unknown option --"],
    [["--json=yes"], "unknown option --json=yes"],
    [["--dir"], "--dir needs a value"],
    [["--dir", ""], "--dir needs a value"],
  ])("refuses %j", (args, message) => {
    expect(() => read(...args)).toThrow(message);
  });

  it("reports the first problem where it stands", () => {
    const seen: string[] = [];
    expect(() => {
      for (const f of readFlags(["--dir", "a", "--bogus", "--dir"], TABLE, ERRORS)) seen.push(f.value ?? "");
    }).toThrow("unknown option --bogus");
    expect(seen).toEqual(["a"]);
  });
});
