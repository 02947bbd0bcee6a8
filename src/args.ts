/**
 * Command-line flags, split by node:util.parseArgs (part of Node: nothing to load at
 * start-up) and checked against a table with this CLI's own messages. "--flag value" and
 * "--flag=value" both work; anything the table does not declare (a positional argument,
 * "--", an unknown flag, a value given to a boolean flag) is reported as typed.
 *
 * A command declares its flags once (`Flags<T>`: each flag's field of T, default,
 * parsing, usage line and, for a few, a one-letter spelling such as kubectl's "-o");
 * `parseFlags` fills T from them and `flagUsage` writes the usage text, so a flag cannot
 * be parsed without being documented, or the reverse.
 *
 * Every command line reads its flags here: the CLI's commands, `netkit-cni agent` (which
 * never imports src/cli) and the bench.
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

/**
 * One flag of a command, declared: the field of the command's options it sets, that
 * field's value before any flag, how the flag is typed, and its line in the usage text.
 * A string flag's text goes through `parse` (which validates, throwing the command's own
 * error) or is taken as it is; a `list` flag adds its parsed items to those before it; a
 * boolean flag sets `value` (default true).
 */
export type FlagSpec<T> = { [K in keyof T]-?: FieldFlag<T, K> }[keyof T];

type FieldFlag<T, K extends keyof T> = {
  field: K;
  default: T[K];
  /** What it does, for the usage text ("\n" starts another line in the same column). */
  help: string;
  /** A one-letter spelling too ("o": "-o wide", "-owide"). */
  short?: string;
} & (
  | { type: "boolean"; value?: T[K] /** Adds `value`'s items to those before. */; list?: boolean }
  | {
      type: "string" /** The value's name in the usage text. */;
      arg: string;
      parse?: (text: string, flag: string) => T[K];
      list?: boolean;
    }
);

/** A command's flags by name (without "--"), in the order its usage lists them. */
export type Flags<T> = Record<string, FlagSpec<T>>;

/**
 * The options `args` give: every field's default, then each flag in the order given
 * (`base` replaces defaults known only at run time, e.g. from the environment). Every
 * field of T must have a flag in `flags`.
 */
export function parseFlags<T>(args: string[], flags: Flags<T>, errors: FlagErrors, base: Partial<T> = {}): T {
  const options = Object.fromEntries(Object.values(flags).map((spec) => [spec.field, fresh(spec.default)]));
  Object.assign(options, base);
  const table = Object.fromEntries(
    Object.entries(flags).map(([name, spec]) => [
      name,
      spec.short ? { type: spec.type, short: spec.short } : { type: spec.type },
    ]),
  );
  for (const { name, flag, value = "" } of readFlags(args, table, errors)) {
    const spec = flags[name] as FlagSpec<T>;
    const field = spec.field as string;
    if (spec.type === "boolean") {
      options[field] = spec.list
        ? [...(options[field] as unknown[]), ...(spec.value as unknown[])]
        : (spec.value ?? true);
    } else {
      const parsed = spec.parse ? spec.parse(value, flag) : value;
      options[field] = spec.list ? [...(options[field] as unknown[]), ...(parsed as unknown[])] : parsed;
    }
  }
  return options as T;
}

/**
 * Builders for T's flags, one line each: `string` (its text, or what `parse` makes of
 * it), `list` (parsed items added to those before; none by default), `boolean` (sets
 * `value`, by default true; its field starts as the opposite), `appended` (a boolean
 * flag adding fixed items to a list).
 */
export function flagsFor<T>() {
  type Parse<K extends keyof T> = (text: string, flag: string) => T[K];
  return {
    string: <K extends keyof T>(field: K, arg: string, fallback: T[K], help: string, parse?: Parse<K>) =>
      ({ field, type: "string", arg, default: fallback, help, parse }) as FlagSpec<T>,
    list: <K extends keyof T>(field: K, arg: string, help: string, parse: Parse<K>) =>
      ({ field, type: "string", arg, list: true, default: [], help, parse }) as unknown as FlagSpec<T>,
    boolean: <K extends keyof T>(field: K, help: string, value = true) =>
      ({ field, type: "boolean", value, default: !value, help }) as unknown as FlagSpec<T>,
    /** A flag without a value that adds `items` to a list field (a flag passed on as typed). */
    appended: <K extends keyof T>(field: K, items: T[K]) =>
      ({ field, type: "boolean", list: true, value: items, default: [], help: "" }) as unknown as FlagSpec<T>,
  };
}

/** A list default is copied: what one parse appends must not show in the next. */
const fresh = (value: unknown) => (Array.isArray(value) ? [...value] : value);

/** The usage lines of `flags`: "[-x, ]--name ARG", then its help from column `width` + 1. */
export function flagUsage<T>(flags: Flags<T>, width: number): string {
  return Object.entries(flags)
    .map(([name, spec]) => {
      const head = `  ${spec.short ? `-${spec.short}, ` : ""}--${name}${spec.type === "string" ? ` ${spec.arg}` : ""}`;
      return `${head.padEnd(width)} ${spec.help.replaceAll("\n", `\n${" ".repeat(width + 1)}`)}`;
    })
    .join("\n");
}
