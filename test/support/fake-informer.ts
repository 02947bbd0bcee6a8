/**
 * An informer driven by the test (src/agent/kube/informer.ts's `Informer`): `list` is the first
 * complete list, `put` and `remove` are watch events. Changes are told the way the
 * agent's informer tells them: once per key, nothing before the first list.
 */
import type { ChangeHandler, Informer } from "../../src/agent/kube/informer";

export class FakeInformer<T> implements Informer<T> {
  private readonly store = new Map<string, T>();
  private readonly changeHandlers: ChangeHandler<T>[] = [];
  private readonly syncedHandlers: (() => void)[] = [];
  private isSynced = false;

  constructor(private readonly keyOf: (object: T) => string) {}

  get synced(): boolean {
    return this.isSynced;
  }

  get size(): number {
    return this.store.size;
  }

  get(key: string): T | undefined {
    return this.store.get(key);
  }

  values(): IterableIterator<T> {
    return this.store.values();
  }

  entries(): IterableIterator<[string, T]> {
    return this.store.entries();
  }

  onChange(handler: ChangeHandler<T>): void {
    this.changeHandlers.push(handler);
  }

  onSynced(handler: () => void): void {
    this.syncedHandlers.push(handler);
  }

  list(objects: T[]): void {
    for (const o of objects) this.store.set(this.keyOf(o), o);
    this.isSynced = true;
    for (const h of this.syncedHandlers) h();
  }

  put(object: T): void {
    const key = this.keyOf(object);
    const before = this.store.get(key);
    this.store.set(key, object);
    if (this.isSynced) for (const h of this.changeHandlers) h(key, before, object);
  }

  remove(key: string): void {
    const before = this.store.get(key);
    if (!this.store.delete(key) || !this.isSynced) return;
    for (const h of this.changeHandlers) h(key, before, undefined);
  }
}
