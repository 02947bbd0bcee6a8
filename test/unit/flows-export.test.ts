/** The flow log: JSON lines, rotation by size, the fields kept, and failures counted, not thrown. */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { checkFlowFields, FlowExport, pickFields } from "../../src/agent/flows/export";
import type { FlowRecord } from "../../src/flows/record";
import { flowRecord } from "../support/flow-record";

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), "nkc-flow-log-"));
const numbered = (port: number) =>
  flowRecord({ source: { ip: "10.0.0.5", port, kind: "pod", namespace: "a", pod: "client" } });
const ports = (file: string) =>
  fs
    .readFileSync(file, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => (JSON.parse(line) as FlowRecord).source.port);
const lineBytes = Buffer.byteLength(`${JSON.stringify(numbered(10000))}\n`);

describe("FlowExport", () => {
  it("appends a JSON line per record, making the directory", () => {
    const file = path.join(tmp(), "deep", "er", "flows.log");
    const log = new FlowExport({ path: file });
    log.write(numbered(10001));
    log.write(numbered(10002));
    log.close();
    expect(ports(file)).toEqual([10001, 10002]);
    expect(JSON.parse(fs.readFileSync(file, "utf8").split("\n")[0] ?? "")).toEqual(numbered(10001));
    new FlowExport({ path: file }).write(numbered(10003));
    expect(ports(file)).toEqual([10001, 10002, 10003]);
  });

  it("rotates before a line would pass the size, keeping maxFiles, the oldest removed", () => {
    const dir = tmp();
    const file = path.join(dir, "flows.log");
    // Two lines a file.
    const log = new FlowExport({ path: file, maxBytes: 2 * lineBytes, maxFiles: 2 });
    for (let port = 10001; port <= 10007; port++) log.write(numbered(port));
    log.close();
    expect(fs.readdirSync(dir).sort()).toEqual(["flows.log", "flows.log.1", "flows.log.2"]);
    expect(ports(file)).toEqual([10007]);
    expect(ports(`${file}.1`)).toEqual([10005, 10006]);
    expect(ports(`${file}.2`)).toEqual([10003, 10004]);
    expect(log.written).toBe(7);
  });

  it("rotates a file left past the size by an earlier run before writing to it", () => {
    const dir = tmp();
    const file = path.join(dir, "flows.log");
    fs.writeFileSync(file, "x".repeat(100));
    const log = new FlowExport({ path: file, maxBytes: 100, maxFiles: 0 });
    log.write(numbered(10001));
    expect(fs.readdirSync(dir)).toEqual(["flows.log"]);
    expect(ports(file)).toEqual([10001]);
  });

  it("keeps only the fields named, nested ones by their dotted path", () => {
    const fields = ["time", "verdict", "source.pod", "destination.port", "tier"];
    expect(pickFields(flowRecord({ tier: undefined }), fields)).toEqual({
      time: "2026-12-06T10:00:00.123Z",
      verdict: "forwarded",
      source: { pod: "client" },
      destination: { port: 80 },
    });
    const file = path.join(tmp(), "flows.log");
    new FlowExport({ path: file, fields: ["verdict"] }).write(flowRecord());
    expect(fs.readFileSync(file, "utf8")).toBe('{"verdict":"forwarded"}\n');
    expect(() => checkFlowFields(["verdicts"])).toThrow(/no flow record field "verdicts"/);
    expect(() => checkFlowFields(["source.name"])).toThrow(/"source.name"/);
    expect(() => checkFlowFields(["verdict.x"])).toThrow(/"verdict.x"/);
    expect(() => new FlowExport({ path: file, fields: ["sauce"] })).toThrow(/"sauce"/);
  });

  it("counts and reports a failed write without throwing, and writes again once it can", () => {
    const dir = tmp();
    // A file where the log's directory should be: every write fails.
    fs.writeFileSync(path.join(dir, "blocked"), "");
    const file = path.join(dir, "blocked", "flows.log");
    const errors: string[] = [];
    const log = new FlowExport({ path: file, onError: (e) => errors.push(e.message) });
    expect(() => log.write(numbered(10001))).not.toThrow();
    log.write(numbered(10002));
    expect(log.failures).toBe(2);
    expect(errors).toHaveLength(2);
    fs.rmSync(path.join(dir, "blocked"));
    log.write(numbered(10003));
    expect(ports(file)).toEqual([10003]);
    expect(log.written).toBe(1);
  });
});
