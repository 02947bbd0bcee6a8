/**
 * Native memory for the pointers in a bpf(2) attr and for buffers the kernel writes into
 * (verifier log, looked-up values, attr fields the kernel fills): a NativeBuffer is bytes
 * JavaScript reads and writes (`bytes`) at a numeric address C sees (`address`). The
 * memory comes from the runtime's foreign-function backend (foreign.ts). The view dangles
 * once the memory is freed: copy results out before `free()`, or allocate in `withNative`,
 * which frees everything when its callback returns.
 *
 * Scopes carve their buffers from one block allocated once per process (the arena),
 * stack-wise: a bpf(2) call needs three or four small buffers, and under Node each
 * allocated one costs three ffi calls (calloc, memset, free) besides the call itself. Only
 * buffers too big for what is left of the block (a verifier log) are allocated apart.
 */
import { foreign, type NativeMemory } from "./foreign";

export class NativeBuffer {
  /** Zero-copy view of the native memory; invalid after free(). */
  readonly bytes: Buffer;
  readonly address: bigint;
  private memory: NativeMemory | null;

  private constructor(
    memory: NativeMemory | null,
    readonly size: number,
    view: { bytes: Buffer; address: bigint },
  ) {
    this.memory = memory;
    this.bytes = view.bytes;
    this.address = view.address;
  }

  /** A buffer inside memory someone else owns (the arena): free() leaves it alone. */
  static within(owner: NativeBuffer, offset: number, size: number): NativeBuffer {
    return new NativeBuffer(null, size, {
      bytes: owner.bytes.subarray(offset, offset + size),
      address: owner.address + BigInt(offset),
    });
  }

  /** Zeroed native memory of `size` bytes (at least 1, so the address is never NULL). */
  static alloc(size: number): NativeBuffer {
    const n = Math.max(1, size);
    const memory = foreign().alloc(n);
    return new NativeBuffer(memory, n, memory);
  }

  static from(bytes: Buffer): NativeBuffer {
    const b = NativeBuffer.alloc(bytes.length);
    bytes.copy(b.bytes);
    return b;
  }

  /** A NUL-terminated copy of `text` (paths, license). */
  static cString(text: string): NativeBuffer {
    return NativeBuffer.from(Buffer.from(`${text}\0`, "utf8"));
  }

  /** A copy of the contents, safe to keep after free(). */
  copy(length = this.size): Buffer {
    return Buffer.from(this.bytes.subarray(0, length));
  }

  /** The text the kernel wrote here (a log, a name), up to its terminating NUL. */
  text(): string {
    return this.copy()
      .toString("utf8")
      .replace(/\0[\s\S]*$/, "");
  }

  free(): void {
    this.memory?.release();
    this.memory = null;
  }
}

/** Runs `fn` with an allocator whose buffers are all freed when `fn` returns or throws. */
export function withNative<T>(fn: (mem: NativeScope) => T): T {
  const scope = new NativeScope();
  try {
    return fn(scope);
  } finally {
    scope.freeAll();
  }
}

/** Enough for every attr, key, value and batch buffer of one call; never freed. */
const ARENA_BYTES = 256 * 1024;
let arena: { block: NativeBuffer; top: number } | undefined;

export class NativeScope {
  private readonly owned: NativeBuffer[] = [];
  /** Where the arena's top was when this scope began: scopes nest (withNative is synchronous). */
  private readonly mark: number;

  constructor() {
    arena ??= { block: NativeBuffer.alloc(ARENA_BYTES), top: 0 };
    this.mark = arena.top;
  }

  /** Zeroed memory of `size` bytes (at least 1), 8-byte aligned, freed with the scope. */
  alloc(size: number): NativeBuffer {
    const n = Math.max(1, size);
    const a = arena as { block: NativeBuffer; top: number };
    const offset = (a.top + 7) & ~7;
    if (offset + n > ARENA_BYTES) return this.keep(NativeBuffer.alloc(n));
    a.top = offset + n;
    a.block.bytes.fill(0, offset, offset + n);
    return NativeBuffer.within(a.block, offset, n);
  }
  from(bytes: Buffer): NativeBuffer {
    const b = this.alloc(bytes.length);
    bytes.copy(b.bytes);
    return b;
  }
  cString(text: string): NativeBuffer {
    return this.from(Buffer.from(`${text}\0`, "utf8"));
  }
  freeAll(): void {
    for (const b of this.owned.splice(0)) b.free();
    if (arena) arena.top = this.mark;
  }
  private keep(b: NativeBuffer): NativeBuffer {
    this.owned.push(b);
    return b;
  }
}
