/**
 * Where the agent rows' verbs spend their time (bench/lib/verb-times.ts and the control
 * plane's report): the times the verbs' own process left in verbs.log, against the
 * runtime's wall times of the same cycles.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { CpConfig } from "../../bench/lib/control-plane";
import { handOverLine } from "../../bench/lib/control-plane-report";
import { summarize } from "../../bench/lib/stats";
import { inProcessTimes } from "../../bench/lib/verb-times";
import { benchResult } from "./fixtures/bench-result";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function configWithLog(lines: string[] | undefined): CpConfig {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkc-verb-times-"));
  dirs.push(dir);
  if (lines) fs.writeFileSync(path.join(dir, "verbs.log"), lines.map((l) => `${l}\n`).join(""));
  return { id: "ours-agent", conf: { agentStateDir: dir } } as unknown as CpConfig;
}

/** Wall times ADD `add` ms and DEL `del` ms in every cycle. */
const wall = (add: number, del: number) => ({
  firstAddMs: add,
  add: summarize([add]),
  del: summarize([del]),
  cycle: summarize([add + del]),
  failures: 0,
  samples: { add: [add], del: [del] },
});

describe("inProcessTimes", () => {
  it("takes each verb's recorded times after the warm-up ones, failures left out", () => {
    const cfg = configWithLog([
      "ADD 90.000 ok", // warm-up: the first ADD loads the node's programs
      "DEL 50.000 ok",
      "ADD 80.000 ok",
      "DEL 40.000 ok",
      "ADD 20.000 ok",
      "DEL 10.000 ok",
      "ADD 5.000 error",
      "CHECK 3.000 ok",
      "ADD 30.000 ok",
      "DEL 12.000 ok",
    ]);
    const t = inProcessTimes(cfg, 2);
    expect(t?.add.n).toBe(2);
    expect(t?.add.median).toBeCloseTo(25);
    expect(t?.del.n).toBe(2);
    expect(t?.del.median).toBeCloseTo(11);
  });

  it("is nothing for a configuration with no state directory, and empty before any verb", () => {
    expect(inProcessTimes({ id: "ptp", conf: {} } as unknown as CpConfig, 2)).toBeUndefined();
    expect(inProcessTimes(configWithLog(undefined), 2)?.add.n).toBe(0);
  });
});

describe("the hand-over line", () => {
  it("says how much of each row's cycle was outside the verb, and what handing it over adds", () => {
    const r = benchResult("host", "2026-12-07T00:00:00Z", undefined, {
      controlPlane: {
        cycles: { "ours-agent": wall(40, 20), "ours-agent-stopped": wall(36, 18) },
        storms: {},
        rss: {},
        inProcess: {
          "ours-agent": { add: summarize([20]), del: summarize([10]) },
          "ours-agent-stopped": { add: summarize([26]), del: summarize([12]) },
        },
      },
    });
    const line = handOverLine(r) ?? "";
    expect(line).toMatch(
      /ADD 20(\.0)? ms of 40(\.0)? ms, DEL 10(\.0)? ms of 20(\.0)? ms, 30(\.0)? ms of the cycle outside/,
    );
    expect(line).toMatch(
      /ADD 26(\.0)? ms of 36(\.0)? ms, DEL 12(\.0)? ms of 18(\.0)? ms, 16(\.0)? ms of the cycle outside/,
    );
    expect(line).toMatch(/Handing ADD and DEL over costs 14(\.0)? ms a cycle/);
  });

  it("is left out of runs that did not measure it", () => {
    const r = benchResult("host", "2026-12-07T00:00:00Z", undefined, {
      controlPlane: { cycles: { "ours-agent": wall(40, 20) }, storms: {}, rss: {} },
    });
    expect(handOverLine(r)).toBeUndefined();
  });
});
