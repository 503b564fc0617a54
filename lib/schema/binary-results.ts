/**
 * Whether node-postgres reads results asked for in binary as PostgreSQL sent them. A pool made
 * with `binary: true` (or `pg.defaults.binary`) has every statement with parameters answered in
 * binary, and pg 8 decodes each such column as UTF-8 text before its parser sees it
 * (brianc/node-postgres#3495): any byte UTF-8 cannot carry is replaced, so a uuid, an int4 of
 * 1000, a timestamp or a stored body comes back other than it was. The library's own reads
 * then fail at random (a fence that matches no row, a fingerprint that differs from the same
 * request's): the module refuses to start on such a pool, with what to do (adversary 106).
 * The probe asks for values whose bytes are not UTF-8, so it passes once pg reads binary
 * columns as bytes.
 */
export const BINARY_PROBE = {
  text: 'SELECT $1::int4 AS n, $2::bytea AS b',
  values: [1000, Buffer.from([0x80, 0xff, 0x00, 0x7f])],
};

/** What the probe reads back when node-postgres keeps the bytes. */
const EXPECTED = { n: 1000, b: '80ff007f' };

/** The probe's row as the library's binary parsers read it, or undefined if it read it right. */
export function binaryProbeMisread(
  row: { n?: unknown; b?: unknown } | undefined,
): string | undefined {
  const n = row?.n;
  const b = Buffer.isBuffer(row?.b) ? row.b.toString('hex') : row?.b;
  if (n === EXPECTED.n && b === EXPECTED.b) return undefined;
  return `1000::int4 read back as ${String(n)}, bytea \\x${EXPECTED.b} as ${
    typeof b === 'string' ? `\\x${b}` : String(b)
  }`;
}

/** The module's refusal to start on a pool whose binary results node-postgres garbles. */
export class BinaryResultsGarbledError extends Error {
  constructor(readonly misread: string) {
    super(
      "IdempotencyModule: the app's pool asks for results in binary (`binary: true` on the " +
        'pool or its clients, or pg.defaults.binary), and this node-postgres garbles binary ' +
        'columns: it decodes each as UTF-8 text, replacing bytes it cannot carry ' +
        `(brianc/node-postgres#3495; the start-up probe: ${misread}). The library cannot read ` +
        'its own rows so (fences, fingerprints, stored answers), nor can the app read its ' +
        'own. Make the pool without `binary: true` (and leave pg.defaults.binary unset).',
    );
    this.name = 'BinaryResultsGarbledError';
  }
}
