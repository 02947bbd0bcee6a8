/**
 * Netlink attribute (TLV) encoding and decoding: 4-byte header (length, type), payload,
 * padded to 4 bytes. Pure functions over Buffers; no sockets. Nested attributes are
 * encoded with their padding included, which the kernel's strict validation insists on.
 */

export const NLA_F_NESTED = 1 << 15;
const NLA_TYPE_MASK = ~(NLA_F_NESTED | (1 << 14)) & 0xffff;

const align4 = (n: number) => (n + 3) & ~3;

/** One encoded attribute. */
export type Attr = Buffer;

export function attr(type: number, payload: Buffer): Attr {
  const len = 4 + payload.length;
  const out = Buffer.alloc(align4(len));
  out.writeUInt16LE(len, 0);
  out.writeUInt16LE(type, 2);
  payload.copy(out, 4);
  return out;
}

export const attrNested = (type: number, children: Attr[]): Attr => attr(type | NLA_F_NESTED, Buffer.concat(children));

export const attrU8 = (type: number, v: number): Attr => attr(type, Buffer.from([v]));

export function attrU32(type: number, v: number): Attr {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v >>> 0);
  return attr(type, b);
}

export function attrS32(type: number, v: number): Attr {
  const b = Buffer.alloc(4);
  b.writeInt32LE(v);
  return attr(type, b);
}

/** A NUL-terminated string, as the kernel expects for names and kinds. */
export const attrString = (type: number, s: string): Attr =>
  attr(type, Buffer.concat([Buffer.from(s, "utf8"), Buffer.alloc(1)]));

/** Decoded attributes by type; the last one wins when a type repeats. */
export type AttrMap = Map<number, Buffer>;

export function parseAttrs(buf: Buffer, offset = 0): AttrMap {
  const out: AttrMap = new Map();
  let pos = offset;
  while (pos + 4 <= buf.length) {
    const len = buf.readUInt16LE(pos);
    if (len < 4 || pos + len > buf.length) break;
    const type = buf.readUInt16LE(pos + 2) & NLA_TYPE_MASK;
    out.set(type, buf.subarray(pos + 4, pos + len));
    pos += align4(len);
  }
  return out;
}

export function readString(b: Buffer | undefined): string | undefined {
  if (!b) return undefined;
  const nul = b.indexOf(0);
  return b.toString("utf8", 0, nul === -1 ? b.length : nul);
}

export const readU32 = (b: Buffer | undefined): number | undefined =>
  b && b.length >= 4 ? b.readUInt32LE(0) : undefined;

/** "02:ab:…" for a hardware address's bytes (IFLA_ADDRESS, NDA_LLADDR). */
export function macText(bytes: Iterable<number>): string {
  return [...bytes].map((x) => x.toString(16).padStart(2, "0")).join(":");
}
