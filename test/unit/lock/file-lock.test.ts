/**
 * The file lock between processes: turns go in order of arrival, a process that takes the
 * lock back to back does not starve the others, crashed contenders (waiting or holding)
 * block nobody, and a deadline is a deadline. Each contender is a child process running
 * the real module; the deadlines are starvation bounds with ample slack, not speed targets.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, expect, it } from "vitest";
import { withFileLock } from "../../../src/sys/file-lock";
import { type Child, Children } from "./children";

let children: Children;
let dir = "";
let lock = "";
/** The queue root the children use: private to the test, instead of the node's /run. */
let queues = "";

beforeAll(() => {
  children = new Children();
});
afterAll(() => children.dispose());

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "netkit-lock-"));
  lock = path.join(dir, "lock");
  queues = path.join(dir, "queues");
});

afterEach(async () => {
  await children.killAll();
  fs.rmSync(dir, { recursive: true, force: true });
});

const locked = (e: Record<string, unknown>) => e.locked === 1;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Tickets waiting in the lock's queue (there is one queue directory per lock file). */
function tickets(): number {
  if (!fs.existsSync(queues)) return 0;
  return fs.readdirSync(queues).reduce((n, q) => n + fs.readdirSync(path.join(queues, q)).length, 0);
}

async function untilTickets(n: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (tickets() < n) {
    if (Date.now() > deadline) throw new Error(`expected ${n} tickets in the queue, saw ${tickets()}`);
    await sleep(5);
  }
}

/** The outcome of a child that takes the lock once: what it printed after asking, once it has exited. */
const outcome = async (c: Child) => {
  await c.exited;
  return c.events.filter((e) => e.waiting === undefined);
};

it("a process taking the lock back to back lets every contender in before its deadline", async () => {
  // Bursts one after another, like ADDs arriving during a storm: each release is followed
  // at once by a new attempt from the same process. Waiting for 8 such turns takes a
  // fraction of the deadline.
  const hog = children.start("hog", lock, queues, "hold", "20");
  await hog.event(locked);
  const contenders = Array.from({ length: 8 }, (_, i) => children.start(`c${i}`, lock, queues, "once", "3000", "1"));
  const outcomes = await Promise.all(contenders.map(outcome));
  // By name, with what each printed: a failure says who missed its turn and how.
  const byName = (of: (c: Child, i: number) => unknown) =>
    Object.fromEntries(contenders.map((c, i) => [c.name, of(c, i)]));
  expect(byName((_, i) => outcomes[i])).toEqual(byName(() => [{ locked: 1 }]));
}, 30_000);

it("turns go in order of arrival; a newcomer lines up behind those waiting", async () => {
  const holder = children.start("a", lock, queues, "keep");
  await holder.event(locked);
  const waiting: Child[] = [];
  for (const name of ["b", "c", "d"]) {
    const c = children.start(name, lock, queues, "once", "20000", "100");
    await c.event((e) => e.waiting === true);
    await sleep(50); // it has asked by now
    waiting.push(c);
  }
  holder.process.kill("SIGKILL");
  await waiting[0]?.event(locked);
  // While b holds the lock and c, d wait, e arrives.
  const e = children.start("e", lock, queues, "once", "20000", "0");
  await Promise.all([...waiting, e].map(outcome));
  const order = children.log.filter((l) => locked(l.event)).map((l) => l.name);
  expect(order).toEqual(["a", "b", "c", "d", "e"]);
}, 30_000);

it("contenders behind crashed ones, one waiting and one holding, still get their turn", async () => {
  const first = children.start("first", lock, queues, "keep");
  await first.event(locked);
  const holder = children.start("holder", lock, queues, "keep");
  await untilTickets(1);
  const crashed = children.start("crashed", lock, queues, "once", "20000", "0");
  await untilTickets(2);
  const last = children.start("last", lock, queues, "once", "20000", "0");
  await untilTickets(3);

  crashed.process.kill("SIGKILL");
  await crashed.exited;
  first.process.kill("SIGKILL");
  await holder.event(locked);
  holder.process.kill("SIGKILL");

  expect(await outcome(last)).toEqual([{ locked: 1 }]);
  // The tickets of the dead were removed by those behind them, and the empty queue went too.
  expect(fs.readdirSync(queues)).toEqual([]);
}, 30_000);

it("gives up at its deadline and leaves no ticket behind", async () => {
  const holder = children.start("holder", lock, queues, "keep");
  await holder.event(locked);
  const started = performance.now();
  const waiter = children.start("waiter", lock, queues, "once", "300", "0");
  expect(await outcome(waiter)).toEqual([{ timeout: true }]);
  expect(performance.now() - started).toBeGreaterThanOrEqual(300);
  expect(tickets()).toBe(0);
}, 30_000);

it("still takes the lock, unqueued, where no queue directory can be made", async () => {
  const holder = children.start("holder", lock, queues, "keep");
  await holder.event(locked);
  const notADirectory = path.join(dir, "file");
  fs.writeFileSync(notADirectory, "");
  const waiter = children.start("waiter", lock, path.join(notADirectory, "queues"), "once", "20000", "0");
  await sleep(300);
  expect(waiter.events.filter(locked)).toEqual([]);
  holder.process.kill("SIGKILL");
  expect(await outcome(waiter)).toEqual([{ locked: 1 }]);
}, 30_000);

it("runs the holder at raised priority and restores it on release", () => {
  const before = os.getPriority();
  const inside = withFileLock(lock, 1_000, () => os.getPriority(), queues);
  // Only root may raise it, as the plugin runs; anyone else keeps theirs.
  const raised = process.getuid?.() === 0 ? Math.min(before, os.constants.priority.PRIORITY_HIGH) : before;
  expect(inside).toBe(raised);
  expect(os.getPriority()).toBe(before);
  expect(() =>
    withFileLock(
      lock,
      1_000,
      () => {
        throw new Error("inside");
      },
      queues,
    ),
  ).toThrow("inside");
  expect(os.getPriority()).toBe(before);
});
