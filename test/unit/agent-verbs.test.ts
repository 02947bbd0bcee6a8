/**
 * Handing a verb to the agent (src/agent/verbs): which verbs and files go, how two views of
 * the files are compared, and the plugin's side of the exchange against a socket that
 * plays the agent: declining, ending before the turn (the plugin does the verb) and ending
 * after `go` (code 11: the verb was the agent's, the runtime retries); and the agent's line
 * of verbs, where the next plugin is given its turn while the verb before it runs.
 */
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { Worker } from "node:worker_threads";
import { afterEach, describe, expect, it } from "vitest";
import { handToAgent, requestFor } from "../../src/agent/verbs/client";
import { filesDiffer, filesOfVerb, handOverConf, parseRequest, verbSocketPath } from "../../src/agent/verbs/protocol";
import { type VerbCounts, VerbServer } from "../../src/agent/verbs/server";
import { parseNetConf } from "../../src/cni/config";
import { identify } from "../../src/sys/file-identity";

const dirs: string[] = [];
const workers: Worker[] = [];
afterEach(async () => {
  for (const w of workers.splice(0)) await w.terminate();
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function stateDir(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), "nkt-verbs-"));
  dirs.push(d);
  return d;
}

const confOf = (extra: Record<string, unknown> = {}) =>
  parseNetConf(
    JSON.stringify({
      cniVersion: "1.1.0",
      name: "pods",
      type: "netkit-cni",
      ipam: { type: "netkit-cni", ranges: [[{ subnet: "10.1.0.0/24" }]] },
      ...extra,
    }),
  );

const ENV = { CNI_COMMAND: "ADD", CNI_CONTAINERID: "c1", CNI_NETNS: "", CNI_IFNAME: "eth0", CNI_PATH: "/opt/cni/bin" };

describe("which verbs and files are handed over", () => {
  it("names the log, the IPAM store (default or given), the locks, the bpffs and the netns", () => {
    expect(filesOfVerb(confOf({ logFile: "/var/log/x.log" }), "/run/netns/p")).toEqual([
      "/var/log/x.log",
      "/var/lib/cni/networks",
      "/run/netkit-cni",
      "/sys/fs/bpf/netkit-cni",
      "/run/netns/p",
    ]);
    const given = confOf({ ipam: { type: "netkit-cni", dataDir: "/srv/ipam", ranges: [[{ subnet: "10.1.0.0/24" }]] } });
    expect(filesOfVerb(given, "")).toContain("/srv/ipam");
    expect(filesOfVerb(given, "")).toHaveLength(4);
  });

  it("keeps a delegated IPAM plugin's verbs in the plugin", () => {
    expect(filesOfVerb(confOf({ ipam: { type: "host-local", subnet: "10.1.0.0/24" } }), "")).toBeUndefined();
  });

  it("hands over ADD, DEL and CHECK of an agent's conflist, with the runtime's variables alone", () => {
    const conf = confOf({ agentStateDir: "/run/netkit-cni/agent" });
    const request = requestFor(conf, Buffer.from("{}"), { ...ENV, PATH: "/usr/bin", HOME: "/root" });
    expect(request?.env).toEqual(ENV);
    expect(request?.files.map((f) => f.path)).toEqual(filesOfVerb(conf, ""));
    for (const verb of ["DEL", "CHECK"])
      expect(requestFor(conf, Buffer.from("{}"), { ...ENV, CNI_COMMAND: verb })).toBeDefined();
  });

  it("keeps GC, STATUS, a plain conflist's verbs and a failure-injected run in the plugin", () => {
    const conf = confOf({ agentStateDir: "/run/netkit-cni/agent" });
    for (const verb of ["GC", "STATUS", "VERSION"]) {
      expect(requestFor(conf, Buffer.from("{}"), { ...ENV, CNI_COMMAND: verb })).toBeUndefined();
    }
    expect(requestFor(confOf(), Buffer.from("{}"), ENV)).toBeUndefined();
    expect(requestFor(conf, Buffer.from("{}"), { ...ENV, NETKIT_CNI_PAUSE_AT: "pair-created" })).toBeUndefined();
    expect(requestFor(conf, Buffer.from("{}"), { ...ENV, NETKIT_CNI_FAIL_AT: "pair-created" })).toBeUndefined();
  });

  // The plugin names the files before any parser loads (handOverConf); the agent names
  // them from the parsed config. Were the two to differ, every verb would be declined.
  it("reads the agent's state directory and the verb's files from the bytes as the parser does", () => {
    const AGENT = { agentStateDir: "/run/netkit-cni/agent" };
    const IPAM = { type: "netkit-cni", ranges: [[{ subnet: "10.1.0.0/24" }]] };
    for (const extra of [
      {},
      { logFile: "/var/log/x.log" },
      { bpffsRoot: "/sys/fs/bpf/other", logFile: null },
      { ipam: { ...IPAM, dataDir: "/srv/ipam" } },
      { ipam: { type: "host-local", subnet: "10.1.0.0/24" } },
      { ipam: null },
      { cniVersion: "0.4.0" },
    ]) {
      const bytes = JSON.stringify({
        cniVersion: "1.1.0",
        name: "pods",
        type: "netkit-cni",
        ipam: IPAM,
        ...AGENT,
        ...extra,
      });
      const parsed = parseNetConf(bytes);
      const read = handOverConf(Buffer.from(bytes));
      expect(read?.agentStateDir, bytes).toBe(parsed.agentStateDir);
      expect(filesOfVerb(read as NonNullable<typeof read>, "/run/netns/p"), bytes).toEqual(
        filesOfVerb(parsed, "/run/netns/p"),
      );
      expect(read?.cniVersion).toBe(parsed.cniVersion);
    }
  });

  it("leaves to the plugin a config that names no agent, or one the parser would refuse", () => {
    const base = { cniVersion: "1.1.0", name: "pods", type: "netkit-cni", agentStateDir: "/run/netkit-cni/agent" };
    expect(handOverConf(Buffer.from(JSON.stringify(base)))).toBeDefined();
    for (const extra of [
      { agentStateDir: undefined },
      { agentStateDir: "run/netkit-cni/agent" },
      { agentStateDir: "/run/../etc" },
      { agentStateDir: 7 },
      { logFile: 7 },
      { bpffsRoot: "bpf" },
      { ipam: { subnet: "10.1.0.0/24" } },
      { ipam: "netkit-cni" },
    ]) {
      const bytes = JSON.stringify({ ...base, ...extra });
      expect(handOverConf(Buffer.from(bytes)), bytes).toBeUndefined();
    }
    for (const bytes of ["", "not json", "[]", "null", '"text"'])
      expect(handOverConf(Buffer.from(bytes))).toBeUndefined();
  });

  it("refuses a request carrying any variable but the runtime's, or another protocol version", () => {
    const ok = { version: 1, env: ENV, stdin: "{}", files: [] };
    expect(parseRequest(JSON.stringify(ok)).env).toEqual(ENV);
    expect(() => parseRequest(JSON.stringify({ ...ok, env: { ...ENV, LD_PRELOAD: "/x.so" } }))).toThrow(/LD_PRELOAD/);
    expect(() => parseRequest(JSON.stringify({ ...ok, version: 2 }))).toThrow(/version/);
    expect(() => parseRequest(JSON.stringify({ ...ok, stdin: 3 }))).toThrow(/malformed/);
  });
});

describe("two views of the files", () => {
  it("identifies a missing path by its nearest ancestor and what is missing below it", () => {
    const dir = stateDir();
    const st = fs.statSync(dir);
    expect(identify(dir)).toEqual({ path: dir, dev: st.dev, ino: st.ino, missing: "" });
    expect(identify(path.join(dir, "a", "b"))).toEqual({
      path: path.join(dir, "a", "b"),
      dev: st.dev,
      ino: st.ino,
      missing: "a/b",
    });
  });

  it("agree only when every path is the same file with the same part missing", () => {
    const [a, b] = [stateDir(), stateDir()];
    const mine = [identify(a), identify(path.join(a, "x"))];
    expect(filesDiffer(mine, [identify(a), identify(path.join(a, "x"))])).toBeUndefined();
    expect(filesDiffer(mine, [{ ...identify(b), path: a }, identify(path.join(a, "x"))])).toBe(
      `${a} is not the same file for the agent`,
    );
    fs.mkdirSync(path.join(a, "x"));
    expect(filesDiffer(mine, [identify(a), identify(path.join(a, "x"))])).toMatch(/not the same file/);
    expect(filesDiffer(mine, [identify(a)])).toBe("a different set of files");
  });
});

/**
 * A socket playing the agent, in a thread of its own: the plugin's side blocks while it
 * waits, so the agent cannot share its event loop. `answer` is the body of a function
 * (sock, line, n) run for each line a connection sends (n counts from 1); the lines come
 * back in the order they arrived.
 */
async function fakeAgent(dir: string, answer: string): Promise<{ lines: () => Promise<string[]> }> {
  const worker = new Worker(
    `
    const net = require("node:net");
    const { parentPort, workerData } = require("node:worker_threads");
    const answer = new Function("sock", "line", "n", workerData.answer);
    const server = net.createServer((sock) => {
      let buffered = "";
      let n = 0;
      sock.on("error", () => {});
      sock.on("data", (d) => {
        buffered += d.toString();
        for (let nl = buffered.indexOf("\\n"); nl >= 0; nl = buffered.indexOf("\\n")) {
          const line = buffered.slice(0, nl);
          buffered = buffered.slice(nl + 1);
          parentPort.postMessage({ line });
          answer(sock, line, ++n);
        }
      });
    });
    server.listen(workerData.path, () => parentPort.postMessage({ listening: true }));
    `,
    { eval: true, workerData: { path: verbSocketPath(dir), answer } },
  );
  workers.push(worker);
  const lines: string[] = [];
  await new Promise<void>((resolve, reject) => {
    worker.on("error", reject);
    worker.on("message", (m: { line?: string; listening?: boolean }) => {
      if (m.listening) resolve();
      if (m.line !== undefined) lines.push(m.line);
    });
  });
  // The thread posts each line before it answers it: once the plugin's side has returned,
  // the lines are in this thread's queue, delivered by the next turns of its event loop.
  return { lines: () => new Promise((resolve) => setImmediate(() => setImmediate(() => resolve(lines)))) };
}

const TURN = `sock.write(JSON.stringify({ turn: true }) + "\\n")`;

describe("the plugin's side of the exchange", () => {
  const run = (dir: string, turnWaitMs?: number) =>
    handToAgent(confOf({ agentStateDir: dir, logFile: path.join(dir, "log") }), Buffer.from("{}"), ENV, turnWaitMs);

  it("does the verb itself when no agent listens", () => {
    expect(run(stateDir())).toBeUndefined();
  });

  it("prints the agent's outcome once it said go", async () => {
    const dir = stateDir();
    const agent = await fakeAgent(
      dir,
      `if (n === 1) ${TURN}; else sock.end(JSON.stringify({ stdout: '{"cniVersion":"1.1.0"}\\n', exitCode: 0 }) + "\\n");`,
    );
    expect(run(dir)).toEqual({ stdout: '{"cniVersion":"1.1.0"}\n', exitCode: 0 });
    const lines = await agent.lines();
    expect(JSON.parse(lines[0] ?? "").env).toEqual(ENV);
    expect(lines[1]).toBe('{"go":true}');
  });

  it("does the verb itself when the agent declines or ends before its turn", async () => {
    const declining = stateDir();
    await fakeAgent(declining, `sock.end(JSON.stringify({ declined: "not the same files" }) + "\\n");`);
    expect(run(declining)).toBeUndefined();
    const ending = stateDir();
    await fakeAgent(ending, "sock.destroy();");
    expect(run(ending)).toBeUndefined();
  });

  it("does the verb itself when its turn does not come in time, and says no go", async () => {
    const dir = stateDir();
    const agent = await fakeAgent(dir, "");
    expect(run(dir, 200)).toBeUndefined();
    expect(await agent.lines()).toHaveLength(1); // the request, never a go
  });

  it("reports code 11 when the agent ends after go: the verb was the agent's, never done twice", async () => {
    const dir = stateDir();
    await fakeAgent(dir, `if (line.includes('"go"')) sock.destroy(); else ${TURN};`);
    const outcome = run(dir);
    expect(outcome?.exitCode).toBe(1);
    expect(JSON.parse(outcome?.stdout ?? "")).toMatchObject({ code: 11, msg: expect.stringMatching(/agent ended/) });
  });

  it("reads an outcome that arrives in pieces, a character split between them", async () => {
    const dir = stateDir();
    // "é" is two bytes in UTF-8: the first piece ends between them.
    const outcome = `${JSON.stringify({ stdout: "café\n", exitCode: 0 })}\n`;
    const bytes = Buffer.from(outcome, "utf8");
    const cut = bytes.indexOf(0xc3) + 1;
    await fakeAgent(
      dir,
      `if (n === 1) { ${TURN}; return; }
       const bytes = Buffer.from(${JSON.stringify(bytes.toString("base64"))}, "base64");
       sock.write(bytes.subarray(0, ${cut}));
       setTimeout(() => sock.end(bytes.subarray(${cut})), 50);`,
    );
    expect(run(dir)).toEqual({ stdout: "café\n", exitCode: 0 });
  });

  it("reports code 11 for an answer after go that does not parse", async () => {
    const dir = stateDir();
    await fakeAgent(dir, `if (n === 1) ${TURN}; else sock.end("not json\\n");`);
    expect(JSON.parse(run(dir)?.stdout ?? "")).toMatchObject({ code: 11 });
  });
});

describe("the agent's socket", () => {
  const counts = { served: () => {}, declined: () => {} };

  it("is made 0600, and closing leaves a newer agent's socket at the same path alone", async () => {
    const dir = stateDir();
    const older = await VerbServer.listen(dir, counts);
    expect(fs.statSync(older.socketPath).mode & 0o777).toBe(0o600);
    // A newer agent starts before the older one has stopped: it replaces the socket file.
    const newer = await VerbServer.listen(dir, counts);
    await older.close();
    expect(fs.lstatSync(newer.socketPath).isSocket()).toBe(true);
    await newer.close();
    expect(fs.existsSync(newer.socketPath)).toBe(false);
  });

  it("declines a conflist that is not this agent's: the plugin does the verb", async () => {
    const dir = stateDir();
    let declined = 0;
    const server = await VerbServer.listen(dir, { served: () => {}, declined: () => declined++ });
    try {
      const other = stateDir();
      const conf = confOf({ agentStateDir: dir, logFile: path.join(dir, "log") });
      const stdin = Buffer.from(JSON.stringify({ ...conf.raw, agentStateDir: other }));
      // The request says the agent's directory (so it reaches this socket) but the
      // configuration it carries names another. (A raw client: the plugin's own blocks,
      // and this server shares the test's thread.)
      const request = requestFor(conf, stdin, ENV);
      const answer = await new Promise<string>((resolve, reject) => {
        let got = "";
        const sock = net.createConnection(server.socketPath, () => sock.write(`${JSON.stringify(request)}\n`));
        sock.on("data", (d: Buffer) => {
          got += d.toString();
        });
        sock.on("end", () => resolve(got));
        sock.on("error", reject);
      });
      expect(JSON.parse(answer)).toEqual({ declined: "the conflist is not this agent's" });
      expect(declined).toBe(1);
    } finally {
      await server.close();
    }
  });
});

/**
 * A plugin talking to a VerbServer of this thread (so, unlike the plugin's own side, not
 * blocking): it sends its request, says `go` `goAfterMs` after its turn (never: false),
 * and keeps what it heard.
 */
function asyncPlugin(socketPath: string, dir: string, id: string, goAfterMs: number | false = 0) {
  const conf = confOf({ agentStateDir: dir, logFile: path.join(dir, "log") });
  const request = requestFor(conf, Buffer.from(JSON.stringify(conf.raw)), { ...ENV, CNI_CONTAINERID: id });
  const heard: string[] = [];
  let turned!: () => void;
  const turn = new Promise<void>((resolve) => {
    turned = resolve;
  });
  const sock = net.createConnection(socketPath, () => sock.write(`${JSON.stringify(request)}\n`));
  const ended = new Promise<string[]>((resolve) => sock.on("close", () => resolve(heard)));
  let buffered = "";
  sock.on("error", () => {});
  sock.on("data", (d: Buffer) => {
    buffered += d.toString();
    for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      heard.push(line);
      if (line.includes('"turn"')) {
        if (goAfterMs !== false) setTimeout(() => sock.write('{"go":true}\n'), goAfterMs);
        turned();
      }
    }
  });
  return { heard, turn, ended };
}

/** A stand-in for the verb that runs until the test lets it end, noting starts and ends. */
function gatedVerbs() {
  const events: string[] = [];
  const gates = new Map<string, () => void>();
  const started = new Map<string, Promise<void>>();
  const starters = new Map<string, () => void>();
  const startedOf = (id: string) => {
    if (!started.has(id)) started.set(id, new Promise((resolve) => starters.set(id, resolve)));
    return started.get(id) as Promise<void>;
  };
  const run = async (_stdin: Buffer, env: NodeJS.ProcessEnv) => {
    const id = env.CNI_CONTAINERID ?? "";
    events.push(`start ${id}`);
    startedOf(id);
    starters.get(id)?.();
    await new Promise<void>((resolve) => gates.set(id, resolve));
    events.push(`end ${id}`);
    return { stdout: `${id}\n`, exitCode: 0 };
  };
  return { run, events, started: startedOf, release: (id: string) => gates.get(id)?.() };
}

const tick = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("the agent's line of verbs", () => {
  const counts = { served: () => {}, declined: () => {} };

  /** A server of `gatedVerbs()` in a fresh state directory, for `body`, closed after it. */
  async function withLine(
    body: (line: { dir: string; socketPath: string; verbs: ReturnType<typeof gatedVerbs> }) => Promise<void>,
    options: { goWaitMs?: number; counts?: VerbCounts } = {},
  ): Promise<void> {
    const dir = stateDir();
    const verbs = gatedVerbs();
    const server = await VerbServer.listen(dir, options.counts ?? counts, {
      run: verbs.run,
      goWaitMs: options.goWaitMs,
    });
    try {
      await body({ dir, socketPath: server.socketPath, verbs });
    } finally {
      await server.close();
    }
  }

  it("gives the next plugin its turn while the verb before it runs, and only the next one", async () => {
    await withLine(async ({ dir, socketPath, verbs }) => {
      const a = asyncPlugin(socketPath, dir, "a");
      await verbs.started("a");
      const b = asyncPlugin(socketPath, dir, "b");
      await b.turn; // while a's verb has not ended
      const c = asyncPlugin(socketPath, dir, "c");
      await tick(100);
      expect(verbs.events).toEqual(["start a"]);
      expect(c.heard).toEqual([]); // third in line: no turn yet
      verbs.release("a");
      await verbs.started("b");
      await c.turn; // next in line now
      expect(verbs.events).toEqual(["start a", "end a", "start b"]);
      verbs.release("b");
      await verbs.started("c");
      verbs.release("c");
      expect((await a.ended).at(-1)).toMatch(/"stdout":"a\\n"/);
      expect((await b.ended).at(-1)).toMatch(/"stdout":"b\\n"/);
      expect((await c.ended).at(-1)).toMatch(/"stdout":"c\\n"/);
      expect(verbs.events).toEqual(["start a", "end a", "start b", "end b", "start c", "end c"]);
    });
  });

  it("keeps serving the line after a fault of its own in one request", async () => {
    let served = 0;
    const faulty = {
      served: () => {
        if (++served === 1) throw new Error("a counter that fails");
      },
      declined: () => {},
    };
    await withLine(
      async ({ dir, socketPath, verbs }) => {
        const a = asyncPlugin(socketPath, dir, "a");
        await verbs.started("a");
        const b = asyncPlugin(socketPath, dir, "b");
        verbs.release("a");
        expect(await a.ended).toEqual(['{"turn":true}']); // no outcome: the plugin says code 11
        await verbs.started("b");
        verbs.release("b");
        expect((await b.ended).at(-1)).toMatch(/"stdout":"b\\n"/);
      },
      { counts: faulty },
    );
  });

  it("reads a request that arrives in pieces, a character split between them", async () => {
    const dir = stateDir();
    let received = "";
    const server = await VerbServer.listen(dir, counts, {
      run: async (stdin) => {
        received = stdin.toString("utf8");
        return { stdout: "", exitCode: 0 };
      },
    });
    try {
      const conf = confOf({ agentStateDir: dir, logFile: path.join(dir, "log") });
      const stdin = JSON.stringify({ ...conf.raw, note: "café" });
      const line = Buffer.from(`${JSON.stringify(requestFor(conf, Buffer.from(stdin), ENV))}\n`, "utf8");
      const cut = line.indexOf(0xc3) + 1; // between the two bytes of "é"
      await new Promise<void>((resolve, reject) => {
        const sock = net.createConnection(server.socketPath, () => {
          sock.write(line.subarray(0, cut));
          setTimeout(() => sock.write(line.subarray(cut)), 50);
        });
        sock.on("data", (d: Buffer) => {
          if (d.toString().includes('"turn"')) sock.write('{"go":true}\n');
        });
        sock.on("close", () => resolve());
        sock.on("error", reject);
      });
      expect(received).toBe(stdin);
    } finally {
      await server.close();
    }
  });

  it("gives a turn offered early its time to say go from when its verb could start", async () => {
    await withLine(
      async ({ dir, socketPath, verbs }) => {
        asyncPlugin(socketPath, dir, "a");
        await verbs.started("a");
        const silent = asyncPlugin(socketPath, dir, "silent", false);
        await silent.turn;
        const b = asyncPlugin(socketPath, dir, "b");
        // a's verb outlasts the time to say go: the silent plugin is not judged by it yet.
        await tick(300);
        expect(silent.heard).toEqual(['{"turn":true}']);
        verbs.release("a");
        // Its verb could start now; it says nothing within 100 ms and is let go.
        expect(await silent.ended).toEqual(['{"turn":true}']);
        await verbs.started("b");
        verbs.release("b");
        expect((await b.ended).at(-1)).toMatch(/"stdout":"b\\n"/);
        expect(verbs.events).toEqual(["start a", "end a", "start b", "end b"]);
      },
      { goWaitMs: 100 },
    );
  });

  it("runs a turn offered early whose go came later than the wait, but before its verb could start", async () => {
    await withLine(
      async ({ dir, socketPath, verbs }) => {
        asyncPlugin(socketPath, dir, "a");
        await verbs.started("a");
        const b = asyncPlugin(socketPath, dir, "b", 200);
        await b.turn;
        await tick(400);
        verbs.release("a");
        await verbs.started("b");
        verbs.release("b");
        expect((await b.ended).at(-1)).toMatch(/"stdout":"b\\n"/);
      },
      { goWaitMs: 100 },
    );
  });
});
