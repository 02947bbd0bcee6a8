/**
 * The socket bypass bench's own check: a run whose counters contradict its variant
 * (an "on" run that was not spliced, an "off" run that was) must stop the bench.
 */
import { describe, expect, it } from "vitest";
import { checkFailure, type SockBypassCheck } from "../../bench/lib/sockbypass";

const zero = { added: 0, redirectedMsgs: 0, redirectedBytes: 0, passedMsgs: 0 };
const run = (over: Partial<SockBypassCheck>): SockBypassCheck => ({
  variant: "on",
  size: 1024,
  test: "TCP_RR",
  bytes: 1_000_000,
  client: { ...zero },
  server: { ...zero },
  ...over,
});
const spliced = (bytes: number) => ({ added: 1, redirectedMsgs: 10, redirectedBytes: bytes, passedMsgs: 0 });

describe("socket bypass bench checks", () => {
  it("accepts an on run that redirected what its client sent", () => {
    expect(checkFailure(run({ client: spliced(990_000), server: spliced(1_000_000) }))).toBeUndefined();
  });

  it("refuses an on run whose sockets were never added", () => {
    expect(checkFailure(run({}))).toMatch(/not added/);
  });

  it("refuses an on run that sent most of its bytes through the stack", () => {
    expect(checkFailure(run({ client: spliced(500_000), server: spliced(1_000_000) }))).toMatch(/500000 of 1000000/);
  });

  it("refuses an on run whose server side was not spliced", () => {
    expect(checkFailure(run({ client: spliced(1_000_000), server: { ...spliced(0) } }))).toMatch(/server/);
  });

  it.each(["off", "loopback"] as const)(
    "accepts an untouched %s run and refuses one that moved a counter",
    (variant) => {
      expect(checkFailure(run({ variant }))).toBeUndefined();
      expect(checkFailure(run({ variant, server: { ...zero, passedMsgs: 1 } }))).toMatch(/passedMsgs/);
    },
  );
});
