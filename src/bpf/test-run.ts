/**
 * BPF_PROG_TEST_RUN for our SCHED_CLS programs: run a program on one packet without a
 * device, with a struct __sk_buff context carrying the ingress ifindex. The kernel
 * resolves that ifindex (and FIB lookups) in the calling thread's network namespace.
 * Used by tests and self-checks; nothing is sent anywhere.
 */
import { ATTR, progTestRun, SIZEOF, TCX_VERDICT } from "../sys/bpf-syscall";
import type { BpfProgram } from "./programs";

export interface TestRunInput {
  /** The frame, starting with the Ethernet header. */
  packet: Buffer;
  /** skb->ifindex during the run (0: the loopback device). */
  ifindex?: number;
  mark?: number;
}

export interface TestRunOutput {
  verdict: number;
  verdictName: string;
  /** The packet as the program left it (TTL, checksum, MAC rewrites). */
  packet: Buffer;
  durationNs: number;
}

const VERDICT_NAMES = new Map<number, string>(Object.entries(TCX_VERDICT).map(([name, n]) => [n, name]));

export function testRun(program: BpfProgram, input: TestRunInput): TestRunOutput {
  const ctx = Buffer.alloc(SIZEOF["struct __sk_buff"]);
  ctx.writeUInt32LE(input.ifindex ?? 0, ATTR.SK_BUFF.ifindex);
  ctx.writeUInt32LE(input.mark ?? 0, ATTR.SK_BUFF.mark);
  const r = progTestRun({
    progFd: program.fd,
    dataIn: input.packet,
    dataOutSize: input.packet.length + 256,
    ctxIn: ctx,
  });
  return {
    verdict: r.retval,
    verdictName: VERDICT_NAMES.get(r.retval) ?? `${r.retval}`,
    packet: r.dataOut,
    durationNs: r.durationNs,
  };
}
