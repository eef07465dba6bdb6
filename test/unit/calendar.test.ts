import { describe, expect, it } from 'vitest';
import {
  calendarBounds,
  createCalendarBounds,
  type Calendar,
  type CalendarPeriod,
} from '../../src/rules/calendar.js';

const iso = (ms: number) => new Date(ms).toISOString();
const HOUR = 3_600_000;

/** The bounds around `at`, as ISO instants, and the lengths of the three periods in hours. */
function around(period: CalendarPeriod, zone: string, at: string) {
  const bounds = calendarBounds({ period, zone }, Date.parse(at));
  return {
    bounds: bounds.map(iso),
    hours: bounds.slice(1).map((b, i) => (b - (bounds[i] as number)) / HOUR),
  };
}

describe('calendar windows', () => {
  it('start at local midnight, and a day lasts 23 or 25 hours across DST, north and south', () => {
    // Paris springs forward on 29 March 2026 and falls back on 25 October.
    expect(around('day', 'Europe/Paris', '2026-03-29T12:00:00Z')).toEqual({
      bounds: [
        '2026-03-27T23:00:00.000Z',
        '2026-03-28T23:00:00.000Z',
        '2026-03-29T22:00:00.000Z',
        '2026-03-30T22:00:00.000Z',
      ],
      hours: [24, 23, 24],
    });
    expect(around('day', 'Europe/Paris', '2026-10-25T12:00:00Z').hours).toEqual([24, 25, 24]);
    // Sydney falls back on 5 April 2026 and springs forward on 4 October.
    expect(around('day', 'Australia/Sydney', '2026-04-05T12:00:00Z')).toEqual({
      bounds: [
        '2026-04-03T13:00:00.000Z',
        '2026-04-04T13:00:00.000Z',
        '2026-04-05T14:00:00.000Z',
        '2026-04-06T14:00:00.000Z',
      ],
      hours: [24, 25, 24],
    });
    expect(around('day', 'Australia/Sydney', '2026-10-04T05:00:00Z').hours).toEqual([24, 23, 24]);
  });

  it('start at the first instant after a midnight that DST skips', () => {
    // Santiago springs forward at midnight on 6 September 2026: the day begins at 01:00 (-03).
    expect(around('day', 'America/Santiago', '2026-09-06T12:00:00Z')).toEqual({
      bounds: [
        '2026-09-05T04:00:00.000Z',
        '2026-09-06T04:00:00.000Z',
        '2026-09-07T03:00:00.000Z',
        '2026-09-08T03:00:00.000Z',
      ],
      hours: [24, 23, 24],
    });
  });

  it('last a month or a year as long as it really is, leap days included', () => {
    expect(around('month', 'UTC', '2028-02-29T23:59:59.999Z')).toEqual({
      bounds: [
        '2028-01-01T00:00:00.000Z',
        '2028-02-01T00:00:00.000Z',
        '2028-03-01T00:00:00.000Z',
        '2028-04-01T00:00:00.000Z',
      ],
      hours: [31 * 24, 29 * 24, 31 * 24],
    });
    expect(around('month', 'UTC', '2027-02-10T00:00:00Z').hours[1]).toBe(28 * 24);
    expect(around('month', 'Asia/Kolkata', '2026-12-31T20:00:00Z').bounds[1]).toBe(
      '2026-12-31T18:30:00.000Z',
    );
    expect(around('year', 'Asia/Tokyo', '2028-06-01T00:00:00Z')).toEqual({
      bounds: [
        '2026-12-31T15:00:00.000Z',
        '2027-12-31T15:00:00.000Z',
        '2028-12-31T15:00:00.000Z',
        '2029-12-31T15:00:00.000Z',
      ],
      hours: [365 * 24, 366 * 24, 365 * 24],
    });
  });

  it('start weeks on Monday, and a week across a DST change lasts 167 or 169 hours', () => {
    expect(around('week', 'America/New_York', '2026-12-04T15:00:00Z').bounds).toEqual([
      '2026-11-23T05:00:00.000Z',
      '2026-11-30T05:00:00.000Z',
      '2026-12-07T05:00:00.000Z',
      '2026-12-14T05:00:00.000Z',
    ]);
    // New York springs forward on Sunday 8 March 2026.
    expect(around('week', 'America/New_York', '2026-03-04T12:00:00Z').hours).toEqual([
      168, 167, 168,
    ]);
  });

  it('are the same at every instant of a period, up to its last millisecond', () => {
    const calendar: Calendar = { period: 'day', zone: 'Europe/Paris' };
    const [, start, end] = calendarBounds(calendar, Date.parse('2026-10-25T12:00:00Z'));
    expect(calendarBounds(calendar, start as number)).toEqual(
      calendarBounds(calendar, (end as number) - 1),
    );
    expect(calendarBounds(calendar, end as number)[1]).toBe(end);
  });

  it('are computed again only when the clock leaves the period', () => {
    const bounds = createCalendarBounds();
    const calendar: Calendar = { period: 'month', zone: 'Europe/Paris' };
    const first = bounds(calendar, Date.parse('2026-12-04T12:00:00Z'));
    expect(bounds(calendar, Date.parse('2026-12-31T22:59:59.999Z'))).toBe(first);
    const next = bounds(calendar, Date.parse('2026-12-31T23:00:00Z'));
    expect(next).not.toBe(first);
    expect(iso(next[1] as number)).toBe('2026-12-31T23:00:00.000Z');
  });
});
