/**
 * Reads the whole of stdin (the network configuration) as cheaply as Node allows.
 *
 * Most runtimes hand us a blocking pipe or a file: plain read(2) calls then cost far less
 * than creating `process.stdin` (a stream, which loads Node's net and stream machinery).
 * Some give a non-blocking pipe (libuv does), where the writer may still be writing when we
 * start and read(2) fails with EAGAIN: only then is the rest read through a stream, which
 * waits for data without spinning.
 */
import * as fs from "node:fs";

const CHUNK = 64 * 1024;

export async function readAllInput(fd = 0): Promise<Buffer> {
  // A terminal: someone ran the executable by hand with no configuration piped in.
  // (/dev/null, also a character device, would read as empty anyway.)
  if (fs.fstatSync(fd).isCharacterDevice()) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  const buf = Buffer.allocUnsafe(CHUNK);
  for (;;) {
    let n: number;
    try {
      n = fs.readSync(fd, buf, 0, CHUNK, null);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EAGAIN") throw e;
      // Loaded only here: node:net costs more to load than the whole read above.
      const net: typeof import("node:net") = require("node:net");
      for await (const chunk of new net.Socket({ fd, readable: true, writable: false })) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks);
    }
    if (n === 0) return Buffer.concat(chunks);
    chunks.push(Buffer.from(buf.subarray(0, n)));
  }
}
