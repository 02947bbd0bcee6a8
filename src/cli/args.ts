/**
 * Command-line flags, split by node:util.parseArgs (part of Node: nothing to load at
 * start-up) and checked against a table with this CLI's own messages. "--flag value" and
 * "--flag=value" both work; anything the table does not declare (a positional argument,
 * "--", an unknown flag, a value given to a boolean flag) is reported as typed.
 */
import type { ParseArgsConfig } from "node:util";

export type FlagTable = NonNullable<ParseArgsConfig["options"]>;

/** One flag as given: its name in the table, how it was typed, and its value (string flags). */
export interface Flag<Name extends string> {
  name: Name;
  flag: string;
  value: string | undefined;
}

export interface FlagErrors {
  unknown(arg: string): Error;
  /** A string flag given nothing, or "". */
  noValue(flag: string, arg: string): Error;
}

/**
 * The flags of `args` in the order given. A generator: an error surfaces where its
 * argument stands, so a caller checking values as they come reports the first problem.
 */
export function* readFlags<T extends FlagTable>(
  args: string[],
  table: T,
  errors: FlagErrors,
): Generator<Flag<keyof T & string>> {
  // Required here, not imported: the Bun executable's bundle is an ES module, whose
  // imports of built-ins all load at start, and no CNI verb needs node:util.
  const { parseArgs }: typeof import("node:util") = require("node:util");
  const { tokens } = parseArgs({ args, options: table, strict: false, tokens: true });
  for (const token of tokens) {
    const arg = args[token.index] ?? "";
    if (token.kind !== "option" || !Object.hasOwn(table, token.name)) throw errors.unknown(arg);
    const takesValue = table[token.name]?.type === "string";
    if (!takesValue && token.value !== undefined) throw errors.unknown(arg);
    if (takesValue && !token.value) throw errors.noValue(token.rawName, arg);
    yield { name: token.name, flag: token.rawName, value: token.value };
  }
}
