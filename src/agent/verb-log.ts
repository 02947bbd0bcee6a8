/**
 * The plugin's verb timings (commands/agent-state.ts: "<verb> <ms> ok|error" lines in
 * verbs.log), read as they come: each read takes the lines added since the last. Past
 * 1 MiB the file is renamed away first and read to its end, so it never grows without
 * bound and a plugin appending meanwhile starts a new file.
 */
import * as fs from "node:fs";
import { verbLogFile } from "../commands/agent-state";

export interface VerbTiming {
  verb: string;
  seconds: number;
  ok: boolean;
}

const ROTATE_BYTES = 1 << 20;

export class VerbLog {
  private offset = 0;
  private partial = "";

  constructor(private readonly stateDir: string) {}

  /** The timings recorded since the last call. */
  read(): VerbTiming[] {
    const file = verbLogFile(this.stateDir);
    let size: number;
    try {
      size = fs.statSync(file).size;
    } catch {
      return [];
    }
    let source = file;
    if (size >= ROTATE_BYTES) {
      source = `${file}.reading`;
      fs.renameSync(file, source);
    }
    if (size < this.offset) this.offset = 0; // replaced by someone
    const text = this.readFrom(source);
    if (source !== file) {
      fs.rmSync(source, { force: true });
      this.offset = 0;
    }
    const lines = (this.partial + text).split("\n");
    this.partial = lines.pop() ?? "";
    const out: VerbTiming[] = [];
    for (const line of lines) {
      const [verb, ms, result] = line.split(" ");
      const n = Number(ms);
      if (!verb || !Number.isFinite(n) || (result !== "ok" && result !== "error")) continue;
      out.push({ verb, seconds: n / 1000, ok: result === "ok" });
    }
    return out;
  }

  private readFrom(file: string): string {
    const fd = fs.openSync(file, "r");
    try {
      const chunks: Buffer[] = [];
      const buf = Buffer.alloc(64 * 1024);
      for (;;) {
        const n = fs.readSync(fd, buf, 0, buf.length, this.offset);
        if (n <= 0) break;
        chunks.push(Buffer.from(buf.subarray(0, n)));
        this.offset += n;
      }
      return Buffer.concat(chunks).toString("utf8");
    } finally {
      fs.closeSync(fd);
    }
  }
}
