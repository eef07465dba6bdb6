/**
 * Over-admission as the reports show it: per rule counter and epoch-aligned window W, the sum of
 * the allowed requests that RLQS clients reported, against the counter's limit L. What passes L
 * is over-admitted: requests the clients let through from their assignments (or fallbacks) that
 * the rule had no room for. The counter records them too (an overdraw lands in full), but cannot
 * tell them from classic checks' counts.
 * Classic checks are not counted here: the store admits those exactly.
 *
 * It sees the reports of this process only; with several instances each sees its own clients'.
 * At most `maxPools` counters are followed at once; past that, a new one is not followed.
 */
export interface AdmissionWatch {
  /** Adds reported allowed requests; returns how many of them passed the limit. */
  add(key: string, limit: number, windowMs: number, allowed: number, nowMs: number): number;
  pools(): number;
}

export function createAdmissionWatch(maxPools: number): AdmissionWatch {
  const windows = new Map<string, { start: number; admitted: number }>();
  let sweptAt = -Infinity;
  return {
    add(key, limit, windowMs, allowed, nowMs) {
      const start = nowMs - (nowMs % windowMs);
      if (windows.size >= maxPools && nowMs - sweptAt >= 1000) {
        sweptAt = nowMs;
        for (const [name, held] of windows) {
          if (held.start + windowMs <= nowMs - windowMs) windows.delete(name);
        }
      }
      let held = windows.get(key);
      if (held === undefined || held.start !== start) {
        if (held === undefined && windows.size >= maxPools) return 0;
        held = { start, admitted: 0 };
        windows.set(key, held);
      }
      const before = Math.max(0, held.admitted - limit);
      held.admitted += allowed;
      return Math.max(0, held.admitted - limit) - before;
    },
    pools: () => windows.size,
  };
}
