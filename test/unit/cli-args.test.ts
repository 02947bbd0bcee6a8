import { describe, expect, it } from "vitest";
import { type Flags, flagsFor, flagUsage, parseFlags, readFlags } from "../../src/args";

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

interface Opts {
  dir: string;
  count: number | undefined;
  cidrs: string[];
  portmap: boolean;
  json: boolean;
}

const FLAGS: Flags<Opts> = {
  dir: { field: "dir", type: "string", arg: "DIR", default: "/opt", help: "where (/opt)" },
  count: {
    field: "count",
    type: "string",
    arg: "N",
    default: undefined,
    parse: (text, flag) => {
      const n = Number(text);
      if (!Number.isInteger(n)) throw new Error(`${flag} must be a whole number`);
      return n;
    },
    help: "how many\nof them",
  },
  cidr: {
    field: "cidrs",
    type: "string",
    arg: "CIDR",
    list: true,
    default: [],
    parse: (t) => t.split(","),
    help: "ranges",
  },
  "no-portmap": { field: "portmap", type: "boolean", value: false, default: true, help: "no portmap" },
  json: { field: "json", type: "boolean", default: false, help: "JSON" },
};

describe("parseFlags", () => {
  const parse = (...args: string[]) => parseFlags(args, FLAGS, ERRORS);

  it("gives every field its default when no flag is given", () => {
    expect(parse()).toEqual({ dir: "/opt", count: undefined, cidrs: [], portmap: true, json: false });
  });

  it("sets each field from its flag: text as is, parsed, appended to a list, or a boolean's value", () => {
    expect(parse("--dir=/x", "--count", "3", "--cidr", "a,b", "--no-portmap", "--cidr=c", "--json")).toEqual({
      dir: "/x",
      count: 3,
      cidrs: ["a", "b", "c"],
      portmap: false,
      json: true,
    });
    // The last of a repeated flag wins; a list default is never shared between parses.
    expect(parse("--dir", "a", "--dir", "b").dir).toBe("b");
    expect(parse().cidrs).toEqual([]);
  });

  it("takes run-time defaults from `base`, which flags still override", () => {
    expect(parseFlags([], FLAGS, ERRORS, { dir: "/env" }).dir).toBe("/env");
    expect(parseFlags(["--dir=/flag"], FLAGS, ERRORS, { dir: "/env" }).dir).toBe("/flag");
  });

  it("refuses what readFlags refuses, and what a flag's parse refuses", () => {
    expect(() => parse("--bogus")).toThrow("unknown option --bogus");
    expect(() => parse("--count")).toThrow("--count needs a value");
    expect(() => parse("--count=2.5")).toThrow("--count must be a whole number");
  });

  it("builds the same specs one line each", () => {
    const flag = flagsFor<Opts>();
    expect(flag.string("dir", "DIR", "/opt", "where (/opt)")).toEqual(FLAGS.dir);
    expect(flag.list("cidrs", "CIDR", "ranges", (t) => t.split(","))).toMatchObject({
      ...FLAGS.cidr,
      parse: expect.any(Function),
    });
    expect(flag.boolean("portmap", "no portmap", false)).toEqual(FLAGS["no-portmap"]);
    expect(flag.boolean("json", "JSON")).toEqual({ ...FLAGS.json, value: true });
  });

  it("takes a flag's one-letter spelling as kubectl does: -o x, -ox", () => {
    const flags: Flags<{ output: string }> = {
      output: { field: "output", type: "string", short: "o", arg: "FORMAT", default: "table", help: "how" },
    };
    const output = (...args: string[]) => parseFlags(args, flags, ERRORS).output;
    expect([output(), output("-o", "wide"), output("-ojson"), output("--output=wide")]).toEqual([
      "table",
      "wide",
      "json",
      "wide",
    ]);
    expect(() => output("-o")).toThrow("-o needs a value");
    expect(() => output("-x")).toThrow("unknown option -x");
    expect(flagUsage(flags, 22)).toBe("  -o, --output FORMAT  how");
  });

  it("lists each flag with its argument, help in one column", () => {
    expect(flagUsage(FLAGS, 14).split("\n")).toEqual([
      "  --dir DIR    where (/opt)",
      "  --count N    how many",
      "               of them",
      "  --cidr CIDR  ranges",
      "  --no-portmap no portmap",
      "  --json       JSON",
    ]);
  });
});
