/**
 * Slots of compiled policies (src/agent/policy-slots.ts): pods whose rules mean the same
 * share one; a change of peers rewrites it in place; a change of rules moves the pod to
 * a slot written whole before its entry switches, and the old one goes after.
 */
import { describe, expect, it } from "vitest";
import { type PodRules, PolicySlots } from "../../src/agent/policy-slots";
import { decodePeerKey } from "../../src/bpf/policy-abi";
import type { TableWrite } from "../../src/bpf/policy-tables";

const rules = (peers: string[], port = 80): PodRules => ({
  ingress: [{ peers: peers.map((cidr) => ({ cidr, except: [] })), ports: [{ protocol: "TCP", from: port, to: port }] }],
  egress: undefined,
  origins: { ingress: ["ns/allow ingress[0]"], egress: [] },
});

function recorder() {
  const log: string[] = [];
  const writer = {
    writeSlot: (w: { peers: TableWrite[]; ports: TableWrite[] }) => {
      for (const x of w.peers) {
        const k = decodePeerKey(x.key);
        log.push(`${x.value ? "set" : "del"} peer ${k.slot} ${k.prefix}`);
      }
      for (const x of w.ports) log.push(`${x.value ? "set" : "del"} port ${x.key.readUInt32LE(4)}`);
    },
  };
  return { log, writer };
}

describe("policy slots", () => {
  it("share a slot between pods whose rules mean the same, and rewrite only peers in place", () => {
    const { log, writer } = recorder();
    const slots = new PolicySlots(writer);
    const switched: string[] = [];
    const a = slots.place("ns/a", rules(["10.0.0.1/32"]), (s) => switched.push(`a→${s}`));
    const b = slots.place("ns/b", rules(["10.0.0.1/32"]), (s) => switched.push(`b→${s}`));
    expect(a).toBe(b);
    expect(slots.size).toBe(1);
    log.length = 0;
    // A new peer of the selected set: one peer added, nothing else.
    slots.place("ns/a", rules(["10.0.0.1/32", "10.0.0.2/32"]), () => {});
    expect(log).toEqual([`set peer ${a} 10.0.0.2/32`]);
    expect(switched).toEqual([`a→${a}`, `b→${a}`]);
  });

  it("moves a pod whose rules change to a slot written before the switch, and frees the old after", () => {
    const { log, writer } = recorder();
    const slots = new PolicySlots(writer);
    const first = slots.place("ns/a", rules(["10.0.0.1/32"]), () => {});
    log.length = 0;
    const second = slots.place("ns/a", rules(["10.0.0.1/32"], 443), (s) => log.push(`switch ${s}`));
    expect(second).not.toBe(first);
    const switchAt = log.indexOf(`switch ${second}`);
    expect(log.slice(0, switchAt).every((l) => l.startsWith("set") && l.includes(` ${second}`))).toBe(true);
    expect(log.slice(switchAt + 1).every((l) => l.startsWith("del") && l.includes(` ${first}`))).toBe(true);
    expect(log.slice(switchAt + 1).length).toBeGreaterThan(0);
    expect(slots.size).toBe(1);
  });

  it("keeps a slot while another pod uses it; frees it with its last pod; never leaves a fresh one behind", () => {
    const { log, writer } = recorder();
    const slots = new PolicySlots(writer);
    const s = slots.place("ns/a", rules(["10.0.0.1/32"]), () => {});
    slots.place("ns/b", rules(["10.0.0.1/32"]), () => {});
    log.length = 0;
    slots.release("ns/a");
    expect(log).toEqual([]);
    slots.release("ns/b");
    expect(log.every((l) => (l.startsWith("del") && l.includes(` ${s} `)) || l === `del port ${s}`)).toBe(true);
    expect(slots.size).toBe(0);
    expect(() =>
      slots.place("ns/c", rules(["10.0.0.9/32"]), () => {
        throw new Error("the map is full");
      }),
    ).toThrow("full");
    expect(slots.size).toBe(0);
  });
});
