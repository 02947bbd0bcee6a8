/**
 * The agent's side of handed verbs (protocol.ts): a unix socket only root may open, in the
 * agent's state directory. Each request runs invokePlugin, the very function the
 * executable runs, in this process: no start-up, the code already compiled. Verbs run one
 * at a time, in order of arrival: the verbs' file locks are taken synchronously, so two
 * verbs interleaved on this one thread could wait on each other with nothing left to run.
 *
 * The next request is given its turn while the verb before it runs, so that its `go` is
 * waiting when that verb ends: in a storm the plugins, woken on busy CPUs, took about
 * 3 ms each to answer, and the agent sat idle through half the storm. Only the one next
 * in line is committed that early; the time it has to say `go` runs from when its verb
 * could start, not from the offer.
 *
 * A verb is done here only when it would touch the same files as in the plugin (the pod's
 * netns, IPAM store, log, locks, bpffs: same device and inode for the agent as for the
 * plugin) and its conflist is this agent's; otherwise it is declined and the plugin does it.
 */
import * as fs from "node:fs";
import * as net from "node:net";
import { StringDecoder } from "node:string_decoder";
import { parseNetConf } from "../../cni/config";
import { invokePlugin, type Outcome } from "../../commands/invoke";
import { identify } from "../../sys/file-identity";
import { agentLog } from "../log";
import { filesDiffer, filesOfVerb, parseRequest, type VerbRequest, verbSocketPath } from "./protocol";

/** A request line longer than this is not a plugin's (configs are at most 1 MiB). */
const MAX_REQUEST_BYTES = 4 << 20;
/** How long the plugin has to say `go` once its verb could start. */
const GO_WAIT_MS = 2_000;

/** Told of each verb done here and each declined (the metrics). */
export interface VerbCounts {
  served(verb: string, exitCode: number): void;
  declined(): void;
}

/** The verb itself: invokePlugin, or a test's stand-in. */
export type VerbRunner = (stdin: Buffer, env: NodeJS.ProcessEnv) => Promise<Outcome>;

export interface VerbServerOptions {
  run?: VerbRunner;
  /** How long a plugin has to say `go` once its verb could start (GO_WAIT_MS). */
  goWaitMs?: number;
}

/** A request waiting in line, and what was settled of it before its turn. */
interface Waiting {
  sock: net.Socket;
  request: VerbRequest;
  /** Set once its turn was offered (or it was declined, or found gone): the plugin's `go`. */
  offered?: GoAnswer | "declined" | "gone";
}

export class VerbServer {
  private readonly line: Waiting[] = [];
  private draining: Promise<void> | undefined;
  /** The inode of the socket file this server made: a newer agent's is not removed at close. */
  private socketIno = 0;
  private readonly server: net.Server;
  private readonly run: VerbRunner;
  private readonly goWaitMs: number;

  private constructor(
    readonly socketPath: string,
    private readonly stateDir: string,
    private readonly counts: VerbCounts,
    options: VerbServerOptions,
  ) {
    this.run = options.run ?? ((stdin, env) => invokePlugin(stdin, env));
    this.goWaitMs = options.goWaitMs ?? GO_WAIT_MS;
    this.server = net.createServer((sock) => this.accept(sock));
  }

  static async listen(stateDir: string, counts: VerbCounts, options: VerbServerOptions = {}): Promise<VerbServer> {
    const socketPath = verbSocketPath(stateDir);
    fs.mkdirSync(stateDir, { recursive: true });
    const vs = new VerbServer(socketPath, stateDir, counts, options);
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

  /** Stops taking requests and waits for the verbs in line; the socket file goes first. */
  async close(): Promise<void> {
    removeStaleSocket(this.socketPath, this.socketIno);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.draining;
  }

  private accept(sock: net.Socket): void {
    let buffered = "";
    // A character may straddle two reads of a long request: decoded across them.
    const utf8 = new StringDecoder("utf8");
    const onData = (chunk: Buffer) => {
      buffered += utf8.write(chunk);
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
      this.line.push({ sock, request });
      if (this.draining) this.offerNext();
      else this.draining = this.drain();
    };
    sock.on("data", onData);
    sock.on("error", () => sock.destroy());
  }

  /** Takes the requests in line one at a time until none is left. */
  private async drain(): Promise<void> {
    for (let next = this.line[0]; next; next = this.line[0]) {
      try {
        await this.take(next);
      } catch (e) {
        // A fault of ours in one request must not leave the rest of the line waiting.
        agentLog.warn(`handed verb: ${(e as Error).message}`);
        next.sock.destroy();
      }
      this.line.shift();
    }
    this.draining = undefined;
  }

  /**
   * Offers the turn to the one request after the verb under way (the line's second), if
   * not yet: it can say `go` while that verb runs.
   */
  private offerNext(): void {
    const next = this.line[1];
    if (next && !next.offered) this.offer(next);
  }

  /** Declines the request, or says `turn` and starts listening for its `go`. */
  private offer(w: Waiting): void {
    if (w.sock.destroyed || !w.sock.writable) {
      w.offered = "gone"; // the plugin gave up waiting and did it itself
      return;
    }
    const why = this.whyDecline(w.request);
    if (why) {
      w.offered = "declined";
      this.decline(w.sock, why);
      return;
    }
    w.offered = listenForGo(w.sock);
    w.sock.write(`${JSON.stringify({ turn: true })}\n`);
  }

  /** The request's turn: its `go` (offered now if not before), then the verb and its outcome. */
  private async take(w: Waiting): Promise<void> {
    if (!w.offered) this.offer(w);
    const go = w.offered;
    if (go === "declined" || go === "gone" || go === undefined) return;
    if (!(await go.within(this.goWaitMs))) {
      w.sock.destroy();
      return;
    }
    this.offerNext();
    const { sock, request } = w;
    let outcome: Outcome;
    try {
      outcome = await this.run(Buffer.from(request.stdin, "utf8"), request.env);
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

/** A plugin's answer to its turn, heard from the offer on, judged when its verb can start. */
interface GoAnswer {
  /** Whether it said `go`: at once if it already has, else within `ms` from now. */
  within(ms: number): Promise<boolean>;
}

/**
 * Listens for the plugin's `go` from the moment its turn is offered. Its deadline starts
 * only with within(): a turn offered ahead waits out the verb before it, however long,
 * without the timer running, so a `go` sent in time is never taken for silence.
 */
function listenForGo(sock: net.Socket): GoAnswer {
  let said: boolean | undefined;
  let settle: ((go: boolean) => void) | undefined;
  let buffered = "";
  const done = (go: boolean) => {
    if (said !== undefined) return;
    said = go;
    sock.off("data", onData);
    sock.off("close", onClose);
    settle?.(go);
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
  sock.on("data", onData);
  sock.on("close", onClose);
  return {
    within(ms: number): Promise<boolean> {
      if (said !== undefined) return Promise.resolve(said);
      return new Promise((resolve) => {
        const timer = setTimeout(() => done(false), ms);
        settle = (go) => {
          clearTimeout(timer);
          resolve(go);
        };
      });
    },
  };
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
