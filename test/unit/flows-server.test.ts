/**
 * /flows on the agent's HTTP server, listening on 127.0.0.1: the newest records that
 * match, following the new ones until the client goes, and its refusals.
 */
import { describe, expect, it } from "vitest";
import { FlowStore } from "../../src/agent/flows/store";
import type { FlowRecord } from "../../src/flows/record";
import { useFlowAgent } from "../support/flow-agent";
import { flowRecord } from "../support/flow-record";

const agent = useFlowAgent();

const numbered = (port: number, over: Partial<FlowRecord> = {}) =>
  flowRecord({ source: { ip: "10.0.0.5", port, kind: "pod", namespace: "a", pod: "client" }, ...over });
const ports = (text: string) =>
  text
    .split("\n")
    .filter(Boolean)
    .map((line) => (JSON.parse(line) as FlowRecord).source.port);

describe("GET /flows", () => {
  it("answers the newest records that match, one JSON object a line, oldest first", async () => {
    const store = new FlowStore();
    for (let port = 1; port <= 150; port++) store.add(numbered(port, { verdict: port % 2 ? "dropped" : "forwarded" }));
    const url = await agent(store);
    const all = await fetch(`${url}/flows`);
    expect(all.status).toBe(200);
    expect(all.headers.get("content-type")).toBe("application/x-ndjson");
    const text = await all.text();
    expect(ports(text)).toHaveLength(100);
    expect(ports(text).at(0)).toBe(51);
    expect(ports(text).at(-1)).toBe(150);
    expect(JSON.parse(text.split("\n")[0] ?? "")).toEqual(numbered(51, { verdict: "dropped" }));
    expect(ports(await (await fetch(`${url}/flows?last=3&verdict=dropped`)).text())).toEqual([145, 147, 149]);
    expect(await (await fetch(`${url}/flows?last=0`)).text()).toBe("");
  });

  it("with follow=1 sends each new match as it is added, until the client goes", async () => {
    const store = new FlowStore();
    store.add(numbered(1, { verdict: "dropped" }));
    const url = await agent(store);
    const abort = new AbortController();
    const res = await fetch(`${url}/flows?follow=1&verdict=dropped`, { signal: abort.signal });
    expect(res.status).toBe(200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = "";
    const readUntil = async (lines: number) => {
      while (text.split("\n").length <= lines) {
        const chunk = await reader.read();
        if (chunk.done) throw new Error(`the answer ended after ${JSON.stringify(text)}`);
        text += decoder.decode(chunk.value);
      }
    };
    await readUntil(1);
    expect(store.following).toBe(1);
    store.add(numbered(2));
    store.add(numbered(3, { verdict: "dropped" }));
    await readUntil(2);
    expect(ports(text)).toEqual([1, 3]);
    abort.abort();
    await expect.poll(() => store.following).toBe(0);
  });

  it("refuses a bad filter, naming it, and says how to turn flows on", async () => {
    const url = await agent(new FlowStore());
    const bad = await fetch(`${url}/flows?verdict=allowed`);
    expect(bad.status).toBe(400);
    expect(await bad.text()).toBe('bad verdict "allowed": forwarded | dropped | audit\n');
    expect((await fetch(`${url}/flows?last=-1`)).status).toBe(400);
    expect(await (await fetch(`${url}/flows?follow=yes`)).text()).toMatch(/bad follow "yes"/);
    const off = await fetch(`${await agent()}/flows`);
    expect(off.status).toBe(404);
    expect(await off.text()).toBe("flow records are off: start the agent with --flows\n");
  });
});
