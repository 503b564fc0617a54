/**
 * The library's parsers for results in binary format, by oid. A pool made with
 * `binary: true` has node-postgres ask for every result in binary (a per-query
 * `binary: false` cannot override it: pg's `Client.query` forces the client's), and hands each
 * column's raw bytes to the parser: the library then reads its own rows as pg's defaults would
 * from text (adversary 106), not as Buffers. Its own rather than pg-types' binary registry,
 * which the app may change (`types.setTypeParser(oid, 'binary', …)`) and which reads an
 * `int8[]` as numbers and no `json`, `jsonb`, `bytea`, `uuid` or `date` at all.
 */
export type BinaryParser = (bytes: Buffer) => unknown;

/** Milliseconds from 1970 to PostgreSQL's epoch, 2000-01-01. */
const PG_EPOCH_MS = Date.UTC(2000, 0, 1);

const asText: BinaryParser = (bytes) => bytes.toString('utf8');
const asBool: BinaryParser = (bytes) => bytes[0] !== 0;
const asInt2: BinaryParser = (bytes) => bytes.readInt16BE(0);
const asInt4: BinaryParser = (bytes) => bytes.readInt32BE(0);
const asOid: BinaryParser = (bytes) => bytes.readUInt32BE(0);
// A string, as node-postgres reads an int8 by default (and the library's text parser does).
const asInt8: BinaryParser = (bytes) => bytes.readBigInt64BE(0).toString();
const asFloat4: BinaryParser = (bytes) => bytes.readFloatBE(0);
const asFloat8: BinaryParser = (bytes) => bytes.readDoubleBE(0);
// Its 16 bytes, written as PostgreSQL writes a uuid in text.
const asUuid: BinaryParser = (bytes) =>
  bytes.toString('hex').replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5');
const asBytes: BinaryParser = (bytes) => Buffer.from(bytes);
const asJson: BinaryParser = (bytes) => JSON.parse(bytes.toString('utf8')) as unknown;
// jsonb's binary form: a version byte (1), then the text.
const asJsonb: BinaryParser = (bytes) => JSON.parse(bytes.toString('utf8', 1)) as unknown;

/** A timestamp's microseconds since 2000-01-01, as the text parser reads it (ms, floored). */
function timestampOf(bytes: Buffer, zoned: boolean): unknown {
  const micros = bytes.readBigInt64BE(0);
  if (micros === 0x7fffffffffffffffn) return Infinity;
  if (micros === -0x8000000000000000n) return -Infinity;
  const at = new Date(PG_EPOCH_MS + Number(micros / 1000n) - (micros % 1000n < 0n ? 1 : 0));
  if (zoned) return at;
  // Without a zone: its fields are the local time's, as the text parser reads them.
  const local = new Date(
    at.getUTCFullYear(),
    at.getUTCMonth(),
    at.getUTCDate(),
    at.getUTCHours(),
    at.getUTCMinutes(),
    at.getUTCSeconds(),
    at.getUTCMilliseconds(),
  );
  local.setFullYear(at.getUTCFullYear());
  return local;
}

/** A date's days since 2000-01-01: its local midnight, as the text parser reads it. */
const asDate: BinaryParser = (bytes) => {
  const days = bytes.readInt32BE(0);
  if (days === 0x7fffffff) return Infinity;
  if (days === -0x80000000) return -Infinity;
  const at = new Date(PG_EPOCH_MS + days * 86_400_000);
  const local = new Date(at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate());
  local.setFullYear(at.getUTCFullYear());
  return local;
};

/**
 * A one-dimensional array's elements (the library reads no other), each by `element`: the
 * header (dimensions, a flags word, the element's oid), each dimension's length and lower
 * bound, then each element's length (-1: NULL) and bytes.
 */
const arrayOf =
  (element: BinaryParser): BinaryParser =>
  (bytes) => {
    const dimensions = bytes.readInt32BE(0);
    if (dimensions === 0) return [];
    let offset = 12 + 8 * dimensions;
    const items: unknown[] = [];
    const count = bytes.readInt32BE(12);
    for (let i = 0; i < count; i++) {
      const length = bytes.readInt32BE(offset);
      offset += 4;
      if (length < 0) {
        items.push(null);
        continue;
      }
      items.push(element(bytes.subarray(offset, offset + length)));
      offset += length;
    }
    return items;
  };

/** The binary parser of each type the library's statements return, by oid; every other: its text. */
export const LIBRARY_BINARY_PARSERS: ReadonlyMap<number, BinaryParser> = new Map([
  [16, asBool],
  [17, asBytes],
  [20, asInt8],
  [21, asInt2],
  [23, asInt4],
  [26, asOid],
  [114, asJson],
  [700, asFloat4],
  [701, asFloat8],
  [1082, asDate],
  [1114, (bytes: Buffer) => timestampOf(bytes, false)],
  [1184, (bytes: Buffer) => timestampOf(bytes, true)],
  [2950, asUuid],
  [3802, asJsonb],
  [1000, arrayOf(asBool)],
  [1005, arrayOf(asInt2)],
  [1007, arrayOf(asInt4)],
  [1016, arrayOf(asInt8)],
  [1009, arrayOf(asText)],
  [1015, arrayOf(asText)],
  [1003, arrayOf(asText)],
  [1028, arrayOf(asOid)],
  [2951, arrayOf(asUuid)],
]);

/** What the library reads a binary column of type `oid` with (see its spec). */
export function libraryBinaryParser(oid: number): BinaryParser {
  return LIBRARY_BINARY_PARSERS.get(oid) ?? asText;
}
