/**
 * The results files the report reads (bench/results/*.json, named by their UTC start so
 * that names sort by time): every run, the newest of a kind, and how a section names the
 * run its figures come from.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { BenchResult } from "./result";

/** A results file and its run. */
export interface Run {
  file: string;
  r: BenchResult;
}

/** Every run of this schema in `dir`, oldest first. */
export function allRuns(dir: string): Run[] {
  if (!fs.existsSync(dir)) return [];
  const out: Run[] = [];
  for (const f of fs
    .readdirSync(dir)
    .filter((x) => x.endsWith(".json"))
    .sort()) {
    try {
      const r = JSON.parse(fs.readFileSync(path.join(dir, f), "utf8")) as BenchResult;
      if (r.schema === 1) out.push({ file: f, r });
    } catch {
      // not ours
    }
  }
  return out;
}

/**
 * The newest run of a kind that has `has`: a run of one section (--only) renders that
 * section without blanking the others.
 */
export function latest(
  dir: string,
  kind: "host" | "vm",
  has: (r: BenchResult) => boolean = () => true,
): Run | undefined {
  return allRuns(dir)
    .filter(({ r }) => r.kind === kind && has(r))
    .at(-1);
}

/** "results/<file> (commit abc1234, 2026-12-01)": which run a section's figures come from. */
export function runName({ file, r }: Run): string {
  return `\`results/${file}\` (commit ${r.machine.plugin.commit}, ${r.startedAt.slice(0, 10)})`;
}
