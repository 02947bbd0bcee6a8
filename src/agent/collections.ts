/**
 * Helpers for JavaScript's own collections (not the kernel's BPF maps, which src/bpf
 * calls maps). Pure and importing nothing, so the pure policy model may use them too.
 */

/** The value at `key`, made and stored by `make` when there is none. */
export function getOrMake<K, V>(map: Map<K, V>, key: K, make: () => V): V {
  let value = map.get(key);
  if (value === undefined) {
    value = make();
    map.set(key, value);
  }
  return value;
}
