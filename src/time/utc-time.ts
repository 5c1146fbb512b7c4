// The times the sidecar writes (log lines, the admin views, stored records) and the Date header of its answers,
// formatted from a time's UTC fields. Date's own toISOString and toUTCString (Node's HTTP server formats its Date
// header with the latter) ask V8 for the host's time-zone offset the first time either runs, and that loads ICU's
// time-zone data, which then stays resident for the life of the process, in every pod, for text that is UTC anyway:
// about 1 MB in a bare node process, 0.4 MB net in the sidecar (docs/performance.md, "Times without ICU").
// eslint.config.js keeps Date's text methods out of src/.

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'] as const;
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'] as const;
/** The years ISO 8601's basic form writes with four digits; others take the extended form, ±YYYYYY. */
const FOUR_DIGIT_YEARS = { first: 0, last: 9999 } as const;

const pad = (n: number, width = 2): string => String(n).padStart(width, '0');

function utcFields(ms: number) {
  const date = new Date(ms);
  if (Number.isNaN(date.getTime())) throw new RangeError(`not a time: ${ms}`);
  return {
    year: date.getUTCFullYear(),
    month: date.getUTCMonth(),
    day: date.getUTCDate(),
    weekday: date.getUTCDay(),
    clock: `${pad(date.getUTCHours())}:${pad(date.getUTCMinutes())}:${pad(date.getUTCSeconds())}`,
    millis: date.getUTCMilliseconds(),
  };
}

function isoYear(year: number): string {
  if (year >= FOUR_DIGIT_YEARS.first && year <= FOUR_DIGIT_YEARS.last) return pad(year, 4);
  return `${year < 0 ? '-' : '+'}${pad(Math.abs(year), 6)}`;
}

/** ISO 8601 in UTC with milliseconds, as toISOString writes it: 2026-11-27T04:05:06.789Z. */
export function isoTimestamp(ms: number): string {
  const { year, month, day, clock, millis } = utcFields(ms);
  return `${isoYear(year)}-${pad(month + 1)}-${pad(day)}T${clock}.${pad(millis, 3)}Z`;
}

/** RFC 9110's IMF-fixdate, as toUTCString writes it: Fri, 27 Nov 2026 04:05:06 GMT. Years 0-9999. */
function imfFixdate(ms: number): string {
  const { year, month, day, weekday, clock } = utcFields(ms);
  return `${DAYS[weekday] ?? ''}, ${pad(day)} ${MONTHS[month] ?? ''} ${pad(year, 4)} ${clock} GMT`;
}

let dateHeader = { second: Number.NaN, text: '' };

/**
 * The Date header for an answer sent now. Made once a second, as Node makes its own: answers carry it at no cost
 * each. Every answer sets it and turns Node's off (`sendDate = false`): see the top of this file.
 */
export function httpDate(nowMs = Date.now()): string {
  const second = Math.floor(nowMs / 1000);
  if (second !== dateHeader.second) dateHeader = { second, text: imfFixdate(second * 1000) };
  return dateHeader.text;
}
