/**
 * The client's end of an AF_UNIX stream socket as a plain descriptor, driven by blocking
 * libc calls (foreign.ts): socket, connect, send, poll, recv, close. For a CNI verb's
 * short conversation with the node's agent (agent/verbs/client.ts), which has nothing else
 * to do while it waits: node:net took the Bun executable about 4.6 ms to load at every
 * start that handed its verb over, more than the rest of the hand-over together.
 * Knows bytes only; the lines are the caller's.
 */
import { callLibc, describeErrno, type LibcFunction } from "./foreign";
import { callOrThrow, ErrnoError } from "./libc";
import { NativeBuffer } from "./native-memory";

const AF_UNIX = 1;
const SOCK_STREAM = 1;
const SOCK_CLOEXEC = 0o2000000;
/** send(2) without SIGPIPE: a peer gone away is an EPIPE to handle, not the end of us. */
const MSG_NOSIGNAL = 0x4000;
const POLLIN = 0x001;
const EINTR = 4;
/** sizeof(struct sockaddr_un): the family, then a path of at most 107 bytes and its NUL. */
const SOCKADDR_UN_BYTES = 110;
const RECEIVE_CHUNK_BYTES = 64 * 1024;

const call = (fn: LibcFunction, ...args: unknown[]): number => callOrThrow(fn, args);

/** Retries a call the kernel interrupted for a signal. */
function retrying<T>(f: () => T): T {
  for (;;) {
    try {
      return f();
    } catch (e) {
      if (!(e instanceof ErrnoError && e.errno === EINTR)) throw e;
    }
  }
}

/** Nothing arrived within the time the caller gave. */
export class UnixStreamTimeout extends Error {
  constructor(readonly ms: number) {
    super(`nothing received within ${ms} ms`);
    this.name = "UnixStreamTimeout";
  }
}

export class UnixStream {
  private readonly inbox = NativeBuffer.alloc(RECEIVE_CHUNK_BYTES);

  private constructor(private fd: number) {}

  /** Connects to the listening socket at `socketPath`; throws ErrnoError (ENOENT, ECONNREFUSED, ...). */
  static connect(socketPath: string): UnixStream {
    const name = Buffer.from(socketPath, "utf8");
    if (name.length >= SOCKADDR_UN_BYTES - 2) throw new Error(`socket path too long for AF_UNIX: ${socketPath}`);
    const address = Buffer.alloc(SOCKADDR_UN_BYTES);
    address.writeUInt16LE(AF_UNIX, 0);
    name.copy(address, 2);
    const fd = call("socket", AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const stream = new UnixStream(fd);
    try {
      retrying(() => callOrThrow("connect", [fd, address, 2 + name.length + 1], socketPath));
    } catch (e) {
      stream.close();
      throw e;
    }
    return stream;
  }

  /** Sends all of `data` (a stream socket may take it in parts). */
  send(data: Buffer): void {
    let sent = 0;
    while (sent < data.length) {
      const rest = data.subarray(sent);
      sent += retrying(() => call("send", this.fd, rest, rest.length, MSG_NOSIGNAL));
    }
  }

  /**
   * The next bytes the peer sent, or undefined once it closed its end. Waits at most
   * `timeoutMs` (negative: for as long as it takes) and throws UnixStreamTimeout after.
   */
  receive(timeoutMs: number): Buffer | undefined {
    if (!this.readable(timeoutMs)) throw new UnixStreamTimeout(timeoutMs);
    const length = retrying(() => call("recv", this.fd, this.inbox.address, this.inbox.size, 0));
    return length === 0 ? undefined : this.inbox.copy(length);
  }

  close(): void {
    if (this.fd < 0) return;
    callLibc("close", this.fd);
    this.fd = -1;
    this.inbox.free();
  }

  /** poll(2) for input (or the peer's hang-up, which recv then reads as the end). */
  private readable(timeoutMs: number): boolean {
    const pollfd = Buffer.alloc(8);
    pollfd.writeInt32LE(this.fd, 0);
    pollfd.writeInt16LE(POLLIN, 4);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const wait = timeoutMs < 0 ? -1 : Math.max(0, deadline - Date.now());
      const r = callLibc("poll", pollfd, 1, wait);
      if (r.value > 0) return true;
      if (r.value === 0) return false;
      if (r.errno !== EINTR) throw new ErrnoError("poll", r.errno, describeErrno(r.errno));
    }
  }
}
