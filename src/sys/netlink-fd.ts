/**
 * A netlink socket as a plain descriptor, driven by blocking libc calls (foreign.ts):
 * socket, bind, send, recv, close. Synchronous on purpose: a CNI verb is one short-lived
 * process with nothing else to do while the kernel answers, and a transport that needs no
 * event loop (no libuv-bound addon) also runs under runtimes other than Node.
 * Knows bytes only; the framing of netlink messages is src/netlink/socket.ts's.
 */
import type { LibcFunction } from "./foreign";
import { callOrThrow, ErrnoError, setsockoptInt } from "./libc";
import { NativeBuffer } from "./native-memory";

const AF_NETLINK = 16;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0o2000000;
const SOL_SOCKET = 1;
const SO_RCVTIMEO = 20; // struct timeval (the 64-bit layout on x86-64)
const SO_RCVBUF = 8;
const MSG_TRUNC = 0x20;
const EINTR = 4;
const EAGAIN = 11;

/**
 * Big enough for any single datagram the kernel sends: dump batches are sized from the
 * reader's buffer up to 32 KiB, and an error echoes at most the request it answers.
 */
const RECEIVE_BUFFER_BYTES = 64 * 1024;

const call = (fn: LibcFunction, ...args: unknown[]): number => callOrThrow(fn, args);

export class NetlinkTimeout extends Error {
  constructor(readonly seconds: number) {
    super(`no answer from the kernel within ${seconds} s`);
    this.name = "NetlinkTimeout";
  }
}

export class NetlinkFd {
  private fd: number;
  private readonly inbox = NativeBuffer.alloc(RECEIVE_BUFFER_BYTES);

  /** A socket of `protocol` in the calling thread's current network namespace. */
  constructor(
    protocol: number,
    private readonly receiveTimeoutSeconds: number,
  ) {
    this.fd = call("socket", AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol);
    try {
      const timeval = Buffer.alloc(16);
      timeval.writeBigInt64LE(BigInt(receiveTimeoutSeconds), 0);
      call("setsockopt", this.fd, SOL_SOCKET, SO_RCVTIMEO, timeval, timeval.length);
      // Room for a whole dump in flight: the kernel drops what does not fit (ENOBUFS).
      setsockoptInt(this.fd, SOL_SOCKET, SO_RCVBUF, 1 << 20);
      // struct sockaddr_nl { sa_family_t; unsigned short pad; u32 pid (0: kernel assigns); u32 groups }
      const address = Buffer.alloc(12);
      address.writeUInt16LE(AF_NETLINK, 0);
      call("bind", this.fd, address, address.length);
    } catch (e) {
      this.close();
      throw e;
    }
  }

  get descriptor(): number {
    return this.fd;
  }

  /** Sends one datagram to the kernel (an unconnected netlink socket's default peer). */
  send(message: Buffer): void {
    for (;;) {
      try {
        call("send", this.fd, message, message.length, 0);
        return;
      } catch (e) {
        if (!(e instanceof ErrnoError && e.errno === EINTR)) throw e;
      }
    }
  }

  /** Blocks for the next datagram; throws NetlinkTimeout when none comes in time. */
  receive(): Buffer {
    for (;;) {
      let length: number;
      try {
        length = call("recv", this.fd, this.inbox.address, this.inbox.size, MSG_TRUNC);
      } catch (e) {
        if (e instanceof ErrnoError && e.errno === EINTR) continue;
        if (e instanceof ErrnoError && e.errno === EAGAIN) throw new NetlinkTimeout(this.receiveTimeoutSeconds);
        throw e;
      }
      // With MSG_TRUNC recv returns the datagram's real length: never parse half of one.
      if (length > this.inbox.size) throw new Error(`netlink datagram of ${length} bytes exceeds the receive buffer`);
      return this.inbox.copy(length);
    }
  }

  close(): void {
    if (this.fd < 0) return;
    call("close", this.fd);
    this.fd = -1;
    this.inbox.free();
  }
}
