/** runInBackground: outputs kept, the exit code, a run past its time killed, a command that cannot start. */
import { describe, expect, it } from "vitest";
import { runInBackground } from "../support/background";

describe("runInBackground", () => {
  it("keeps both outputs and the exit code", async () => {
    const r = await runInBackground("sh", ["-c", "echo out; echo err >&2; exit 3"], 10_000);
    expect(r).toEqual({ code: 3, stdout: "out\n", stderr: "err\n" });
  });

  it("kills a run past its time, and says why a command could not start", async () => {
    expect((await runInBackground("sleep", ["30"], 200)).code).toBeNull();
    const missing = await runInBackground("/nonexistent/command", [], 10_000);
    expect(missing.code).toBeNull();
    expect(missing.error).toMatch(/ENOENT/);
  });
});
