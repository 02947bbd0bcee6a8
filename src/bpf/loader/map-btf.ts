/**
 * The type information a map must be created with when its kind demands it. Socket
 * storage (BPF_MAP_TYPE_SK_STORAGE) is refused without BTF: the kernel wants its key to
 * be a 32-bit int and its value to have a type of the value's size. Our maps are
 * described by `struct nkc_map_def` (elf.ts), not by BTF, so the smallest BTF that says
 * exactly that is written here: an `int` key and the value as an array of bytes. A value
 * with no struct type can hold no spin lock, timer or kernel pointer, which is what the
 * kernel would otherwise look for in it.
 */
import { btfLoad, closeFd } from "../../sys/bpf-syscall";

const BTF_MAGIC = 0xeb9f;
const HEADER_LEN = 24;
const KIND_INT = 1;
const KIND_ARRAY = 3;
const INT_SIGNED = 1;

/** "\0int\0char\0": name offsets 1 and 5. */
const STRINGS = Buffer.from("\0int\0char\0", "ascii");
const INT_NAME = 1;
const CHAR_NAME = 5;

/** Type ids in the order written (0 is void). */
export const MAP_BTF_KEY_ID = 1;
const CHAR_ID = 2;
export const MAP_BTF_VALUE_ID = 3;

function type(nameOff: number, kind: number, sizeOrType: number, extra: number[]): Buffer {
  const b = Buffer.alloc(12 + extra.length * 4);
  b.writeUInt32LE(nameOff, 0);
  b.writeUInt32LE(kind << 24, 4);
  b.writeUInt32LE(sizeOrType, 8);
  extra.forEach((v, i) => {
    b.writeUInt32LE(v, 12 + i * 4);
  });
  return b;
}

/** Raw BTF: [1] int (4 bytes, 32 bits), [2] char, [3] char[valueSize]. */
export function mapBtf(valueSize: number): Buffer {
  const types = Buffer.concat([
    type(INT_NAME, KIND_INT, 4, [(INT_SIGNED << 24) | 32]),
    type(CHAR_NAME, KIND_INT, 1, [8]),
    type(0, KIND_ARRAY, 0, [CHAR_ID, MAP_BTF_KEY_ID, valueSize]),
  ]);
  const header = Buffer.alloc(HEADER_LEN);
  header.writeUInt16LE(BTF_MAGIC, 0);
  header.writeUInt8(1, 2); // version
  header.writeUInt8(0, 3); // flags
  header.writeUInt32LE(HEADER_LEN, 4);
  header.writeUInt32LE(0, 8); // type_off (from the end of the header)
  header.writeUInt32LE(types.length, 12);
  header.writeUInt32LE(types.length, 16); // str_off
  header.writeUInt32LE(STRINGS.length, 20);
  return Buffer.concat([header, types, STRINGS]);
}

/** Runs `create` with the BTF of a map whose value is `valueSize` bytes loaded; the map
 * keeps its own reference, so the fd is closed afterwards. */
export function withMapBtf<T>(
  valueSize: number,
  create: (btf: { fd: number; keyTypeId: number; valueTypeId: number }) => T,
): T {
  const fd = btfLoad(mapBtf(valueSize));
  try {
    return create({ fd, keyTypeId: MAP_BTF_KEY_ID, valueTypeId: MAP_BTF_VALUE_ID });
  } finally {
    closeFd(fd);
  }
}
