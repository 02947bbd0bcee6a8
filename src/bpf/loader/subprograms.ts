/**
 * bpf-to-bpf calls, as libbpf links them: a program that calls static functions of the
 * object's .text (`static __noinline` in the C) is loaded as its own instructions
 * followed by every .text function it reaches, each call's offset pointing at the
 * function's new place. Pure.
 *
 * Why the programs have any: the verifier walks a program path by path, and an inlined
 * function's stack slots and branches multiply the paths of whatever follows it. A
 * subprogram's frame is gone when it returns, so the caller's paths after the call merge
 * again (NetworkPolicy's judgment, called twice by nkc_pod_policy, costs the verifier a
 * tenth of what its inlined copies did).
 *
 * How clang encodes them (clang 14, -target bpf): a call is `call imm` with src_reg
 * BPF_PSEUDO_CALL (1), its target `imm + 1` instructions past the call; from another
 * section it carries an R_BPF_64_32 relocation against the .text section symbol (or a
 * function of it), its target then `symbol value / 8 + imm + 1` instructions into .text.
 * Calls within .text need no relocation; a kernel function's call looks the same but has
 * one (against the extern), which programs.ts links. Only the functions a program reaches are
 * appended: the verifier refuses instructions no path reaches.
 */

const BPF_CALL = 0x85; // BPF_JMP | BPF_CALL
const BPF_PSEUDO_CALL = 1;
const INSN = 8;

/** A static function of .text: where it starts, in instructions, and how many it has. */
export interface TextFunction {
  name: string;
  start: number;
  length: number;
}

/** A call from a program into .text, as its relocation gives it. */
export interface TextCall {
  /** The call instruction's index in the program. */
  insnIndex: number;
  /** The instruction of .text it calls. */
  target: number;
}

/** A relocation of .text (a map or a kernel function), at an instruction of it. */
export interface TextRelocation<T> {
  /** Instruction index inside .text. */
  textIndex: number;
  item: T;
}

/** A kernel function called from .text. */
export interface KfuncCallAt {
  kind: "kfunc";
  name: string;
}

export interface Linked<T> {
  instructions: Buffer;
  /** The .text relocations of the functions appended, at their instruction in the result. */
  relocations: (T & { insnIndex: number })[];
}

export const isPseudoCall = (insns: Buffer, index: number) =>
  insns[index * INSN] === BPF_CALL && (insns[index * INSN + 1] ?? 0) >> 4 === BPF_PSEUDO_CALL;

/** The .text instruction a pseudo call at `index` of .text reaches. */
const callTarget = (text: Buffer, index: number) => index + 1 + text.readInt32LE(index * INSN + 4);

/**
 * The program `own` (its instructions; `calls` into .text) with the .text functions it
 * reaches appended, and the relocations of those functions (`textRelocations`, of any
 * kind) moved to their place in the result.
 */
export function linkSubprograms<T>(
  program: string,
  own: Buffer,
  calls: TextCall[],
  text: Buffer,
  functions: TextFunction[],
  textRelocations: TextRelocation<T>[],
): Linked<T> {
  if (calls.length === 0) return { instructions: own, relocations: [] };
  const functionAt = (target: number): TextFunction => {
    const f = functions.find((fn) => fn.start === target);
    if (!f) throw new Error(`program ${program}: a call into .text at instruction ${target}, where no function starts`);
    return f;
  };
  // A call with a relocation is a kernel function's (clang encodes those as pseudo calls
  // too, until the loader links them): not a call into .text.
  const relocated = new Set(textRelocations.map((r) => r.textIndex));
  const callsInText = (i: number) => isPseudoCall(text, i) && !relocated.has(i);
  // Every function reached, in the order first reached.
  const reached: TextFunction[] = [];
  const visit = (f: TextFunction) => {
    if (reached.includes(f)) return;
    reached.push(f);
    for (let i = f.start; i < f.start + f.length; i++) if (callsInText(i)) visit(functionAt(callTarget(text, i)));
  };
  for (const call of calls) visit(functionAt(call.target));

  const placed = new Map<TextFunction, number>();
  let end = own.length / INSN;
  for (const f of reached) {
    placed.set(f, end);
    end += f.length;
  }
  const out = Buffer.alloc(end * INSN);
  own.copy(out, 0);
  const setImm = (at: number, target: number) => out.writeInt32LE(target - at - 1, at * INSN + 4);
  for (const call of calls) {
    if (!isPseudoCall(own, call.insnIndex)) throw new Error(`program ${program}: relocation into .text is not a call`);
    setImm(call.insnIndex, placed.get(functionAt(call.target)) as number);
  }
  for (const f of reached) {
    const at = placed.get(f) as number;
    text.copy(out, at * INSN, f.start * INSN, (f.start + f.length) * INSN);
    for (let i = 0; i < f.length; i++) {
      if (callsInText(f.start + i)) setImm(at + i, placed.get(functionAt(callTarget(text, f.start + i))) as number);
    }
  }
  const relocations: (T & { insnIndex: number })[] = [];
  for (const r of textRelocations) {
    const f = reached.find((fn) => r.textIndex >= fn.start && r.textIndex < fn.start + fn.length);
    if (f) relocations.push({ ...r.item, insnIndex: (placed.get(f) as number) + r.textIndex - f.start });
  }
  return { instructions: out, relocations };
}
