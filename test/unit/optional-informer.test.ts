/**
 * OptionalInformer: a kind a CRD may serve is empty and synced while it is not installed,
 * picked up when it is, moved to the preferred version when that is served, let go when
 * it is removed, and a discovery that fails changes nothing.
 */
import { describe, expect, it } from "vitest";
import { OptionalInformer, type StartableInformer } from "../../src/agent/kube/optional-informer";
import { FakeInformer } from "../support/fake-informer";

interface Obj {
  name: string;
  v: number;
}

class StartableFake extends FakeInformer<Obj> implements StartableInformer<Obj> {
  started = 0;
  stopped = 0;
  constructor(readonly version: string) {
    super((o) => o.name);
  }
  start(): void {
    this.started += 1;
  }
  stop(): void {
    this.stopped += 1;
  }
}

function setup(versions = ["v1beta1", "v1alpha2"]) {
  let served: string[] | undefined | Error;
  const made: StartableFake[] = [];
  const changes: string[] = [];
  const switched: (string | undefined)[] = [];
  const failures: string[] = [];
  const informer = new OptionalInformer<Obj>({
    discover: async () => {
      if (served instanceof Error) throw served;
      return served;
    },
    versions,
    makeInformer: (version) => {
      const f = new StartableFake(version);
      made.push(f);
      return f;
    },
    pollMs: 3_600_000,
    failed: (e) => failures.push(e.message),
    switched: (v) => switched.push(v),
  });
  informer.onChange((key, before, after) => changes.push(`${key}:${before?.v ?? "-"}>${after?.v ?? "-"}`));
  const serve = async (s: string[] | undefined | Error) => {
    served = s;
    await informer.poll();
  };
  return { informer, made, changes, switched, failures, serve };
}

describe("OptionalInformer", () => {
  it("is synced and empty while the group is not served, and starts no informer", async () => {
    const t = setup();
    let synced = 0;
    t.informer.onSynced(() => synced++);
    expect(t.informer.synced).toBe(false);
    await t.serve(undefined);
    expect(t.informer.synced).toBe(true);
    expect(synced).toBe(1);
    expect(t.informer.size).toBe(0);
    expect(t.made).toEqual([]);
    expect(t.informer.version).toBeUndefined();
    t.informer.stop();
  });

  it("stays unsynced while discovery fails before its first answer", async () => {
    const t = setup();
    await t.serve(new Error("connection refused"));
    expect(t.informer.synced).toBe(false);
    expect(t.failures).toEqual(["connection refused"]);
    t.informer.stop();
  });

  it("picks the kind up when installed: synced once its first list arrives, objects told as changes", async () => {
    const t = setup();
    await t.serve(undefined);
    await t.serve(["v1alpha2"]);
    expect(t.made.map((m) => m.version)).toEqual(["v1alpha2"]);
    expect(t.made[0]?.started).toBe(1);
    expect(t.informer.version).toBeUndefined(); // not listed yet
    t.made[0]?.list([{ name: "a", v: 1 }]);
    expect(t.informer.version).toBe("v1alpha2");
    expect(t.changes).toEqual(["a:->1"]);
    expect(t.informer.get("a")).toEqual({ name: "a", v: 1 });
    t.made[0]?.put({ name: "a", v: 2 });
    t.made[0]?.remove("a");
    expect(t.changes).toEqual(["a:->1", "a:1>2", "a:2>-"]);
    expect(t.informer.size).toBe(0);
    t.informer.stop();
  });

  it("first answer with the kind served: synced at the version's first list, not before", async () => {
    const t = setup();
    let synced = 0;
    t.informer.onSynced(() => synced++);
    await t.serve(["v1alpha2", "v1beta1"]);
    expect(t.made.map((m) => m.version)).toEqual(["v1beta1"]); // the preferred one
    expect(t.informer.synced).toBe(false);
    t.made[0]?.list([{ name: "a", v: 1 }]);
    expect(t.informer.synced).toBe(true);
    expect(synced).toBe(1);
    expect(t.changes).toEqual([]); // the first list is the starting state, not changes
    t.informer.stop();
  });

  it("moves to the preferred version when it is served: the old one's objects stand until the new one lists", async () => {
    const t = setup();
    await t.serve(["v1alpha2"]);
    t.made[0]?.list([
      { name: "a", v: 1 },
      { name: "b", v: 1 },
    ]);
    await t.serve(["v1alpha2", "v1beta1"]);
    expect(t.made.map((m) => m.version)).toEqual(["v1alpha2", "v1beta1"]);
    expect(t.informer.size).toBe(2); // still the old version's
    t.made[0]?.put({ name: "a", v: 5 }); // the old one still reports until the new one lists
    expect(t.changes).toEqual(["a:1>5"]);
    t.made[1]?.list([
      { name: "a", v: 5 },
      { name: "c", v: 1 },
    ]);
    expect(t.made[0]?.stopped).toBe(1);
    expect(t.informer.version).toBe("v1beta1");
    expect(t.changes).toEqual(["a:1>5", "b:1>-", "c:->1"]);
    t.made[0]?.put({ name: "z", v: 1 }); // a stopped version's late event is ignored
    expect(t.informer.get("z")).toBeUndefined();
    expect(t.switched).toEqual(["v1alpha2", "v1beta1"]);
    t.informer.stop();
  });

  it("lets the kind go when its CRD is removed: every object deleted", async () => {
    const t = setup();
    await t.serve(["v1beta1"]);
    t.made[0]?.list([{ name: "a", v: 1 }]);
    await t.serve(undefined);
    expect(t.made[0]?.stopped).toBe(1);
    expect(t.changes).toEqual(["a:1>-"]);
    expect(t.informer.size).toBe(0);
    expect(t.informer.version).toBeUndefined();
    t.informer.stop();
  });

  it("a discovery that fails later keeps the objects known", async () => {
    const t = setup();
    await t.serve(["v1beta1"]);
    t.made[0]?.list([{ name: "a", v: 1 }]);
    await t.serve(new Error("HTTP 503"));
    expect(t.informer.get("a")).toEqual({ name: "a", v: 1 });
    expect(t.made[0]?.stopped).toBe(0);
    expect(t.changes).toEqual([]);
    t.informer.stop();
  });

  it("a version it does not read is as good as none", async () => {
    const t = setup();
    await t.serve(["v1alpha1"]);
    expect(t.informer.synced).toBe(true);
    expect(t.made).toEqual([]);
    t.informer.stop();
  });
});
