/**
 * BPF_PROG_TEST_RUN for our SCHED_CLS programs: run a program on one packet without a
 * device, with a struct __sk_buff context carrying the ingress ifindex. The kernel
 * resolves that ifindex (and FIB lookups) in the calling thread's network namespace.
 * Test-only, so it lives here and not in the executable; its uapi numbers are checked
 * with the product's (test/bpf/uapi-layout.c).
 */
import type { BpfProgram } from "../../../src/bpf/loader/programs";
import { bpf, newAttr } from "../../../src/sys/bpf-syscall";
import { withNative } from "../../../src/sys/native-memory";

/** The test run's slice of the uapi, in the shape of src/sys/bpf-uapi.ts's tables. */
export const TEST_RUN_UAPI = {
  SIZEOF: { "struct __sk_buff": 192 },
  ATTR: {
    TEST: {
      prog_fd: 0,
      retval: 4,
      data_size_in: 8,
      data_size_out: 12,
      data_in: 16,
      data_out: 24,
      repeat: 32,
      duration: 36,
      ctx_size_in: 40,
      ctx_size_out: 44,
      ctx_in: 48,
      ctx_out: 56,
    },
    SK_BUFF: { mark: 8, ingress_ifindex: 36, ifindex: 40, tstamp: 152, tstamp_type: 180 },
  },
  /** tcx verdicts (enum tcx_action_base); netkit's enum netkit_action has the same values. */
  TCX_VERDICT: { NEXT: -1, PASS: 0, DROP: 2, REDIRECT: 7 },
} as const;

const { ATTR, SIZEOF, TCX_VERDICT } = TEST_RUN_UAPI;

interface TestRunAttr {
  progFd: number;
  dataIn: Buffer;
  /** Room for the packet after the program ran (ENOSPC if too small). */
  dataOutSize: number;
  /** struct __sk_buff (or another context) passed in as ctx_in. */
  ctxIn?: Buffer;
  /** Room for the context after the run (ctx_out); 0 or absent: not read back. */
  ctxOutSize?: number;
  repeat?: number;
}

interface TestRunResult {
  /** The program's return value, as a signed 32-bit number (TCX_NEXT is -1). */
  retval: number;
  dataOut: Buffer;
  /** The context as the program left it, when ctxOutSize asked for it. */
  ctxOut: Buffer | undefined;
  durationNs: number;
}

/** The BPF_PROG_TEST_RUN command itself. */
function progTestRun(a: TestRunAttr): TestRunResult {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const b = attr.bytes;
    const o = ATTR.TEST;
    const dataIn = mem.from(a.dataIn);
    const dataOut = mem.alloc(a.dataOutSize);
    b.writeUInt32LE(a.progFd, o.prog_fd);
    b.writeUInt32LE(a.dataIn.length, o.data_size_in);
    b.writeUInt32LE(dataOut.size, o.data_size_out);
    b.writeBigUInt64LE(dataIn.address, o.data_in);
    b.writeBigUInt64LE(dataOut.address, o.data_out);
    b.writeUInt32LE(a.repeat ?? 1, o.repeat);
    if (a.ctxIn) {
      const ctx = mem.from(a.ctxIn);
      b.writeUInt32LE(a.ctxIn.length, o.ctx_size_in);
      b.writeBigUInt64LE(ctx.address, o.ctx_in);
    }
    const ctxOut = a.ctxOutSize ? mem.alloc(a.ctxOutSize) : undefined;
    if (ctxOut) {
      b.writeUInt32LE(ctxOut.size, o.ctx_size_out);
      b.writeBigUInt64LE(ctxOut.address, o.ctx_out);
    }
    bpf("PROG_TEST_RUN", attr);
    return {
      retval: b.readInt32LE(o.retval),
      dataOut: dataOut.copy(b.readUInt32LE(o.data_size_out)),
      ctxOut: ctxOut?.copy(b.readUInt32LE(o.ctx_size_out)),
      durationNs: b.readUInt32LE(o.duration),
    };
  });
}

interface TestRunInput {
  /** The frame, starting with the Ethernet header. */
  packet: Buffer;
  /** skb->ifindex during the run (0: the loopback device). */
  ifindex?: number;
  mark?: number;
  /** skb->tstamp on the way in, untyped (as a receive time is); absent: none. */
  tstamp?: bigint;
}

interface TestRunOutput {
  verdict: number;
  verdictName: string;
  /** The packet as the program left it (TTL, checksum, MAC rewrites). */
  packet: Buffer;
  /** skb->tstamp as the program left it (a departure time, for EDT); 0n: none. */
  tstamp: bigint;
  durationNs: number;
}

const VERDICT_NAMES = new Map<number, string>(Object.entries(TCX_VERDICT).map(([name, n]) => [n, name]));

export function testRun(program: BpfProgram, input: TestRunInput): TestRunOutput {
  const ctx = Buffer.alloc(SIZEOF["struct __sk_buff"]);
  ctx.writeUInt32LE(input.ifindex ?? 0, ATTR.SK_BUFF.ifindex);
  ctx.writeUInt32LE(input.mark ?? 0, ATTR.SK_BUFF.mark);
  ctx.writeBigUInt64LE(input.tstamp ?? 0n, ATTR.SK_BUFF.tstamp);
  const r = progTestRun({
    progFd: program.fd,
    dataIn: input.packet,
    dataOutSize: input.packet.length + 256,
    ctxIn: ctx,
    ctxOutSize: ctx.length,
  });
  return {
    verdict: r.retval,
    verdictName: VERDICT_NAMES.get(r.retval) ?? `${r.retval}`,
    packet: r.dataOut,
    tstamp: r.ctxOut?.readBigUInt64LE(ATTR.SK_BUFF.tstamp) ?? 0n,
    durationNs: r.durationNs,
  };
}
