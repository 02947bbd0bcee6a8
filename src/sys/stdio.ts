/**
 * The plugin's stdin and stdout as plain file descriptors. Node's and Bun's process.stdin
 * and process.stdout are streams whose machinery is loaded on first touch; in the
 * Bun-compiled executable that alone is over 10 ms of a 30 ms start, paid by every verb.
 * CNI needs neither streaming nor buffering: one document in, one out.
 */
import * as fs from "node:fs";
import { isTerminal, waitReady } from "./libc";

const STDIN = 0;
const STDOUT = 1;

function isAgain(e: unknown): boolean {
  return (e as NodeJS.ErrnoException).code === "EAGAIN";
}

/**
 * All of stdin, until end of file. A terminal gives nothing (a person ran the executable
 * without input). The runtime may still be writing when we start, and may have made the
 * pipe non-blocking: then read(2) says EAGAIN, and we wait in poll(2) rather than spin.
 */
export function readAllStdin(): Buffer {
  if (isTerminal(STDIN)) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  for (;;) {
    const chunk = Buffer.allocUnsafe(64 * 1024);
    let n: number;
    try {
      n = fs.readSync(STDIN, chunk, 0, chunk.length, null);
    } catch (e) {
      if (isAgain(e)) {
        waitReady(STDIN);
        continue;
      }
      // No stdin at all (closed descriptor): the same as empty input.
      if ((e as NodeJS.ErrnoException).code === "EBADF") break;
      throw e;
    }
    if (n === 0) break;
    chunks.push(chunk.subarray(0, n));
  }
  return Buffer.concat(chunks);
}

/** Writes all of `text` to stdout, waiting in poll(2) if the pipe is non-blocking and full. */
export function writeStdout(text: string): void {
  const bytes = Buffer.from(text, "utf8");
  let off = 0;
  while (off < bytes.length) {
    try {
      off += fs.writeSync(STDOUT, bytes, off, bytes.length - off);
    } catch (e) {
      if (!isAgain(e)) throw e;
      waitReady(STDOUT, true);
    }
  }
}
