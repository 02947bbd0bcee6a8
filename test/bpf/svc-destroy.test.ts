/**
 * Closing a withdrawn backend's sockets (bpf/bpf_svc_destroy.c through
 * src/bpf/svc/destroy.ts): sockets translated by bpf_svc.c's programs (on a cgroup of
 * the test's own) that connected to a (Service, backend) pair given as withdrawn are
 * destroyed in the namespace given, read from their own socket storage, and their owners
 * see ECONNABORTED on their next call; a socket connected to the same backend through
 * another Service, and one in a namespace not given, stay. Needs BTF, a JIT and Linux
 * 6.5+; where the kernel lacks them, load() must say so (the UML guest has no JIT).
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { probeJit } from "../../src/bpf/fastpath/kernel-probe";
import type { BpfLink } from "../../src/bpf/loader/links";
import { SocketCloser } from "../../src/bpf/svc/destroy";
import { loadSvcPrograms, recordSvcPod, type SvcPrograms, svcTables } from "../../src/bpf/svc/objects";
import { ServiceTable } from "../../src/bpf/svc/table";
import { ceiling, inGuest } from "../support/ceiling";
import { makeTestCgroup, removeTestCgroup } from "../support/cgroup";
import { attachToCgroup, buildObjects, objectsDir } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { TestNetns } from "./helpers/test-netns";

const PEER = path.resolve(__dirname, "../integration/tools/svcpeer.py");

let ns: TestNetns;
let other: TestNetns;
let object: Buffer;
let bpffs: TestBpffs;
let cgroup: string;
let svc: SvcPrograms;
const links: BpfLink[] = [];
const children: ChildProcess[] = [];

const BACKEND = { ip: "127.0.0.1", port: 8080 };
const WEB = { ip: "10.96.0.10", port: 80, protocol: "TCP" } as const;
const DNS = { ip: "10.96.0.10", port: 53, protocol: "UDP" } as const;
/** Another Service with the same backend: its sockets are not the withdrawn pair's. */
const WEB2 = { ip: "10.96.0.11", port: 80, protocol: "TCP" } as const;

interface Held {
  child: ChildProcess;
  /** What getpeername showed. */
  peer: string;
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

/** A client in `netns` and the test's cgroup holding a socket connected to host:port. */
async function hold(netns: TestNetns, host: string, port: number, udp: boolean): Promise<Held> {
  const child = spawn(
    "sh",
    [
      "-c",
      `echo $$ > ${cgroup}/cgroup.procs && exec nsenter --net=${netns.path} python3 ${PEER} hold "$@"`,
      "hold",
      host,
      String(port),
      ...(udp ? ["udp"] : []),
    ],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  children.push(child);
  const next = lines(child);
  const first = await next();
  const m = /^connected (\S+) cookie (\d+)$/.exec(first);
  if (!m) throw new Error(`peer said ${first}`);
  return {
    child,
    peer: m[1] ?? "",
    cookie: BigInt(m[2] ?? "0"),
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
  cgroup = makeTestCgroup(`nkb-svd-${process.pid}`);
  bpffs = TestBpffs.mount();
  const svcObject = fs.readFileSync(path.join(objectsDir, "bpf_svc.o"));
  svc = loadSvcPrograms(bpffs.root, svcObject, 1);
  attachToCgroup(svcObject, Object.values(svc.programs), cgroup, links);
  for (const [i, netns] of [ns, other].entries()) {
    recordSvcPod(svc.maps, 2000 + i, BigInt(netns.run("python3", PEER, "cookie").trim()));
  }
  const table = new ServiceTable(svcTables(svc.maps));
  for (const frontend of [WEB, DNS, WEB2]) table.write({ frontend, backends: [BACKEND] });
  await new Promise((r) => setTimeout(r, 1500));
}, ceiling(60_000));

afterAll(() => {
  for (const c of children) c.kill("SIGKILL");
  for (const link of links) link.close();
  svc?.close();
  bpffs?.release();
  ns?.destroy();
  other?.destroy();
  if (cgroup) removeTestCgroup(cgroup, 50);
});

describe("closing a withdrawn backend's sockets", () => {
  it("destroys exactly the sockets connected to a withdrawn pair, TCP and UDP, in the namespaces named (or, without a JIT, says it cannot)", async () => {
    if (!probeJit()) {
      // The UML guest: tracing programs and kfunc calls need a JIT.
      expect(() => SocketCloser.load(object)).toThrow();
      return;
    }
    const closer = SocketCloser.load(object);
    try {
      const tcp = await hold(ns, WEB.ip, WEB.port, false);
      const udp = await hold(ns, DNS.ip, DNS.port, true);
      const spared = await hold(ns, WEB2.ip, WEB2.port, false);
      const elsewhere = await hold(other, WEB.ip, WEB.port, false);
      // Translated: each shows its Service, not the backend.
      expect([tcp.peer, udp.peer, spared.peer, elsewhere.peer]).toEqual([
        "10.96.0.10:80",
        "10.96.0.10:53",
        "10.96.0.11:80",
        "10.96.0.10:80",
      ]);
      const withdrawn = [WEB, DNS].map((frontend) => ({ frontend, backends: [BACKEND] }));
      expect(closer.closeSocketsOfWithdrawn(withdrawn, [ns.path], svc.maps.sockets)).toBe(2);
      expect(await tcp.say("x")).toBe("closed ECONNABORTED");
      // The kernel disconnects a destroyed UDP socket: its next send has no destination.
      expect(await udp.say("x")).toMatch(/^closed (ECONNABORTED|EDESTADDRREQ)$/);
      expect(await spared.say("x")).toMatch(/^srv x$/);
      expect(await elsewhere.say("x")).toMatch(/^srv x$/);
      // Nothing withdrawn: nothing closed, and the survivors still answer.
      expect(closer.closeSocketsOfWithdrawn([{ frontend: WEB2, backends: [] }], [ns.path], svc.maps.sockets)).toBe(0);
      expect(await spared.say("y")).toMatch(/^srv y$/);
    } finally {
      closer.dispose();
    }
  });
});
