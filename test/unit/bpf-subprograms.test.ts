/**
 * bpf-to-bpf calls linked as libbpf links them (src/bpf/loader/subprograms.ts): a program's
 * calls into .text point at the functions appended after it, calls between those
 * functions keep pointing at each other in their new places, only what is reached is
 * appended, a kernel function's call (a relocated pseudo call) is left for programs.ts,
 * and .text's relocations move with their functions.
 */
import { describe, expect, it } from "vitest";
import { isPseudoCall, linkSubprograms, type TextFunction } from "../../src/bpf/loader/subprograms";

const EXIT = [0x95, 0, 0, 0, 0, 0, 0, 0];
const MOV = [0xb4, 0, 0, 0, 7, 0, 0, 0]; // w0 = 7
/** `call imm` with src_reg BPF_PSEUDO_CALL. */
const call = (imm: number) => {
  const b = Buffer.from([0x85, 0x10, 0, 0, 0, 0, 0, 0]);
  b.writeInt32LE(imm, 4);
  return [...b];
};
const insns = (...list: number[][]) => Buffer.from(list.flat());
const immAt = (b: Buffer, i: number) => b.readInt32LE(i * 8 + 4);
const targetOf = (b: Buffer, i: number) => i + 1 + immAt(b, i);

// .text: f (0-1), g (2-4, calls f), unused (5-6), h (7-8: a kernel function's call, relocated, then exit).
const text = insns(MOV, EXIT, MOV, call(-4), EXIT, MOV, EXIT, call(-1), EXIT);
const functions: TextFunction[] = [
  { name: "f", start: 0, length: 2 },
  { name: "g", start: 2, length: 3 },
  { name: "unused", start: 5, length: 2 },
  { name: "h", start: 7, length: 2 },
];
const textRelocations = [{ textIndex: 7, item: { kind: "kfunc" as const, name: "bpf_skb_ct_lookup" } }];

describe("linking a program's subprograms", () => {
  it("appends the functions it reaches, with every call pointing at their new places", () => {
    // The program: calls g (which calls f), then h.
    const own = insns(MOV, call(1), MOV, call(6), EXIT);
    const linked = linkSubprograms(
      "prog",
      own,
      [
        { insnIndex: 1, target: 2 },
        { insnIndex: 3, target: 7 },
      ],
      text,
      functions,
      textRelocations,
    );
    const out = linked.instructions;
    // Program (5), then g (3), f (2), h (2): 12 instructions, nothing of `unused`.
    expect(out.length / 8).toBe(12);
    expect(targetOf(out, 1)).toBe(5); // g
    expect(targetOf(out, 3)).toBe(10); // h
    expect(isPseudoCall(out, 6)).toBe(true);
    expect(targetOf(out, 6)).toBe(8); // g's call to f
    expect(out.subarray(8 * 8, 10 * 8)).toEqual(insns(MOV, EXIT)); // f
    // h's kernel function call keeps its relocation, moved to h's place.
    expect(linked.relocations).toEqual([{ kind: "kfunc", name: "bpf_skb_ct_lookup", insnIndex: 10 }]);
    expect(immAt(out, 10)).toBe(-1); // untouched: programs.ts links it
  });

  it("leaves a program without calls into .text as it is", () => {
    const own = insns(MOV, EXIT);
    expect(linkSubprograms("prog", own, [], text, functions, textRelocations)).toEqual({
      instructions: own,
      relocations: [],
    });
  });

  it("refuses a call to where no function starts", () => {
    const own = insns(call(2), EXIT);
    expect(() => linkSubprograms("prog", own, [{ insnIndex: 0, target: 3 }], text, functions, [])).toThrow(
      /program prog: a call into .text at instruction 3, where no function starts/,
    );
  });
});
