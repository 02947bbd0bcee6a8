/**
 * Closing a withdrawn backend's sockets (bpf/bpf_svc_destroy.c through
 * src/bpf/svc-destroy.ts): the sockets whose cookies are given are destroyed in the
 * namespace given, and their owners see ECONNABORTED on their next call; a socket whose
 * cookie was not given, and one in a namespace not given, stay. Needs BTF, a JIT and
 * Linux 6.5+; where the kernel lacks them, load() must say so (the UML guest has no JIT).
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { probeJit } from "../../src/bpf/kernel-probe";
import { SocketCloser } from "../../src/bpf/svc-destroy";
import { ceiling, inGuest } from "../support/ceiling";
import { TestNetns } from "./helpers/netns";
import { buildObjects, objectsDir } from "./helpers/objects";

const PEER = path.resolve(__dirname, "../integration/tools/svcpeer.py");

let ns: TestNetns;
let other: TestNetns;
let object: Buffer;
const children: ChildProcess[] = [];

interface Held {
  child: ChildProcess;
  cookie: bigint;
  /** Sends a line and returns what the peer printed for it. */
  say(line: string): Promise<string>;
}

function lines(child: ChildProcess): () => Promise<string> {
  const got: string[] = [];
  const waiters: (() => void)[] = [];
  let partial = "";
  child.stdout?.on("data", (d: Buffer) => {
    const parts = (partial + d.toString()).split("\n");
    partial = parts.pop() ?? "";
    got.push(...parts);
    for (const w of waiters.splice(0)) w();
  });
  return async () => {
    const deadline = Date.now() + 15_000;
    while (got.length === 0) {
      if (Date.now() > deadline) throw new Error("no line from the peer");
      await new Promise<void>((r) => {
        waiters.push(r);
        setTimeout(r, 100);
      });
    }
    return got.shift() ?? "";
  };
}

async function hold(netns: TestNetns, host: string, udp: boolean): Promise<Held> {
  const child = spawn(
    "nsenter",
    [`--net=${netns.path}`, "python3", PEER, "hold", host, "8080", ...(udp ? ["udp"] : [])],
    {
      stdio: ["pipe", "pipe", "inherit"],
    },
  );
  children.push(child);
  const next = lines(child);
  const first = await next();
  const m = /^connected \S+ cookie (\d+)$/.exec(first);
  if (!m) throw new Error(`peer said ${first}`);
  return {
    child,
    cookie: BigInt(m[1] ?? "0"),
    say: async (line) => {
      child.stdin?.write(`${line}\n`);
      return next();
    },
  };
}

function serve(netns: TestNetns): void {
  const child = spawn("nsenter", [`--net=${netns.path}`, "python3", PEER, "serve", "srv", "8080", "127.0.0.1"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  children.push(child);
}

beforeAll(async () => {
  // In the qemu guest (the distro lane) the build that ran before the lanes is used:
  // compiling every object there under emulation takes minutes.
  if (!inGuest) buildObjects();
  object = fs.readFileSync(path.join(objectsDir, "bpf_svc_destroy.o"));
  ns = TestNetns.create("svd");
  other = TestNetns.create("svo");
  serve(ns);
  serve(other);
  await new Promise((r) => setTimeout(r, 1500));
}, ceiling(60_000));

afterAll(() => {
  for (const c of children) c.kill("SIGKILL");
  ns?.destroy();
  other?.destroy();
});

describe("closing a withdrawn backend's sockets", () => {
  it("destroys exactly the sockets named, TCP and connected UDP, in the namespaces named (or, without a JIT, says it cannot)", async () => {
    if (!probeJit()) {
      // The UML guest: tracing programs and kfunc calls need a JIT.
      expect(() => SocketCloser.load(object)).toThrow();
      return;
    }
    const closer = SocketCloser.load(object);
    try {
      const tcp = await hold(ns, "127.0.0.1", false);
      const udp = await hold(ns, "127.0.0.1", true);
      const spared = await hold(ns, "127.0.0.1", false);
      const elsewhere = await hold(other, "127.0.0.1", false);
      const closed = closer.closeSockets([tcp.cookie, udp.cookie, elsewhere.cookie], [ns.path]);
      expect(closed.sort()).toEqual([tcp.cookie, udp.cookie].sort());
      expect(await tcp.say("x")).toBe("closed ECONNABORTED");
      // The kernel disconnects a destroyed UDP socket: its next send has no destination.
      expect(await udp.say("x")).toMatch(/^closed (ECONNABORTED|EDESTADDRREQ)$/);
      expect(await spared.say("x")).toMatch(/^srv x$/);
      expect(await elsewhere.say("x")).toMatch(/^srv x$/);
    } finally {
      closer.dispose();
    }
  });
});
