/**
 * A vitest reporter that keeps a file saying which test files are running, since when,
 * and which test each is in, when NETKIT_TEST_PROGRESS names that file (the guest runners
 * set it to a file in their shared folder). A guest's time-out kills everything inside
 * at once; its runner then prints this file, so a guard that fires names the test it
 * stopped. Without the variable it does nothing.
 */
import * as fs from "node:fs";
import type { Reporter, TestCase, TestModule } from "vitest/node";

interface Running {
  since: number;
  test: string | undefined;
}

export default class Progress implements Reporter {
  private readonly file = process.env.NETKIT_TEST_PROGRESS;
  private readonly running = new Map<string, Running>();
  private lastEnded: { file: string; at: number } | undefined;

  onTestModuleStart(module: TestModule): void {
    this.running.set(this.name(module), { since: Date.now(), test: undefined });
    this.write();
  }

  onTestCaseReady(test: TestCase): void {
    const entry = this.running.get(this.name(test.module));
    if (entry) entry.test = test.fullName;
    this.write();
  }

  onTestModuleEnd(module: TestModule): void {
    this.running.delete(this.name(module));
    this.lastEnded = { file: this.name(module), at: Date.now() };
    this.write();
  }

  private name(module: TestModule): string {
    return module.moduleId.replace(`${process.cwd()}/`, "");
  }

  private write(): void {
    if (!this.file) return;
    const now = Date.now();
    const lines = [...this.running].map(
      ([file, r]) => `${file} (for ${Math.round((now - r.since) / 1000)} s)${r.test ? `, in "${r.test}"` : ""}`,
    );
    // Between files (or after the last): what ended last, so a stall there is placed too.
    if (lines.length === 0 && this.lastEnded) {
      lines.push(
        `no file running; the last, ${this.lastEnded.file}, ended at ${new Date(this.lastEnded.at).toISOString()}`,
      );
    }
    // Write and rename: a reader never sees half a file.
    const tmp = `${this.file}.tmp`;
    fs.writeFileSync(tmp, lines.length > 0 ? `${lines.join("\n")}\n` : "");
    fs.renameSync(tmp, this.file);
  }
}
