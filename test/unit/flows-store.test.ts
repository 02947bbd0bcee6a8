/** The flow store: the newest records within its capacity, what matches, and its followers. */
import { describe, expect, it } from "vitest";
import { FlowStore } from "../../src/agent/flows/store";
import type { FlowRecord } from "../../src/flows/record";
import { flowRecord } from "../support/flow-record";

const numbered = (port: number, over: Partial<FlowRecord> = {}) =>
  flowRecord({ source: { ip: "10.0.0.5", port, kind: "pod", namespace: "a", pod: "client" }, ...over });
const ports = (records: FlowRecord[]) => records.map((r) => r.source.port);

describe("FlowStore", () => {
  it("keeps the newest records within its capacity, oldest first, counting what gave way", () => {
    const store = new FlowStore(3);
    expect(store.last(10)).toEqual([]);
    for (let port = 1; port <= 5; port++) store.add(numbered(port));
    expect(ports(store.last(10))).toEqual([3, 4, 5]);
    expect(ports(store.last(2))).toEqual([4, 5]);
    expect(store.last(0)).toEqual([]);
    expect(store.added).toBe(5);
    expect(store.overwritten).toBe(2);
  });

  it("gives the newest n that match", () => {
    const store = new FlowStore();
    for (let port = 1; port <= 6; port++) store.add(numbered(port, { verdict: port % 2 ? "dropped" : "forwarded" }));
    expect(ports(store.last(2, { verdict: ["dropped"] }))).toEqual([3, 5]);
    expect(ports(store.last(10, { verdict: ["forwarded"] }))).toEqual([2, 4, 6]);
  });

  it("tells each follower what matches its filter until it unsubscribes", () => {
    const store = new FlowStore(2);
    const dropped: number[] = [];
    const all: number[] = [];
    const stop = store.subscribe({ verdict: ["dropped"] }, (r) => dropped.push(r.source.port));
    store.subscribe({}, (r) => all.push(r.source.port));
    expect(store.following).toBe(2);
    store.add(numbered(1, { verdict: "dropped" }));
    store.add(numbered(2));
    stop();
    store.add(numbered(3, { verdict: "dropped" }));
    expect(dropped).toEqual([1]);
    expect(all).toEqual([1, 2, 3]);
    expect(store.following).toBe(1);
  });

  it("holds the kernel's count of records it lost, and refuses a capacity below one", () => {
    const store = new FlowStore();
    expect(store.droppedByKernel).toBe(0);
    store.droppedByKernel = 7;
    expect(store.droppedByKernel).toBe(7);
    expect(() => new FlowStore(0)).toThrow(/capacity/);
  });
});
