/**
 * The node's pinned programs and maps, kept open across verbs by a process that serves
 * many (the agent doing handed verbs, agent/verbs): opened again for every verb, they
 * cost an ADD about 0.3 ms of its 0.7 on the node's part and a DEL as much again. The
 * one-shot plugin keeps nothing.
 *
 * What is kept is served only while every pin it was opened from is still the one it was
 * opened from: a pin's inode on the bpffs is its object's for life, and a re-made map, a
 * newer build's set or a removed set shows as another inode or none. Then the pins are
 * opened afresh (fail safe), and the old descriptors are closed once no verb holds them.
 * The identity is read before the pins are opened, so a pin replaced in between is seen
 * as changed at the next use, never taken for the one opened.
 */
import * as fs from "node:fs";

interface Closable {
  close(): void;
}

interface Kept<T> {
  /** The pins' inodes, in a fixed order, read before they were opened. */
  identity: string;
  value: T;
  closables: Closable[];
  leases: number;
  /** False once another identity replaced it: closed when its last lease goes. */
  current: boolean;
}

export class KeptPins<T> {
  private readonly kept = new Map<string, Kept<T>>();

  /**
   * The value opened from `pins` (under `key`), opening it with `open` unless the kept one
   * is still what the pins hold. The caller's `leases` gets what gives this use back.
   */
  use(key: string, pins: readonly string[], open: (closables: Closable[]) => T, leases: Closable[]): T {
    const identity = pinIdentity(pins);
    let entry = this.kept.get(key);
    if (!entry || identity === undefined || entry.identity !== identity) {
      if (entry) this.retire(key, entry);
      const closables: Closable[] = [];
      try {
        entry = { identity: identity ?? "", value: open(closables), closables, leases: 0, current: true };
      } catch (e) {
        for (const c of closables) c.close();
        throw e;
      }
      // A pin that could not be read is not kept: the next use opens it again.
      if (identity === undefined) {
        leases.push(...closables);
        return entry.value;
      }
      this.kept.set(key, entry);
    }
    const held = entry;
    held.leases += 1;
    let given = false;
    leases.push({
      close: () => {
        if (given) return;
        given = true;
        held.leases -= 1;
        if (!held.current && held.leases === 0) closeAll(held);
      },
    });
    return held.value;
  }

  /** Closes everything kept that no verb holds (the agent's stop). */
  close(): void {
    for (const [key, entry] of this.kept) this.retire(key, entry);
  }

  private retire(key: string, entry: Kept<T>): void {
    if (this.kept.get(key) === entry) this.kept.delete(key);
    entry.current = false;
    if (entry.leases === 0) closeAll(entry);
  }
}

function closeAll(entry: Kept<unknown>): void {
  for (const c of entry.closables.splice(0)) c.close();
}

/** The pins' inodes, or undefined when one cannot be read (gone, or not a pin). */
function pinIdentity(pins: readonly string[]): string | undefined {
  const inodes: string[] = [];
  for (const pin of pins) {
    const st = fs.statSync(pin, { throwIfNoEntry: false });
    if (!st) return undefined;
    inodes.push(`${st.dev}:${st.ino}`);
  }
  return inodes.join(",");
}
