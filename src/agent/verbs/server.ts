/**
 * The agent's side of handed verbs (protocol.ts): a unix socket only root may open, in the
 * agent's state directory. Each request runs invokePlugin, the very function the
 * executable runs, in this process: no start-up, the code already compiled. Verbs run one
 * at a time, in order of arrival: the verbs' file locks are taken synchronously, so two
 * verbs interleaved on this one thread could wait on each other with nothing left to run.
 *
 * A verb is done here only when it would touch the same files as in the plugin (the pod's
 * netns, IPAM store, log, locks, bpffs: same device and inode for the agent as for the
 * plugin) and its conflist is this agent's; otherwise it is declined and the plugin does it.
 */
import * as fs from "node:fs";
import * as net from "node:net";
import { parseNetConf } from "../../cni/config";
import { invokePlugin, type Outcome } from "../../commands/invoke";
import { identify } from "../../sys/file-identity";
import { agentLog } from "../log";
import { filesDiffer, filesOfVerb, parseRequest, type VerbRequest, verbSocketPath } from "./protocol";

/** A request line longer than this is not a plugin's (configs are at most 1 MiB). */
const MAX_REQUEST_BYTES = 4 << 20;
/** How long the plugin has to say `go` once its turn came. */
const GO_WAIT_MS = 2_000;

/** Told of each verb done here and each declined (the metrics). */
export interface VerbCounts {
  served(verb: string, exitCode: number): void;
  declined(): void;
}

export class VerbServer {
  private tail: Promise<void> = Promise.resolve();
  /** The inode of the socket file this server made: a newer agent's is not removed at close. */
  private socketIno = 0;
  private readonly server: net.Server;

  private constructor(
    readonly socketPath: string,
    private readonly stateDir: string,
    private readonly counts: VerbCounts,
  ) {
    this.server = net.createServer((sock) => this.accept(sock));
  }

  static async listen(stateDir: string, counts: VerbCounts): Promise<VerbServer> {
    const socketPath = verbSocketPath(stateDir);
    fs.mkdirSync(stateDir, { recursive: true });
    const vs = new VerbServer(socketPath, stateDir, counts);
    // Bound under a name of this process's and renamed into place: a plugin always finds
    // a socket there (an earlier agent's until this one's replaces it), and closing, which
    // unlinks the bound name, can never remove a newer agent's.
    const bound = `${socketPath}.${process.pid}`;
    removeStaleSocket(bound);
    const listening = new Promise<void>((resolve, reject) => {
      vs.server.once("error", reject);
      vs.server.once("listening", () => resolve());
    });
    // 0600 from the bind: the umask only around it, given back at once (it is the whole
    // process's); chmod'ed again before the socket takes its name.
    const umask = process.umask(0o177);
    try {
      vs.server.listen(bound);
    } finally {
      process.umask(umask);
    }
    await listening;
    fs.chmodSync(bound, 0o600);
    fs.renameSync(bound, socketPath);
    vs.socketIno = fs.lstatSync(socketPath).ino;
    return vs;
  }

  /** Stops taking requests and waits for the verb under way; the socket file goes first. */
  async close(): Promise<void> {
    removeStaleSocket(this.socketPath, this.socketIno);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.tail;
  }

  private accept(sock: net.Socket): void {
    let buffered = "";
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString("utf8");
      const nl = buffered.indexOf("\n");
      if (nl < 0) {
        if (buffered.length > MAX_REQUEST_BYTES) sock.destroy();
        return;
      }
      sock.off("data", onData);
      let request: VerbRequest;
      try {
        request = parseRequest(buffered.slice(0, nl));
      } catch (e) {
        return this.decline(sock, (e as Error).message);
      }
      this.tail = this.tail.then(() => this.take(sock, request));
    };
    sock.on("data", onData);
    sock.on("error", () => sock.destroy());
  }

  /** The request's turn: decline, or say `turn`, wait for `go`, and do the verb. */
  private async take(sock: net.Socket, request: VerbRequest): Promise<void> {
    if (sock.destroyed || !sock.writable) return; // the plugin gave up waiting and did it itself
    const why = this.whyDecline(request);
    if (why) return this.decline(sock, why);
    sock.write(`${JSON.stringify({ turn: true })}\n`);
    if (!(await saysGo(sock))) {
      sock.destroy();
      return;
    }
    let outcome: Outcome;
    try {
      outcome = await invokePlugin(Buffer.from(request.stdin, "utf8"), request.env);
    } catch (e) {
      // invokePlugin answers every failure itself; this is a fault of ours, said plainly.
      agentLog.warn(`handed verb: ${(e as Error).message}`);
      sock.destroy();
      return;
    }
    this.counts.served(request.env.CNI_COMMAND ?? "", outcome.exitCode);
    sock.end(`${JSON.stringify(outcome)}\n`);
  }

  private whyDecline(request: VerbRequest): string | undefined {
    let conf: ReturnType<typeof parseNetConf>;
    try {
      conf = parseNetConf(request.stdin);
    } catch {
      return "the configuration does not parse: the plugin will say why";
    }
    if (conf.agentStateDir !== this.stateDir) return "the conflist is not this agent's";
    const files = filesOfVerb(conf, request.env.CNI_NETNS ?? "");
    if (!files) return "the IPAM plugin is delegated";
    try {
      return filesDiffer(request.files, files.map(identify));
    } catch (e) {
      return `cannot see ${(e as Error).message}`;
    }
  }

  private decline(sock: net.Socket, why: string): void {
    this.counts.declined();
    agentLog.info(`a handed verb declined: ${why}`);
    sock.end(`${JSON.stringify({ declined: why })}\n`);
  }
}

/** Whether the plugin says `go` within GO_WAIT_MS; anything else is a plugin that left. */
function saysGo(sock: net.Socket): Promise<boolean> {
  return new Promise((resolve) => {
    let buffered = "";
    const done = (go: boolean) => {
      clearTimeout(timer);
      sock.off("data", onData);
      sock.off("close", onClose);
      resolve(go);
    };
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString("utf8");
      const nl = buffered.indexOf("\n");
      if (nl < 0) return;
      try {
        done((JSON.parse(buffered.slice(0, nl)) as { go?: unknown }).go === true);
      } catch {
        done(false);
      }
    };
    const onClose = () => done(false);
    const timer = setTimeout(() => done(false), GO_WAIT_MS);
    sock.on("data", onData);
    sock.on("close", onClose);
  });
}

/**
 * Removes the socket at `socketPath` (a crashed run's, or at close only the one of inode
 * `ino`: this server's). Anything else at that path is not ours to remove.
 */
function removeStaleSocket(socketPath: string, ino?: number): void {
  try {
    const st = fs.lstatSync(socketPath);
    if (st.isSocket() && (ino === undefined || st.ino === ino)) fs.unlinkSync(socketPath);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
  }
}
