/**
 * A TCP server and client for tests, run with this Node inside a netns: the server
 * answers each connection with the peer address it saw ("from <ip>"), which is what the
 * NAT tests need to know (was the client masqueraded?).
 */
import { spawn, spawnSync } from "node:child_process";
import type { Fixture } from "./harness";

const SERVER = `
const net = require("net");
const [host, port] = process.argv.slice(1);
net.createServer((s) => s.end("from " + s.remoteAddress.replace(/^::ffff:/, "") + "\\n")).listen(Number(port), host, () => console.log("ready"));
`;

const CLIENT = `
const net = require("net");
const [host, port] = process.argv.slice(1);
const s = net.connect({ host, port: Number(port), timeout: 3000 });
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
    const timer = setTimeout(() => reject(new Error("server did not start")), 10_000);
    child.stdout.on("data", () => {
      clearTimeout(timer);
      resolve();
    });
    child.on("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
}

/** Connects from `netns`; returns what the server answered, or throws with why not. */
export function tcpRequest(netns: string, host: string, port: number): string {
  const r = spawnSync("nsenter", [`--net=${netnsPath(netns)}`, process.execPath, "-e", CLIENT, host, String(port)], {
    encoding: "utf8",
    timeout: 10_000,
  });
  if (r.status !== 0) throw new Error(`connect ${host}:${port} from ${netns}: ${r.stderr.trim() || r.status}`);
  return r.stdout.trim();
}
