/**
 * Which run each part of bench/README.md's results comes from (bench/lib/report.ts): a
 * newer run of the control plane alone (`--only control`) replaces the control-plane
 * table and its targets, names its run, and leaves the older run's netperf tables shown.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { renderReport } from "../../bench/lib/report";
import type { BenchResult } from "../../bench/lib/result";
import { benchResult, cycle } from "./fixtures/bench-result";

const controlPlane = (ours: number): BenchResult["controlPlane"] => ({
  cycles: { ptp: cycle(40), "ours-embedded": cycle(ours) },
  storms: {},
  rss: {},
});

const netperf: BenchResult["netperf"] = {
  rounds: 1,
  seconds: 1,
  tests: ["TCP_RR"],
  placements: ["across"],
  order: ["host", "bridge"],
  crrConnections: {},
  samples: { host: { across: { TCP_RR: [1000] } }, bridge: { across: { TCP_RR: [900] } } } as NonNullable<
    BenchResult["netperf"]
  >["samples"],
  errors: [],
};

describe("bench report: the runs it shows", () => {
  let dir = "";
  afterEach(() => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("takes the control plane from the newest run that measured it, and netperf from its own", () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "nk-bench-picks-"));
    const results = path.join(dir, "results");
    fs.mkdirSync(results);
    const write = (file: string, r: BenchResult) => fs.writeFileSync(path.join(results, file), JSON.stringify(r));
    write(
      "2026-12-01T000000Z-6.18.44-fc.json",
      benchResult("host", "2026-12-01T00:00:00Z", undefined, { netperf, controlPlane: controlPlane(100) }),
    );
    write(
      "2026-12-02T000000Z-6.18.44-fc.json",
      benchResult("host", "2026-12-02T00:00:00Z", undefined, { controlPlane: controlPlane(60) }),
    );
    const readme = path.join(dir, "README.md");
    fs.writeFileSync(readme, "# bench\n");
    renderReport(results, readme);
    const text = fs.readFileSync(readme, "utf8");
    expect(text).toContain("| host ↔ host ");
    expect(text).not.toContain("_netperf skipped in this run._");
    expect(text).toMatch(/### Control plane[^\n]*\n\nFrom `results\/2026-12-02T000000Z-6.18.44-fc.json`/);
    expect(text).toContain("1.50× (60 ms against 40 ms)");
    // The older run's control plane is left to the history table.
    const section = text.slice(text.indexOf("### Control plane"), text.indexOf("### Start-up"));
    expect(section).toContain("1.50×");
    expect(section).not.toContain("2.50×");
  });
});
