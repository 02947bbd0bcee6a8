/**
 * Label selectors (metav1.LabelSelector) as NetworkPolicy uses them: a pod selector, a
 * namespace selector. matchLabels and matchExpressions are ANDed; an empty selector
 * selects everything. Pure.
 *
 * A selector this module cannot read (an unknown operator, In/NotIn without values,
 * Exists/DoesNotExist with values, a value that is no string) is INVALID, never read as
 * "everything" or "nothing": the API server rejects such selectors at admission
 * (ValidateLabelSelector), so one reaching us is news worth reporting, and either silent
 * reading would change who may talk to whom. The caller reports it and skips the policy.
 *
 * Each selector gets a key: its requirements, sorted, as JSON. Two selectors with one
 * key select the same objects, so the index keeps one set of matches for both.
 */

export type Labels = Readonly<Record<string, string>>;

export type Operator = "In" | "NotIn" | "Exists" | "DoesNotExist";
const OPERATORS: readonly string[] = ["In", "NotIn", "Exists", "DoesNotExist"];

export interface Requirement {
  key: string;
  operator: Operator;
  /** Sorted, without duplicates; empty for Exists and DoesNotExist. */
  values: readonly string[];
}

export interface Selector {
  /** Sorted by key, operator and values; none = everything. */
  requirements: readonly Requirement[];
  /** The requirements as JSON: equal keys, equal selections. */
  key: string;
}

export type SelectorParse = { ok: true; selector: Selector } | { ok: false; reason: string };

export const EVERYTHING: Selector = { requirements: [], key: "[]" };

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** Reads a selector from its API form; null or absent is the empty selector (everything). */
export function parseSelector(raw: unknown): SelectorParse {
  if (raw === undefined || raw === null) return { ok: true, selector: EVERYTHING };
  if (!isRecord(raw)) return { ok: false, reason: "a selector must be an object" };
  const requirements: Requirement[] = [];
  const fromLabels = readMatchLabels(raw.matchLabels, requirements);
  if (fromLabels) return { ok: false, reason: fromLabels };
  const expressions = raw.matchExpressions ?? [];
  if (!Array.isArray(expressions)) return { ok: false, reason: "matchExpressions must be a list" };
  for (const [i, e] of expressions.entries()) {
    const read = readExpression(e);
    if (typeof read === "string") return { ok: false, reason: `matchExpressions[${i}]: ${read}` };
    requirements.push(read);
  }
  return { ok: true, selector: selectorOf(requirements) };
}

/** matchLabels {k: v} is the requirement "k In (v)". Returns a reason when malformed. */
function readMatchLabels(raw: unknown, into: Requirement[]): string | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (!isRecord(raw)) return "matchLabels must be an object";
  for (const [key, value] of Object.entries(raw)) {
    if (key === "") return "matchLabels has an empty key";
    if (typeof value !== "string") return `matchLabels[${JSON.stringify(key)}] is not a string`;
    into.push({ key, operator: "In", values: [value] });
  }
  return undefined;
}

function readExpression(raw: unknown): Requirement | string {
  if (!isRecord(raw)) return "not an object";
  const { key, operator } = raw;
  const values = raw.values ?? [];
  if (typeof key !== "string" || key === "") return "key must be a non-empty string";
  if (typeof operator !== "string" || !OPERATORS.includes(operator)) {
    return `unknown operator ${JSON.stringify(operator)}`;
  }
  if (!Array.isArray(values) || values.some((v) => typeof v !== "string")) return "values must be strings";
  const wantsValues = operator === "In" || operator === "NotIn";
  if (wantsValues && values.length === 0) return `${operator} needs at least one value`;
  if (!wantsValues && values.length > 0) return `${operator} takes no values`;
  return { key, operator: operator as Operator, values: [...new Set(values as string[])].sort() };
}

function selectorOf(requirements: Requirement[]): Selector {
  const byText = new Map(requirements.map((r) => [JSON.stringify([r.key, r.operator, r.values]), r]));
  const sorted = [...byText.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, r]) => r);
  return sorted.length === 0 ? EVERYTHING : { requirements: sorted, key: JSON.stringify([...byText.keys()].sort()) };
}

export function selectorMatches(selector: Selector, labels: Labels): boolean {
  for (const r of selector.requirements) {
    const has = Object.hasOwn(labels, r.key);
    switch (r.operator) {
      case "In":
        if (!has || !r.values.includes(labels[r.key] as string)) return false;
        break;
      case "NotIn":
        // As Kubernetes reads it: an object without the label is not in the set.
        if (has && r.values.includes(labels[r.key] as string)) return false;
        break;
      case "Exists":
        if (!has) return false;
        break;
      case "DoesNotExist":
        if (has) return false;
        break;
    }
  }
  return true;
}

/** The selector as people write it ("app=web,tier in (a,b),!legacy"), for reports. */
export function selectorText(selector: Selector): string {
  if (selector.requirements.length === 0) return "{}";
  return selector.requirements
    .map((r) => {
      if (r.operator === "Exists") return r.key;
      if (r.operator === "DoesNotExist") return `!${r.key}`;
      if (r.operator === "In" && r.values.length === 1) return `${r.key}=${r.values[0]}`;
      return `${r.key} ${r.operator === "In" ? "in" : "notin"} (${r.values.join(",")})`;
    })
    .join(",");
}
