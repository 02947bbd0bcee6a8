/**
 * Slots of compiled policies (src/agent/policy/slots.ts): pods whose rules mean the same
 * share one; a change of peers rewrites it in place and restamps every pod of it; a
 * change of rules moves the pod to a slot written whole before its entry switches, and
 * the old one goes after. Ids are never given twice nor taken from a previous run; a
 * slot that cannot be written in full is given up and its pods denied.
 */
import { describe, expect, it } from "vitest";
import {
  type PodEntry,
  type PodRules,
  PolicySlots,
  type SlotTiers,
  SlotWriteError,
  stampClock,
} from "../../src/agent/policy/slots";
import { decodePeerKey } from "../../src/bpf/policy/abi";
import type { TableWrite } from "../../src/bpf/policy/tables";

const rules = (peers: string[], port = 80): PodRules => ({
  ingress: [{ peers: peers.map((cidr) => ({ cidr, except: [] })), ports: [{ protocol: "TCP", from: port, to: port }] }],
  egress: undefined,
  origins: { ingress: ["ns/allow ingress[0]"], egress: [] },
});

function recorder() {
  const log: string[] = [];
  const entries = new Map<string, PodEntry>();
  /** Keys in the tables (hex), as the writes left them. */
  const keys = new Set<string>();
  let failAfter: number | undefined;
  /** Each slot's tier masks, as written. */
  const tiers = new Map<number, SlotTiers>();
  const writer = {
    writeTiers: (slot: number, t: SlotTiers) => {
      if (t) tiers.set(slot, t);
      else tiers.delete(slot);
      log.push(`${t ? "set" : "del"} tiers ${slot}`);
    },
    writeSlot: (w: { peers: TableWrite[]; ports: TableWrite[] }) => {
      for (const x of [...w.ports, ...w.peers]) {
        if (failAfter !== undefined && x.value && failAfter-- <= 0) throw new Error("no space left on device");
        if (x.value) keys.add(x.key.toString("hex"));
        else keys.delete(x.key.toString("hex"));
      }
      for (const x of w.peers) {
        const k = decodePeerKey(x.key);
        log.push(`${x.value ? "set" : "del"} peer ${k.slot} ${k.prefix}`);
      }
      for (const x of w.ports) log.push(`${x.value ? "set" : "del"} port ${x.key.readUInt32LE(4)}`);
    },
    setPod: (pod: string, entry: PodEntry) => {
      entries.set(pod, entry);
      log.push(`pod ${pod} ${entry.slot}${entry.incomplete ? " closed" : ""}`);
    },
  };
  const slotsOfKeys = () => new Set([...keys].map((k) => Buffer.from(k, "hex").readUInt32LE(4)));
  return {
    log,
    entries,
    keys,
    tiers,
    writer,
    slotsOfKeys,
    failWritesAfter: (n: number | undefined) => {
      failAfter = n;
    },
  };
}

let clock = 0n;
const stamps = () => {
  clock += 1n;
  return clock;
};

describe("policy slots", () => {
  it("share a slot between pods whose rules mean the same, and rewrite only peers in place", () => {
    const { log, writer, entries } = recorder();
    const slots = new PolicySlots(writer, { stamps });
    const a = slots.place("ns/a", rules(["10.0.0.1/32"]));
    const b = slots.place("ns/b", rules(["10.0.0.1/32"]));
    expect(a).toBe(b);
    expect(slots.size).toBe(1);
    expect(entries.get("ns/a")?.stamp).toBe(entries.get("ns/b")?.stamp);
    log.length = 0;
    // A new peer of the selected set: one peer added, nothing else, then both pods restamped.
    const before = entries.get("ns/a")?.stamp ?? 0n;
    slots.place("ns/a", rules(["10.0.0.1/32", "10.0.0.2/32"]));
    expect(log).toEqual([`set peer ${a} 10.0.0.2/32`, `pod ns/b ${a}`, `pod ns/a ${a}`]);
    expect(entries.get("ns/a")?.stamp).toBeGreaterThan(before);
    expect(entries.get("ns/b")?.stamp).toBe(entries.get("ns/a")?.stamp);
  });

  it("keeps the stamp while the tables stay as they are", () => {
    const { writer, entries } = recorder();
    const slots = new PolicySlots(writer, { stamps });
    slots.place("ns/a", rules(["10.0.0.1/32"]));
    const stamp = entries.get("ns/a")?.stamp;
    slots.place("ns/a", rules(["10.0.0.1/32"]));
    slots.place("ns/b", rules(["10.0.0.1/32"]));
    expect(entries.get("ns/a")?.stamp).toBe(stamp);
    expect(entries.get("ns/b")?.stamp).toBe(stamp);
  });

  it("moves a pod whose rules change to a slot written before the switch, and frees the old after", () => {
    const { log, writer } = recorder();
    const slots = new PolicySlots(writer, { stamps });
    const first = slots.place("ns/a", rules(["10.0.0.1/32"]));
    log.length = 0;
    const second = slots.place("ns/a", rules(["10.0.0.1/32"], 443));
    expect(second).not.toBe(first);
    const switchAt = log.indexOf(`pod ns/a ${second}`);
    expect(log.slice(0, switchAt).every((l) => l.startsWith("set") && l.includes(` ${second}`))).toBe(true);
    expect(log.slice(switchAt + 1).every((l) => l.startsWith("del") && l.includes(` ${first}`))).toBe(true);
    expect(log.slice(switchAt + 1).length).toBeGreaterThan(0);
    expect(slots.size).toBe(1);
  });

  it("keeps a slot while another pod uses it; frees it with its last pod; never leaves a fresh one behind", () => {
    const { log, writer, keys } = recorder();
    const slots = new PolicySlots(writer, { stamps });
    const s = slots.place("ns/a", rules(["10.0.0.1/32"]));
    slots.place("ns/b", rules(["10.0.0.1/32"]));
    log.length = 0;
    slots.release("ns/a");
    expect(log).toEqual([]);
    slots.release("ns/b");
    expect(log.every((l) => (l.startsWith("del") && l.includes(` ${s} `)) || l === `del port ${s}`)).toBe(true);
    expect(slots.size).toBe(0);
    expect(keys.size).toBe(0);
    const failing = {
      writeSlot: writer.writeSlot,
      writeTiers: writer.writeTiers,
      setPod: () => {
        throw new Error("the map is full");
      },
    };
    const other = new PolicySlots(failing, { stamps });
    expect(() => other.place("ns/c", rules(["10.0.0.9/32"]))).toThrow("full");
    expect(other.size).toBe(0);
    expect(keys.size).toBe(0);
  });

  it("never gives an id twice, nor one a previous run's tables hold", () => {
    const { writer } = recorder();
    const slots = new PolicySlots(writer, { stamps, reserved: [3, 7] });
    const seen: number[] = [];
    for (let i = 0; i < 4; i++) {
      seen.push(slots.place(`ns/p${i}`, rules(["10.0.0.1/32"], 1000 + i)));
      slots.release(`ns/p${i}`); // freed at once: its id still never comes back
    }
    expect(new Set(seen).size).toBe(4);
    expect(seen.every((id) => id > 7)).toBe(true);
    expect(slots.needsSweep).toBe(true);
    slots.swept();
    expect(slots.needsSweep).toBe(false);
  });

  it("gives up a fresh slot whose tables cannot be written whole: nothing of it stays, the pod keeps its entry", () => {
    const { writer, keys, entries, failWritesAfter } = recorder();
    const slots = new PolicySlots(writer, { stamps });
    const old = slots.place("ns/a", rules(["10.0.0.1/32"]));
    const oldKeys = new Set(keys);
    failWritesAfter(1); // the port and one prefix fit; the next prefix does not
    expect(() => slots.place("ns/a", rules(["10.0.0.1/32", "10.0.0.2/32"], 443))).toThrow(SlotWriteError);
    failWritesAfter(undefined);
    expect(keys).toEqual(oldKeys);
    expect(entries.get("ns/a")?.slot).toBe(old); // the caller denies it (policy/controller.ts)
    expect(slots.slotOf("ns/a")).toBe(old);
  });

  it("gives up a shared slot whose peers cannot be rewritten whole: its pods denied first, then its keys gone", () => {
    const { writer, keys, entries, log, failWritesAfter } = recorder();
    const slots = new PolicySlots(writer, { stamps });
    const s = slots.place("ns/a", rules(["10.0.0.1/32"]));
    slots.place("ns/b", rules(["10.0.0.1/32"]));
    failWritesAfter(0);
    log.length = 0;
    let error: unknown;
    try {
      slots.place("ns/a", rules(["10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32"]));
    } catch (e) {
      error = e;
    }
    failWritesAfter(undefined);
    expect(error).toBeInstanceOf(SlotWriteError);
    expect((error as SlotWriteError).pods.sort()).toEqual(["ns/a", "ns/b"]);
    for (const pod of ["ns/a", "ns/b"]) {
      expect(entries.get(pod)).toMatchObject({ slot: 0, incomplete: true, isolated: { ingress: true, egress: false } });
    }
    // Both pods point away before any key of the slot goes.
    const lastClose = Math.max(log.indexOf("pod ns/a 0 closed"), log.indexOf("pod ns/b 0 closed"));
    const firstDelete = log.findIndex((l) => l.startsWith("del"));
    expect(lastClose).toBeLessThan(firstDelete);
    expect(keys.size).toBe(0);
    expect(slots.size).toBe(0);
    // Placed again once there is room: a fresh slot, written whole.
    expect(slots.place("ns/a", rules(["10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32"]))).not.toBe(s);
  });
});

describe("stamps", () => {
  it("follow the clock and never repeat, even when it stands still", () => {
    let now = 100n;
    const next = stampClock(() => now);
    expect(next()).toBe(100n);
    expect(next()).toBe(101n);
    now = 50n;
    expect(next()).toBe(102n);
    now = 1000n;
    expect(next()).toBe(1000n);
  });
  it("ClusterNetworkPolicy's tiers: written with a new slot before any pod points at it, part of its meaning, gone with it", () => {
    const r = recorder();
    const slots = new PolicySlots(r.writer, { stamps });
    const admin = { admin: 1n, baseline: 0n, deny: 1n, pass: 0n, networkPolicy: true };
    const tiered = (masks: typeof admin): PodRules => ({ ...rules(["10.0.0.1/32"]), tiers: { ingress: masks } });
    const plain = slots.place("ns/plain", rules(["10.0.0.1/32"]));
    expect(r.tiers.size).toBe(0); // NetworkPolicy alone: no tier entry
    const a = slots.place("ns/a", tiered(admin));
    expect(a).not.toBe(plain); // same bits, read another way: another slot
    expect(r.tiers.get(a)).toEqual({ ingress: admin });
    const order = r.log.filter((l) => l === `set tiers ${a}` || l === `pod ns/a ${a}`);
    expect(order).toEqual([`set tiers ${a}`, `pod ns/a ${a}`]);
    expect(slots.place("ns/b", tiered({ ...admin }))).toBe(a); // equal masks share it
    const accept = slots.place("ns/b", tiered({ ...admin, deny: 0n }));
    expect(accept).not.toBe(a); // a rule's action changed: a new slot, not a rewrite
    slots.release("ns/a");
    expect(r.tiers.has(a)).toBe(false); // its last pod left: the entry went with the slot
    expect(r.tiers.get(accept)).toEqual({ ingress: { ...admin, deny: 0n } });
  });
});
