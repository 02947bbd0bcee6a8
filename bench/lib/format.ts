/** How the report writes figures in its tables: the one format for every section. */
import type { Summary } from "./stats";

/** A number with thousands separators, "n/a" when there is none. */
export const num = (v: number, digits = 0) =>
  Number.isFinite(v)
    ? v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits })
    : "n/a";

export const x2 = (v: number) => (Number.isFinite(v) ? `${v.toFixed(2)}×` : "n/a");

/** A paired ratio: its median in bold, the per-round min–max beside it. */
export const ratioCell = (s: Summary) =>
  s.n ? `**${x2(s.median)}** (${s.min.toFixed(2)}–${s.max.toFixed(2)})` : "n/a";
