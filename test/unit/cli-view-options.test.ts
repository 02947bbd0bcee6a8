/**
 * The flags of endpoints, status and monitor: defaults, values, refusals that show the
 * command's usage, and a usage that lists every flag the command takes.
 */
import { describe, expect, it } from "vitest";
import {
  ENDPOINTS_USAGE,
  MONITOR_USAGE,
  parseEndpointsOptions,
  parseMonitorOptions,
  parseStatusOptions,
  STATUS_USAGE,
  UsageError,
} from "../../src/cli/view-options";
import { DEFAULT_BPFFS_ROOT } from "../../src/cni/defaults";
import { DEFAULT_AGENT_STATE_DIR } from "../../src/commands/agent-state";

describe("the view commands' flags", () => {
  it("default to the node's own places", () => {
    expect(parseEndpointsOptions([])).toEqual({
      output: "table",
      bpffsRoot: DEFAULT_BPFFS_ROOT,
      stateDir: DEFAULT_AGENT_STATE_DIR,
    });
    expect(parseStatusOptions([])).toEqual({
      output: "table",
      bpffsRoot: DEFAULT_BPFFS_ROOT,
      stateDir: DEFAULT_AGENT_STATE_DIR,
    });
    expect(parseMonitorOptions([])).toMatchObject({
      output: "table",
      pod: undefined,
      direction: undefined,
      forMs: undefined,
    });
  });

  it("take every flag in both spellings", () => {
    expect(parseStatusOptions(["--output", "wide", "--bpffs-root", "/b", "--state-dir=/s"])).toEqual({
      output: "wide",
      bpffsRoot: "/b",
      stateDir: "/s",
    });
    expect(
      parseMonitorOptions(["--pod", "x/a", "--reason=denied", "--direction", "egress", "--for-seconds", "1.5"]),
    ).toMatchObject({ pod: "x/a", reason: "denied", direction: "egress", forMs: 1500 });
  });

  it("take -o/--output as kubectl does, and --json as -o json", () => {
    for (const parse of [parseEndpointsOptions, parseStatusOptions, parseMonitorOptions]) {
      expect(parse(["-o", "json"]).output).toBe("json");
      expect(parse(["-owide"]).output).toBe("wide");
      expect(parse(["--output=table"]).output).toBe("table");
      expect(parse(["--json"]).output).toBe("json");
      // The last one given wins, whichever spelling.
      expect(parse(["--json", "-o", "wide"]).output).toBe("wide");
      expect(parse(["-o", "wide", "--json"]).output).toBe("json");
    }
    // Only what streams prints JSON lines.
    expect(parseMonitorOptions(["-o", "jsonl"]).output).toBe("jsonl");
  });

  it("refuse an output format a command does not print, naming those it does", () => {
    expect(() => parseEndpointsOptions(["-o", "yaml"])).toThrow(UsageError);
    expect(() => parseEndpointsOptions(["-o", "yaml"])).toThrow("-o must be table, wide or json, not yaml");
    expect(() => parseStatusOptions(["--output=jsonl"])).toThrow("--output must be table, wide or json, not jsonl");
    expect(() => parseMonitorOptions(["-o", "name"])).toThrow("-o must be table, wide, json or jsonl, not name");
    expect(() => parseStatusOptions(["-o"])).toThrow("-o needs a value");
  });

  it("refuse what a command does not take, with its usage", () => {
    expect(() => parseEndpointsOptions(["--pod", "x/a"])).toThrow(UsageError);
    expect(() => parseEndpointsOptions(["--pod", "x/a"])).toThrow(`unknown option --pod\n${ENDPOINTS_USAGE}`);
    expect(() => parseStatusOptions(["--help-me"])).toThrow(STATUS_USAGE);
    expect(() => parseStatusOptions(["--bpffs-root"])).toThrow("--bpffs-root needs a value");
    expect(() => parseMonitorOptions(["--direction", "up"])).toThrow("--direction must be ingress or egress");
    expect(() => parseMonitorOptions(["--for-seconds", "0"])).toThrow("--for-seconds must be a positive number");
  });

  it("list every flag in the usage", () => {
    for (const usage of [ENDPOINTS_USAGE, STATUS_USAGE, MONITOR_USAGE]) {
      for (const flag of [
        "-o, --output FORMAT",
        "table | wide | json",
        "--json",
        "--bpffs-root DIR",
        "--state-dir DIR",
      ]) {
        expect(usage).toContain(flag);
      }
      expect(usage).toMatch(/--json +the same as -o json/);
    }
    expect(STATUS_USAGE).toContain("wide: the same");
    expect(MONITOR_USAGE).toContain("table | wide | json | jsonl");
    for (const flag of ["--pod NS/NAME", "--reason REASON", "--direction DIR", "--for-seconds N"]) {
      expect(MONITOR_USAGE).toContain(flag);
    }
  });
});
