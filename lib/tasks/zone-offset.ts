/**
 * A time zone's offset from UTC at a time, by `Intl` (no dependency): what `cronSlot` reads to
 * tell a time near a change of offset (daylight saving time), where `cron`'s next time depends
 * on where it is asked from.
 */

const formats = new Map<string, Intl.DateTimeFormat | undefined>();

/** `Intl`'s formatter for `zone` (the process's own for `undefined`), made once per zone. */
function formatOf(zone: string | undefined): Intl.DateTimeFormat | undefined {
  const id = zone ?? '';
  if (!formats.has(id)) {
    let format: Intl.DateTimeFormat | undefined;
    try {
      format = new Intl.DateTimeFormat('en-US', {
        timeZone: zone,
        hourCycle: 'h23',
        year: 'numeric',
        month: 'numeric',
        day: 'numeric',
        hour: 'numeric',
        minute: 'numeric',
        second: 'numeric',
      });
    } catch {
      // A zone `Intl` does not know (`cron` checks its own): read as one that never changes.
      format = undefined;
    }
    formats.set(id, format);
  }
  return formats.get(id);
}

/**
 * The offset (ms) of `zone` at each time, or `undefined` for a zone whose offset never
 * changes: a fixed one (`UTC+02:00`, as `cronZone` writes a `utcOffset`), or one `Intl` does
 * not know.
 */
export function zoneOffsetAt(zone: string | undefined): ((ms: number) => number) | undefined {
  if (zone !== undefined && /^UTC[+-]\d\d:\d\d$/.test(zone)) return undefined;
  const format = formatOf(zone);
  if (!format) return undefined;
  return (ms) => {
    const part: Record<string, number> = {};
    for (const { type, value } of format.formatToParts(ms)) part[type] = Number(value);
    const wall = Date.UTC(part.year, part.month - 1, part.day, part.hour, part.minute, part.second);
    return wall - Math.floor(ms / 1_000) * 1_000;
  };
}
