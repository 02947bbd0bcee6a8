/**
 * A vitest reporter that repeats each failed test, and the first lines of why it
 * failed, after the run's summary. A long run's log is often read from its tail
 * only (a CI page, `tail`), where the default reporter has left just the last
 * failure's stack trace; this keeps the names and reasons of every failure there.
 */
import type { Reporter, TestModule } from "vitest/node";

const LINES_PER_FAILURE = 6;
const LINE_WIDTH = 200;

const clip = (text: string): string[] =>
  text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .slice(0, LINES_PER_FAILURE)
    .map((line) => (line.length > LINE_WIDTH ? `${line.slice(0, LINE_WIDTH)}…` : line));

export default class FailureDigest implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<{ message?: string }>): void {
    const out: string[] = [];
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        const result = test.result();
        if (result.state !== "failed") continue;
        out.push(`✗ ${module.moduleId.replace(`${process.cwd()}/`, "")} > ${test.fullName}`);
        for (const error of result.errors ?? [])
          out.push(...clip(error.message ?? String(error)).map((l) => `    ${l}`));
      }
      for (const error of module.errors()) out.push(`✗ ${module.moduleId}: ${clip(error.message ?? "").join(" ")}`);
    }
    for (const error of unhandledErrors) out.push(`✗ unhandled: ${clip(error.message ?? "").join(" ")}`);
    if (out.length === 0) return;
    process.stdout.write(`\nFailures (repeated from above):\n${out.join("\n")}\n`);
  }
}
