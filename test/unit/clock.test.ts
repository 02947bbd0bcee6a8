/**
 * The lock queue orders processes by the time each arrived, so the clock must be one for
 * all of them. process.hrtime is not that clock under every runtime (Bun's counts from
 * its own start); ours reads CLOCK_MONOTONIC itself, which Node's hrtime also reads.
 */
import { expect, it } from "vitest";
import { monotonicNs } from "../../src/sys/clock";

it("reads the host's CLOCK_MONOTONIC, the clock every process shares", () => {
  const before = process.hrtime.bigint();
  const ours = monotonicNs();
  const after = process.hrtime.bigint();
  expect(ours).toBeGreaterThanOrEqual(before);
  expect(ours).toBeLessThanOrEqual(after);
});

it("never goes back", () => {
  let last = monotonicNs();
  for (let i = 0; i < 1000; i++) {
    const now = monotonicNs();
    expect(now).toBeGreaterThanOrEqual(last);
    last = now;
  }
});
