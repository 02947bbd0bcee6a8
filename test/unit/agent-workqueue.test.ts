/**
 * The agent's work queue (src/agent/kube/workqueue.ts): one key at a time, a key queued once
 * however often it is added, a key added during its own sync synced again after it,
 * retries with a pause that doubles per failure and a bucket bounding retries node-wide.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { WorkQueue } from "../../src/agent/kube/workqueue";

afterEach(() => {
  vi.useRealTimers();
});

/** Timers and the clock faked; the queue's turns (setImmediate) stay real. */
const fakeTime = () => vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });

/** Lets the queue take its turns, then moves the clock by `ms`. */
async function advance(ms: number): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
  if (ms > 0) vi.advanceTimersByTime(ms);
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}

function recorder() {
  const failures: { name: string; retryInMs: number }[] = [];
  return {
    failures,
    observer: {
      failed: (_k: string, name: string, _e: Error, retryInMs: number) => failures.push({ name, retryInMs }),
    },
  };
}

describe("the agent's work queue", () => {
  it("coalesces a key queued twice, keeps order, and never runs two syncs at once", async () => {
    const { observer } = recorder();
    const q = new WorkQueue(observer);
    const seen: string[] = [];
    let running = 0;
    let most = 0;
    q.register("k", async (name) => {
      running++;
      most = Math.max(most, running);
      await new Promise((r) => setTimeout(r, 5));
      seen.push(name);
      running--;
    });
    for (const n of ["a", "b", "a", "c", "b"]) q.add("k", n);
    expect(q.length).toBe(3);
    await q.idle();
    expect(seen).toEqual(["a", "b", "c"]);
    expect(most).toBe(1);
  });

  it("syncs a key again when it was added during its own sync (the sync saw older objects)", async () => {
    const { observer } = recorder();
    const q = new WorkQueue(observer);
    let version = 1;
    const saw: number[] = [];
    // The sync says when it has read its objects: a timer racing it (a loaded machine's
    // event loop may run the timer first) would let it read the newer ones.
    let started = () => {};
    const syncing = new Promise<void>((resolve) => {
      started = resolve;
    });
    q.register("k", async () => {
      const v = version;
      started();
      await new Promise((r) => setTimeout(r, 5));
      saw.push(v);
    });
    q.add("k", "x");
    await syncing;
    version = 2;
    q.add("k", "x"); // during the sync
    await q.idle();
    await q.idle();
    expect(saw).toEqual([1, 2]);
  });

  it("retries a failing key after a pause that doubles, forgets failures after a success, and tells each", async () => {
    fakeTime();
    const { observer, failures } = recorder();
    const q = new WorkQueue(observer, { firstMs: 100, maxMs: 350, perSecond: 1000, burst: 1000 });
    let calls = 0;
    q.register("k", () => {
      calls++;
      if (calls <= 4) throw new Error(`attempt ${calls}`);
    });
    q.add("k", "x");
    await advance(0);
    expect(calls).toBe(1);
    await advance(99);
    expect(calls).toBe(1);
    await advance(1);
    expect(calls).toBe(2);
    await advance(200);
    await advance(350);
    await advance(350);
    expect(calls).toBe(5);
    expect(failures.map((f) => f.retryInMs)).toEqual([100, 200, 350, 350]);
    // A success forgets: the next failure starts from the first pause again.
    q.register("j", () => {
      throw new Error("once");
    });
    q.add("j", "y");
    await advance(0);
    expect(failures.at(-1)).toEqual({ name: "y", retryInMs: 100 });
    q.stop();
  });

  it("bounds retries node-wide: past the burst, each waits for a token", async () => {
    fakeTime();
    const { observer, failures } = recorder();
    const q = new WorkQueue(observer, { firstMs: 1, maxMs: 1, perSecond: 10, burst: 3 });
    q.register("k", () => {
      throw new Error("down");
    });
    for (const n of ["a", "b", "c", "d", "e"]) q.add("k", n);
    await advance(0);
    // Three from the burst at once, then one token per 100 ms.
    expect(failures.map((f) => f.retryInMs)).toEqual([1, 1, 1, 100, 200]);
    q.stop();
  });

  it("syncs a key waiting for its retry at once when it is added again", async () => {
    fakeTime();
    const { observer } = recorder();
    const q = new WorkQueue(observer, { firstMs: 10_000, maxMs: 10_000, perSecond: 100, burst: 100 });
    let calls = 0;
    q.register("k", () => {
      calls++;
      if (calls === 1) throw new Error("first");
    });
    q.add("k", "x");
    await advance(0);
    q.add("k", "x");
    await advance(0);
    expect(calls).toBe(2);
    expect(q.length).toBe(0);
  });
});
