import { libraryBinaryParser } from './library-binary-types.js';

/**
 * How the library reads the columns of its own statements, whatever the app did to
 * node-postgres' parsers. The app may give its pool `types` (jsonb kept as text, to send it on
 * as it is) or call `pg.types.setTypeParser` (which changes the registry every client falls back
 * to); a statement of the library's read through either got a string where it expects the
 * stored headers or phase results (completed phases run again, replays answer 500), a hex text
 * where it expects a stored body, a catalog row it cannot read at start-up (adversary 105). Each
 * statement of the library's own carries these parsers (`withLibraryTypes`): fixed ones for the
 * types its SQL returns, the text as PostgreSQL sent it for every other. The app's own
 * statements keep the app's parsers.
 */

/** A column's text as PostgreSQL sent it, to the value the library reads. */
export type ColumnParser = (text: string) => unknown;

/** The text as it is: int8 and numeric as node-postgres' defaults read them, and any other. */
const asText: ColumnParser = (text) => text;
const asInteger: ColumnParser = (text) => parseInt(text, 10);
const asFloat: ColumnParser = (text) => parseFloat(text);
const asBoolean: ColumnParser = (text) => text === 't' || text === 'true';

/**
 * bytea in either output format (`bytea_output`, which a role or database may set): `\x` and
 * hex digits, or the escape format (`\\` a backslash, `\ooo` an octal byte, else the byte).
 */
export const asBytes = (text: string): Buffer => {
  if (text.startsWith('\\x')) return Buffer.from(text.slice(2), 'hex');
  const bytes: number[] = [];
  for (let i = 0; i < text.length;) {
    if (text[i] !== '\\') {
      bytes.push(text.charCodeAt(i++));
    } else if (text[i + 1] === '\\') {
      bytes.push(0x5c);
      i += 2;
    } else {
      bytes.push(parseInt(text.slice(i + 1, i + 4), 8));
      i += 4;
    }
  }
  return Buffer.from(bytes);
};

const TIMESTAMP =
  /^(\d{4,})-(\d\d)-(\d\d)(?: (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?)?(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?)?( BC)?$/;

/**
 * date, timestamp and timestamptz in the ISO style PostgreSQL sends by default, as
 * node-postgres reads them: a `Date` (one without a zone in the process's), `Infinity` and
 * `-Infinity` for PostgreSQL's; any other text as it is.
 */
export const asDate = (text: string): unknown => {
  if (text === 'infinity') return Infinity;
  if (text === '-infinity') return -Infinity;
  const m = TIMESTAMP.exec(text);
  if (!m) return text;
  const [, y, mo, d, h = '0', mi = '0', s = '0', frac = '0', sign, oh, om = '0', os = '0', bc] = m;
  const year = bc ? 1 - Number(y) : Number(y);
  const ms = Number(frac.padEnd(3, '0').slice(0, 3));
  const parts = [year, Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s), ms] as const;
  if (sign === undefined) {
    const local = new Date(...parts);
    local.setFullYear(year);
    return local;
  }
  const utc = new Date(Date.UTC(...parts));
  utc.setUTCFullYear(year);
  const offsetMs = (Number(oh) * 3600 + Number(om) * 60 + Number(os)) * 1000;
  return new Date(utc.getTime() - (sign === '-' ? -offsetMs : offsetMs));
};

/**
 * A one-dimensional array's text (`{a,"b c",NULL}`), each element read by `element` (null for
 * an unquoted NULL). The library's SQL returns no array of arrays. A text cut short (a quote
 * or the closing brace missing: none PostgreSQL sends) ends with what was read, never loops.
 */
export const arrayOf =
  (element: ColumnParser): ColumnParser =>
  (text) => {
    const body = text.startsWith('[') ? text.slice(text.indexOf('=') + 1) : text;
    const items: unknown[] = [];
    if (body === '{}') return items;
    let i = 1;
    while (i < body.length) {
      let item = '';
      let quoted = false;
      if (body[i] === '"') {
        quoted = true;
        for (i++; i < body.length && body[i] !== '"'; i++) {
          if (body[i] === '\\') i++;
          if (i < body.length) item += body[i];
        }
        i++;
      } else {
        for (; i < body.length && body[i] !== ',' && body[i] !== '}'; i++) item += body[i];
      }
      items.push(!quoted && item === 'NULL' ? null : element(item));
      i++; // the comma or the closing brace
    }
    return items;
  };

/** The parser of each type the library's statements return, by oid; every other: its text. */
export const LIBRARY_PARSERS: ReadonlyMap<number, ColumnParser> = new Map([
  [16, asBoolean], // bool
  [17, asBytes], // bytea: a stored body, a fingerprint
  [20, asText], // int8: a string, as node-postgres reads it by default
  [21, asInteger], // int2
  [23, asInteger], // int4
  [26, asInteger], // oid
  [114, JSON.parse], // json: the catalog's rows of the schema check
  [700, asFloat], // float4
  [701, asFloat], // float8: ages in milliseconds
  [1082, asDate], // date
  [1114, asDate], // timestamp
  [1184, asDate], // timestamptz
  [3802, JSON.parse], // jsonb: stored headers, phase results, a job's data
  [1000, arrayOf(asBoolean)], // bool[]
  [1005, arrayOf(asInteger)], // int2[]
  [1007, arrayOf(asInteger)], // int4[]
  [1016, arrayOf(asText)], // int8[]
  [1009, arrayOf(asText)], // text[]
  [1015, arrayOf(asText)], // varchar[]
  [1003, arrayOf(asText)], // name[]
  [1028, arrayOf(asInteger)], // oid[]
  // As node-postgres' defaults read them (and the binary map does).
  [2951, arrayOf(asText)], // uuid[]
  [1021, arrayOf(asFloat)], // float4[]
  [1022, arrayOf(asFloat)], // float8[]
  [1115, arrayOf(asDate)], // timestamp[]
  [1185, arrayOf(asDate)], // timestamptz[]
]);

/** What the library reads a column of type `oid` with (a pure decision, see its spec). */
export function libraryParser(oid: number, format: string = 'text'): ColumnParser {
  // A pool made with `binary: true` has every result in binary, whatever the query asks.
  if (format === 'binary') return libraryBinaryParser(oid) as unknown as ColumnParser;
  if (format !== 'text') return asText;
  return LIBRARY_PARSERS.get(oid) ?? asText;
}

/**
 * node-postgres' per-query `types`: on a query config, it is used over the client's (the
 * pool's `types`) and the global registry (`pg.types`) alike.
 */
export const LIBRARY_TYPES = { getTypeParser: libraryParser } as const;

/** `config` with the library's parsers, for a statement of the library's own. */
export function withLibraryTypes<C extends object>(config: C): C & { types: typeof LIBRARY_TYPES } {
  return { ...config, types: LIBRARY_TYPES };
}
