/**
 * The flow filter: each field against the record's ends, OR within a field and AND
 * across fields, its query both ways, and refusals that name the bad value.
 */
import { describe, expect, it } from "vitest";
import {
  type FlowFilter,
  FlowFilterError,
  filterFromQuery,
  filterToQuery,
  matchesFlow,
  readFilterValue,
} from "../../src/flows/filter";
import { flowRecord } from "../support/flow-record";

const fromWorld = flowRecord({
  direction: "ingress",
  source: { ip: "203.0.113.9", port: 5353, kind: "world" },
  destination: { ip: "10.0.1.8", port: 53, kind: "pod", namespace: "kube-system", pod: "dns" },
  subject: "kube-system/dns",
  protocol: "UDP",
  verdict: "dropped",
  reason: "denied",
  policy: "default deny",
  policies: ["kube-system/deny-all"],
});

const matches = (filter: FlowFilter, record = flowRecord()) => matchesFlow(filter, record);

describe("matchesFlow", () => {
  it("matches everything when empty", () => {
    expect(matches({})).toBe(true);
    expect(matches({ pod: [] })).toBe(true);
  });

  it("matches pods by end, exactly or by namespace", () => {
    expect(matches({ fromPod: ["a/client"] })).toBe(true);
    expect(matches({ fromPod: ["b/server"] })).toBe(false);
    expect(matches({ toPod: ["b/"] })).toBe(true);
    expect(matches({ toPod: ["a/"] })).toBe(false);
    expect(matches({ toPod: ["b/serv"] })).toBe(false);
    expect(matches({ pod: ["b/server"] })).toBe(true);
    expect(matches({ pod: ["a/"] })).toBe(true);
    expect(matches({ pod: ["c/"] })).toBe(false);
    // A world end has no pod: no pattern matches it.
    expect(matches({ fromPod: ["kube-system/"] }, fromWorld)).toBe(false);
  });

  it("matches either end's namespace, port, and the record's own fields", () => {
    expect(matches({ namespace: ["a"] })).toBe(true);
    expect(matches({ namespace: ["c"] })).toBe(false);
    expect(matches({ port: [80] })).toBe(true);
    expect(matches({ port: [41234] })).toBe(true);
    expect(matches({ port: [443] })).toBe(false);
    expect(matches({ verdict: ["dropped"] }, fromWorld)).toBe(true);
    expect(matches({ verdict: ["forwarded"] }, fromWorld)).toBe(false);
    expect(matches({ direction: ["egress"] })).toBe(false);
    expect(matches({ node: ["node-a"] })).toBe(true);
    expect(matches({ node: ["node-b"] })).toBe(false);
  });

  it("reads protocols in any case, or by number", () => {
    expect(matches({ protocol: ["tcp"] })).toBe(true);
    expect(matches({ protocol: ["6"] })).toBe(true);
    expect(matches({ protocol: ["UDP"] })).toBe(false);
    expect(matches({ protocol: ["udp"] }, fromWorld)).toBe(true);
    expect(matches({ protocol: ["47"] }, flowRecord({ protocol: "47" }))).toBe(true);
  });

  it("matches a policy by part of the rule or of a policy's name", () => {
    expect(matches({ policy: ["b/allow-a"] })).toBe(true);
    expect(matches({ policy: ["rule 0"] })).toBe(true);
    expect(matches({ policy: ["deny-all"] }, fromWorld)).toBe(true);
    expect(matches({ policy: ["deny-all"] })).toBe(false);
  });

  it("ORs the values of a field and ANDs the fields", () => {
    expect(matches({ verdict: ["dropped", "forwarded"] })).toBe(true);
    expect(matches({ verdict: ["dropped", "audit"] })).toBe(false);
    expect(matches({ verdict: ["forwarded"], port: [80], toPod: ["b/"] })).toBe(true);
    expect(matches({ verdict: ["forwarded"], port: [443], toPod: ["b/"] })).toBe(false);
  });
});

describe("the filter's query", () => {
  it("reads every key, repeated ones as several values", () => {
    const query = new URLSearchParams(
      "from-pod=a/client&to-pod=b/&pod=c/x&namespace=d&verdict=dropped&verdict=audit&protocol=TCP&port=80&policy=allow&direction=egress&node=n1",
    );
    expect(filterFromQuery(query)).toEqual({
      fromPod: ["a/client"],
      toPod: ["b/"],
      pod: ["c/x"],
      namespace: ["d"],
      verdict: ["dropped", "audit"],
      protocol: ["TCP"],
      port: [80],
      policy: ["allow"],
      direction: ["egress"],
      node: ["n1"],
    });
    expect(filterFromQuery(new URLSearchParams("last=5&follow=1"))).toEqual({});
  });

  it("round-trips", () => {
    const filter: FlowFilter = { toPod: ["b/server"], verdict: ["dropped", "forwarded"], port: [53, 80], node: ["n"] };
    expect(filterToQuery(filter).toString()).toBe(
      "to-pod=b%2Fserver&verdict=dropped&verdict=forwarded&port=53&port=80&node=n",
    );
    expect(filterFromQuery(filterToQuery(filter))).toEqual(filter);
  });

  it("refuses a bad value, naming it", () => {
    const bad = (query: string) => () => filterFromQuery(new URLSearchParams(query));
    expect(bad("verdict=allowed")).toThrow(new FlowFilterError('bad verdict "allowed": forwarded | dropped | audit'));
    expect(bad("port=80000")).toThrow(/bad port "80000"/);
    expect(bad("port=http")).toThrow(/bad port "http"/);
    expect(bad("from-pod=client")).toThrow(/bad from-pod "client": namespace\/name/);
    expect(bad("to-pod=/x")).toThrow(/bad to-pod "\/x"/);
    expect(bad("pod=a/b/c")).toThrow(/bad pod "a\/b\/c"/);
    expect(bad("namespace=a/b")).toThrow(/bad namespace "a\/b"/);
    expect(bad("protocol=GRE")).toThrow(/bad protocol "GRE"/);
    expect(bad("direction=in")).toThrow(/bad direction "in"/);
    expect(() => readFilterValue("port", "-1")).toThrow(FlowFilterError);
  });
});
