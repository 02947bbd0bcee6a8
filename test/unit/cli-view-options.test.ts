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
import { DEFAULT_BPFFS_ROOT } from "../../src/cni/config";
import { DEFAULT_AGENT_STATE_DIR } from "../../src/commands/agent-state";

describe("the view commands' flags", () => {
  it("default to the node's own places", () => {
    expect(parseEndpointsOptions([])).toEqual({ json: false, bpffsRoot: DEFAULT_BPFFS_ROOT });
    expect(parseStatusOptions([])).toEqual({
      json: false,
      bpffsRoot: DEFAULT_BPFFS_ROOT,
      stateDir: DEFAULT_AGENT_STATE_DIR,
    });
    expect(parseMonitorOptions([])).toMatchObject({ pod: undefined, direction: undefined, forMs: undefined });
  });

  it("take every flag in both spellings", () => {
    expect(parseStatusOptions(["--json", "--bpffs-root", "/b", "--state-dir=/s"])).toEqual({
      json: true,
      bpffsRoot: "/b",
      stateDir: "/s",
    });
    expect(
      parseMonitorOptions(["--pod", "x/a", "--reason=denied", "--direction", "egress", "--for-seconds", "1.5"]),
    ).toMatchObject({ pod: "x/a", reason: "denied", direction: "egress", forMs: 1500 });
  });

  it("refuse what a command does not take, with its usage", () => {
    expect(() => parseEndpointsOptions(["--state-dir", "/s"])).toThrow(UsageError);
    expect(() => parseEndpointsOptions(["--state-dir", "/s"])).toThrow(
      `unknown option --state-dir\n${ENDPOINTS_USAGE}`,
    );
    expect(() => parseStatusOptions(["--help-me"])).toThrow(STATUS_USAGE);
    expect(() => parseStatusOptions(["--bpffs-root"])).toThrow("--bpffs-root needs a value");
    expect(() => parseMonitorOptions(["--direction", "up"])).toThrow("--direction must be ingress or egress");
    expect(() => parseMonitorOptions(["--for-seconds", "0"])).toThrow("--for-seconds must be a positive number");
  });

  it("list every flag in the usage", () => {
    for (const flag of ["--json", "--bpffs-root DIR"]) expect(ENDPOINTS_USAGE).toContain(flag);
    for (const flag of ["--json", "--bpffs-root DIR", "--state-dir DIR"]) expect(STATUS_USAGE).toContain(flag);
    for (const flag of ["--pod NS/NAME", "--reason REASON", "--direction DIR", "--for-seconds N"]) {
      expect(MONITOR_USAGE).toContain(flag);
    }
  });
});
