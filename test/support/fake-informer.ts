/**
 * An informer driven by the test (src/agent/kube/informer.ts's `Informer`): `list` is the first
 * complete list, `put` and `remove` are watch events. Changes are told the way the
 * agent's informer tells them (its store is the same InformerStore): once per key,
 * nothing before the first list.
 */
import { InformerStore } from "../../src/agent/kube/informer";

export class FakeInformer<T> extends InformerStore<T> {
  constructor(private readonly keyOf: (object: T) => string) {
    super();
  }

  list(objects: T[]): void {
    const next = new Map(this.store);
    for (const o of objects) next.set(this.keyOf(o), o);
    this.replaceAll(next);
  }

  put(object: T): void {
    const key = this.keyOf(object);
    const before = this.store.get(key);
    this.store.set(key, object);
    if (this.synced) this.tell(key, before, object);
  }

  remove(key: string): void {
    const before = this.store.get(key);
    if (!this.store.delete(key) || !this.synced) return;
    this.tell(key, before, undefined);
  }
}
