/**
 * A TCP server and client for tests, run with this Node inside a netns: the server
 * answers each connection with the peer address it saw ("from <ip>"), which is what the
 * NAT tests need to know (was the client masqueraded?).
 */
import { spawn, spawnSync } from "node:child_process";
import { ceiling } from "../support/ceiling";
import type { Fixture } from "../support/harness";

const SERVER = `
const net = require("net");
const [host, port] = process.argv.slice(1);
net.createServer((s) => s.end("from " + s.remoteAddress.replace(/^::ffff:/, "") + "\\n")).listen(Number(port), host, () => console.log("ready"));
`;

const CLIENT = `
const net = require("net");
const [host, port, idleMs] = process.argv.slice(1);
const s = net.connect({ host, port: Number(port), timeout: Number(idleMs) });
let data = "";
s.on("data", (d) => (data += d));
s.on("end", () => { process.stdout.write(data); process.exit(0); });
s.on("timeout", () => { console.error("timeout"); process.exit(2); });
s.on("error", (e) => { console.error(e.message); process.exit(1); });
`;

/** A netns by name (in /run/netns) or by path (a runtime's pod: /proc/<pid>/ns/net). */
const netnsPath = (netns: string) => (netns.startsWith("/") ? netns : `/run/netns/${netns}`);

/** Starts a server in `netns` on host:port and waits until it listens. */
export async function startServer(fx: Fixture, netns: string, host: string, port: number): Promise<void> {
  const child = spawn("nsenter", [`--net=${netnsPath(netns)}`, process.execPath, "-e", SERVER, host, String(port)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  fx.processes.push({ kill: () => child.kill("SIGKILL") });
  await new Promise<void>((resolve, reject) => {
    // A Node process starting: seconds in the emulated guest, more with another lane beside it.
    const timer = setTimeout(() => reject(new Error("server did not start")), ceiling(10_000));
    child.stdout.on("data", () => {
      clearTimeout(timer);
      resolve();
    });
    child.on("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
}

/** Connects from `netns`; returns what the server answered, or throws with why not. */
export function tcpRequest(netns: string, host: string, port: number): string {
  const idleMs = ceiling(3_000);
  const r = spawnSync(
    "nsenter",
    [`--net=${netnsPath(netns)}`, process.execPath, "-e", CLIENT, host, String(port), String(idleMs)],
    // The client is a Node process: its start alone takes seconds in the emulated guest.
    { encoding: "utf8", timeout: ceiling(10_000) },
  );
  if (r.status !== 0) throw new Error(`connect ${host}:${port} from ${netns}: ${r.stderr.trim() || r.status}`);
  return r.stdout.trim();
}

/**
 * Receives one connection; once a second's rate has fallen below `settledBps` (the
 * sender's burst is spent), measures the next `seconds` and prints the rate in bits/s,
 * or "unsettled <bits/s>" if the rate never fell within `maxSeconds`.
 */
const SETTLING_RECEIVER = `
const net = require("net");
const [host, port, settledBps, seconds, maxSeconds] = process.argv.slice(1).map((v, i) => (i ? Number(v) : v));
let bytes = 0;
const samples = [];
const server = net.createServer((s) => {
  const start = Date.now();
  s.on("data", (d) => (bytes += d.length));
  s.on("error", () => {});
  const done = (line) => { console.log(line); s.destroy(); server.close(); process.exit(0); };
  let settledAt = null;
  setInterval(() => {
    const now = Date.now();
    samples.push([now, bytes]);
    const back = samples.find(([t]) => t >= now - 1000);
    if (settledAt === null) {
      if (back && now - back[0] >= 900 && ((bytes - back[1]) * 8000) / (now - back[0]) < settledBps) settledAt = [now, bytes];
      else if (now - start > maxSeconds * 1000) done("unsettled " + Math.round(((bytes - back[1]) * 8000) / (now - back[0])));
    } else if (now - settledAt[0] >= seconds * 1000) {
      done(String(Math.round(((bytes - settledAt[1]) * 8000) / (now - settledAt[0]))));
    }
  }, 100);
}).listen(Number(port), host, () => console.log("ready"));
`;

/** Writes as fast as the connection takes, until it closes. */
const FLOOD_SENDER = `
const net = require("net");
const [host, port] = process.argv.slice(1);
const chunk = Buffer.alloc(256 * 1024, 120);
const s = net.connect({ host, port: Number(port) }, () => { const go = () => { while (s.write(chunk)); }; s.on("drain", go); go(); });
s.on("error", () => process.exit(0));
s.on("close", () => process.exit(0));
`;

/**
 * The rate `from` sustains towards `to` (bits/s) once its burst is spent: a sender in
 * `from` writes without pause to a receiver in `to`, which waits for a second slower than
 * `settledBps` and then measures for `seconds`. Throws if the rate never settles within
 * `maxSeconds` (no limit in force, or a burst larger than the path could spend).
 */
export async function sustainedRate(
  fx: Fixture,
  from: string,
  to: { netns: string; address: string },
  opts: { port: number; settledBps: number; seconds: number; maxSeconds: number },
): Promise<number> {
  const receiver = spawn(
    "nsenter",
    [
      `--net=${netnsPath(to.netns)}`,
      process.execPath,
      "-e",
      SETTLING_RECEIVER,
      to.address,
      String(opts.port),
      String(opts.settledBps),
      String(opts.seconds),
      String(opts.maxSeconds),
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  fx.processes.push({ kill: () => receiver.kill("SIGKILL") });
  const lines: string[] = [];
  const exited = new Promise<void>((resolve) => receiver.on("exit", () => resolve()));
  await new Promise<void>((resolve, reject) => {
    receiver.stdout.setEncoding("utf8");
    receiver.stdout.on("data", (d: string) => {
      lines.push(...d.split("\n").filter(Boolean));
      if (lines.includes("ready")) resolve();
    });
    exited.then(() => reject(new Error(`receiver in ${to.netns} exited before listening`)));
  });
  const sender = spawn(
    "nsenter",
    [`--net=${netnsPath(from)}`, process.execPath, "-e", FLOOD_SENDER, to.address, String(opts.port)],
    { stdio: "ignore" },
  );
  fx.processes.push({ kill: () => sender.kill("SIGKILL") });
  await exited;
  sender.kill("SIGKILL");
  const result = lines.filter((l) => l !== "ready").at(-1) ?? "";
  if (!/^\d+$/.test(result))
    throw new Error(`rate from ${from} to ${to.address} never settled: ${result || "no result"}`);
  return Number(result);
}
