/**
 * CLOCK_MONOTONIC, read with clock_gettime(2): one clock for every process on the host,
 * unaffected by changes to the wall clock. Not process.hrtime: Node's happens to read
 * this clock, but Bun's counts from the start of the process, and the file lock's queue
 * orders processes by the time each arrived.
 */
import { callLibc } from "./foreign";
import { NativeBuffer } from "./native-memory";

const CLOCK_MONOTONIC = 1;

let timespec: NativeBuffer | undefined;

/** Nanoseconds on CLOCK_MONOTONIC (since boot, not counting suspend). */
export function monotonicNs(): bigint {
  // struct timespec { time_t tv_sec; long tv_nsec; }: the kernel writes it, so native memory.
  timespec ??= NativeBuffer.alloc(16);
  if (callLibc("clock_gettime", CLOCK_MONOTONIC, timespec.address).value !== 0) {
    throw new Error("clock_gettime(CLOCK_MONOTONIC) failed");
  }
  return timespec.bytes.readBigInt64LE(0) * 1_000_000_000n + timespec.bytes.readBigInt64LE(8);
}

/** Milliseconds on CLOCK_MONOTONIC, for deadlines. */
export const monotonicMs = (): number => Number(monotonicNs()) / 1e6;
