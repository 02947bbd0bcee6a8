/** Order statistics for small samples (nearest-rank on the sorted values, linear between ranks). */

export function quantile(values: number[], q: number): number {
  const v = values.filter((x) => Number.isFinite(x)).sort((x, y) => x - y);
  if (v.length === 0) return Number.NaN;
  const pos = (v.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const a = v[lo] as number;
  const b = v[hi] as number;
  return a + (b - a) * (pos - lo);
}

export const median = (values: number[]) => quantile(values, 0.5);

export interface Summary {
  n: number;
  median: number;
  min: number;
  max: number;
  q1: number;
  q3: number;
}

export function summarize(values: number[]): Summary {
  const v = values.filter((x) => Number.isFinite(x));
  return {
    n: v.length,
    median: median(v),
    min: v.length ? Math.min(...v) : Number.NaN,
    max: v.length ? Math.max(...v) : Number.NaN,
    q1: quantile(v, 0.25),
    q3: quantile(v, 0.75),
  };
}

/**
 * A ratio of two paths measured side by side: the median of the per-round ratios (each
 * round ran both within seconds of each other, so slow drifts of a shared machine cancel),
 * with the spread of those per-round ratios.
 */
export function pairedRatio(num: number[], den: number[]): Summary {
  const ratios: number[] = [];
  for (let i = 0; i < Math.min(num.length, den.length); i++) {
    const a = num[i] as number;
    const b = den[i] as number;
    if (Number.isFinite(a) && Number.isFinite(b) && b > 0) ratios.push(a / b);
  }
  return summarize(ratios);
}

/**
 * `items` turned by `round` places: round r starts with the r-th. Interleaved rounds use
 * it so that no variant always runs first (after another's test) or last.
 */
export function turnedBy<T>(items: readonly T[], round: number): T[] {
  return items.map((_, i) => items[(i + round) % items.length] as T);
}
