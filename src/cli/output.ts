/**
 * How the read-only commands (`endpoints`, `status`, `monitor`) print, kubectl's way:
 * `-o`/`--output` `table` (the default: what an admin reads at a glance), `wide` (every
 * column), `json` (the facts as a document) and, where a command streams, `jsonl` (one
 * JSON object a line). `--json` stays, the same as `-o json`, for the scripts that use it.
 * Each command says which of them it takes; any other is a usage error naming those.
 */
import type { Flags } from "../args";

export type Output = "table" | "wide" | "json" | "jsonl";

/** What a command that prints one table or document takes. */
export const DOCUMENT_OUTPUTS = ["table", "wide", "json"] as const satisfies readonly Output[];
/** What a command that prints as things happen takes: `json` is `jsonl` there, a document per line. */
export const STREAM_OUTPUTS = ["table", "wide", "json", "jsonl"] as const satisfies readonly Output[];

const either = (words: readonly string[]) => `${words.slice(0, -1).join(", ")} or ${words.at(-1)}`;

/**
 * The `-o`/`--output` and `--json` flags of a command with an `output` field: `allowed`
 * its formats (the first the default), `help` what they print, `fail` the command's
 * usage error.
 */
export function outputFlags<T extends { output: Output }>(
  allowed: readonly Output[],
  help: string,
  fail: (message: string) => Error,
): Flags<T> {
  const fallback = (allowed[0] ?? "table") as T["output"];
  return {
    output: {
      field: "output",
      type: "string",
      short: "o",
      arg: "FORMAT",
      default: fallback,
      help: `${allowed.join(" | ")} (default ${fallback})\n${help}`,
      parse: (text: string, flag: string) => {
        if (!(allowed as readonly string[]).includes(text))
          throw fail(`${flag} must be ${either(allowed)}, not ${text}`);
        return text as T["output"];
      },
    },
    json: {
      field: "output",
      type: "boolean",
      value: "json" as T["output"],
      default: fallback,
      help: "the same as -o json",
    },
  } as Flags<T>;
}

export const isJson = (output: Output) => output === "json" || output === "jsonl";

/**
 * What a command prints of `value`: as JSON (indented for `json`, one line for `jsonl`),
 * else its table, `wide` or not. JSON holds numbers, not bigints: the facts are gathered
 * as numbers (a counter never nears 2^53) or strings (a namespace cookie).
 */
export function render<T>(output: Output, value: T, table: (wide: boolean) => string): string {
  if (output === "json") return JSON.stringify(value, null, 2);
  if (output === "jsonl") return JSON.stringify(value);
  return table(output === "wide");
}
