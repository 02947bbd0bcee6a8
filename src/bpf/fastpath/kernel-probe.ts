/**
 * What the kernel offers the conntrack variant (bpf/lib/conntrack.h): a BPF JIT, and
 * conntrack's kfuncs in its BTF. Asked by `status` and the tests without loading the
 * node's programs; node.ts loads the variant, the real test, with the same functions.
 */
import { type KernelFunctions, resolveKernelFunctions } from "../loader/kfuncs";
import { firstLine, loadProgram } from "../loader/programs";

/** The kfuncs the conntrack variant calls, and the module that has them when not built in. */
const CONNTRACK_KFUNCS = ["bpf_skb_ct_lookup", "bpf_ct_release"];
const CONNTRACK_MODULE = "nf_conntrack";

/** The conntrack variant's kfuncs as the loader links them; the caller closes them. */
export function resolveConntrackFunctions(): KernelFunctions {
  return resolveKernelFunctions(CONNTRACK_KFUNCS, CONNTRACK_MODULE);
}

/**
 * Why this kernel cannot run the conntrack variant, or undefined when it looks able to
 * (for `status` and tests; loading is the real test). kfunc calls need a JIT: `jited`
 * says whether a program of ours was JIT-compiled, else a two-instruction program is
 * loaded to find out (net.core.bpf_jit_enable is visible only from the initial network
 * namespace, and absent where the kernel has no JIT). And the conntrack functions must be
 * in the kernel's BTF.
 */
export function conntrackUnavailable(jited = probeJit()): string | undefined {
  if (!jited) return "the kernel runs BPF programs without a JIT (kfunc calls need one)";
  try {
    resolveConntrackFunctions().close();
    return undefined;
  } catch (e) {
    return firstLine(e);
  }
}

/** Does the kernel JIT-compile what we load? Asked of `r0 = 0; exit`. */
export function probeJit(): boolean {
  const program = loadProgram(
    {
      name: "nkc_jit_probe",
      section: "tc",
      instructions: Buffer.from([0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0]),
      relocations: [],
      kfuncCalls: [],
    },
    { license: "GPL", maps: new Map() },
  );
  try {
    return program.jited();
  } finally {
    program.close();
  }
}
