/**
 * Calendar windows: a fixed window that starts at local midnight, on Monday (ISO week), on the
 * 1st of the month or on January 1st, in an IANA time zone, and lasts as long as that day, week,
 * month or year really does there: 23 or 25 hours across a DST change, 28 to 31 days, 365 or 366.
 *
 * The service computes the boundaries around its own clock with Intl, and the store picks the
 * window by the clock it decides on (Redis TIME, or the service's with CLOCK=local) among four
 * boundaries: the window before the service's, the service's and the one after. Clocks that
 * disagree by less than a day so always find their window.
 */

export type CalendarPeriod = 'day' | 'week' | 'month' | 'year';

export const CALENDAR_PERIODS: readonly CalendarPeriod[] = ['day', 'week', 'month', 'year'];

export interface Calendar {
  period: CalendarPeriod;
  /** The IANA zone as the rules wrote it: counters are keyed on this spelling. */
  zone: string;
}

/** Why the runtime cannot use `zone`, or undefined when it can. */
export function unknownZone(zone: string): string | undefined {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
    return undefined;
  } catch {
    return `'${zone}' is not a time zone this runtime knows (its tz database is ${process.versions.tz ?? 'unknown'})`;
  }
}

/** A calendar date, month 1 to 12. */
interface LocalDate {
  year: number;
  month: number;
  day: number;
}

const formats = new Map<string, Intl.DateTimeFormat>();

function formatFor(zone: string): Intl.DateTimeFormat {
  let format = formats.get(zone);
  if (format === undefined) {
    format = new Intl.DateTimeFormat('en-US', {
      timeZone: zone,
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hourCycle: 'h23',
    });
    formats.set(zone, format);
  }
  return format;
}

/** The date it is in `zone` at the instant `ms`. */
function localDate(zone: string, ms: number): LocalDate {
  const date: LocalDate = { year: 0, month: 0, day: 0 };
  for (const { type, value } of formatFor(zone).formatToParts(ms)) {
    if (type === 'year') date.year = Number(value);
    else if (type === 'month') date.month = Number(value);
    else if (type === 'day') date.day = Number(value);
  }
  return date;
}

/** Dates compare as their UTC midnights: a plain day count. */
const dayNumber = (date: LocalDate): number => Date.UTC(date.year, date.month - 1, date.day);

function fromDayNumber(ms: number): LocalDate {
  const d = new Date(ms);
  return { year: d.getUTCFullYear(), month: d.getUTCMonth() + 1, day: d.getUTCDate() };
}

const HOUR = 3_600_000;

/**
 * The first instant at which it is `date` (or later) in `zone`: its local midnight, or, where a
 * DST change skips midnight, the first instant that exists after it. UTC offsets lie within
 * ±14 hours and a change moves the clock by at most a few hours, so that instant lies within
 * 18 hours of the date's UTC midnight; the dates an instant falls on only grow there (a change
 * that sends the clock back across midnight, which no zone in use does, would give the later
 * start).
 */
function startOf(zone: string, date: LocalDate): number {
  const target = dayNumber(date);
  let before = target - 18 * HOUR; // still an earlier date
  let after = target + 18 * HOUR; // already that date or later
  while (after - before > 1) {
    const middle = Math.floor((before + after) / 2);
    if (dayNumber(localDate(zone, middle)) >= target) after = middle;
    else before = middle;
  }
  return after;
}

/** The first day of the period that holds `date`, and of the periods `k` away from it. */
function periodStart(period: CalendarPeriod, date: LocalDate, k: number): LocalDate {
  switch (period) {
    case 'day':
      return fromDayNumber(Date.UTC(date.year, date.month - 1, date.day + k));
    case 'week': {
      // ISO weeks start on Monday; getUTCDay counts from Sunday.
      const sinceMonday = (new Date(dayNumber(date)).getUTCDay() + 6) % 7;
      return fromDayNumber(Date.UTC(date.year, date.month - 1, date.day - sinceMonday + 7 * k));
    }
    case 'month':
      return fromDayNumber(Date.UTC(date.year, date.month - 1 + k, 1));
    case 'year':
      return fromDayNumber(Date.UTC(date.year + k, 0, 1));
  }
}

/**
 * The four boundaries around `nowMs`: the starts of the period before the one that holds it, of
 * that one, of the next, and of the one after.
 */
export function calendarBounds(calendar: Calendar, nowMs: number): number[] {
  const today = localDate(calendar.zone, nowMs);
  return [-1, 0, 1, 2].map((k) => startOf(calendar.zone, periodStart(calendar.period, today, k)));
}

/**
 * calendarBounds, computed again only when `nowMs` leaves the period they were computed in: a
 * bounded map, one entry per calendar and zone of the rules.
 */
export function createCalendarBounds(
  maxEntries = 1_024,
): (calendar: Calendar, nowMs: number) => number[] {
  const known = new Map<string, number[]>();
  return (calendar, nowMs) => {
    const name = `${calendar.period}@${calendar.zone}`;
    const bounds = known.get(name);
    if (bounds !== undefined && (bounds[1] as number) <= nowMs && nowMs < (bounds[2] as number)) {
      return bounds;
    }
    const fresh = calendarBounds(calendar, nowMs);
    if (known.size >= maxEntries && bounds === undefined) known.clear();
    known.set(name, fresh);
    return fresh;
  };
}

/** The counter key's window part for a calendar rule: its period and its zone as written. */
export const calendarWindowId = (calendar: Calendar): string =>
  `${calendar.period}@${calendar.zone}`;

/** The bounds of a calendar window around `nowMs`, computed once per period (see above). */
export const boundsAround = createCalendarBounds();
