import { nestedControlOf, statementsOf } from '../transaction/sql/sql-text.js';

/**
 * A text sent on a view of the request's connection, cut where it opens or ends its own
 * nested transaction: `begin` its leading `BEGIN` (or `START TRANSACTION`, with its modes),
 * `body` the statements after it, `end` its trailing `COMMIT` or `ROLLBACK`.
 */
export interface NestedTextParts {
  begin?: string;
  body?: string;
  end?: string;
}

/**
 * The parts of a text of several statements that begins or ends a nested transaction on a
 * view (`BEGIN; SET LOCAL lock_timeout = '2s'`, or `BEGIN; INSERT …; COMMIT` in one simple
 * query): without the library, a connection of its own runs them in order, the `BEGIN` its
 * transaction's. Undefined for a text of one statement (`nestedControlOf` reads that), with
 * values (node-postgres sends such a text as one statement), that neither begins nor ends
 * one, or that PostgreSQL would not parse; what its body does beyond that (a `COMMIT` in its
 * middle) is judged as any statement is, and refused.
 */
export function nestedTextPartsOf(text: unknown, values: unknown): NestedTextParts | undefined {
  if (typeof text !== 'string' || !/begin|start|commit|end|rollback|abort/i.test(text)) {
    return undefined;
  }
  if (Array.isArray(values) ? values.length > 0 : values !== undefined) return undefined;
  const statements = statementsOf(text).map((statement) => statement.text);
  if (statements.length < 2) return undefined;
  const first = nestedControlOf(statements[0]);
  const last = nestedControlOf(statements[statements.length - 1]);
  const begins = first?.kind === 'begin';
  const ends = last?.kind === 'commit' || last?.kind === 'rollback';
  if (!begins && !ends) return undefined;
  const body = statements.slice(begins ? 1 : 0, ends ? -1 : undefined);
  return {
    ...(begins ? { begin: statements[0] } : {}),
    ...(body.length > 0 ? { body: body.join(';\n') } : {}),
    ...(ends ? { end: statements[statements.length - 1] } : {}),
  };
}

/**
 * Runs a text's parts in order (see `nestedTextPartsOf`): its `BEGIN` and its end as the
 * view's nested transaction's controls, its body as a statement inside it. Answered as
 * node-postgres answers a text of several statements: one result per statement.
 */
export async function runInParts(
  parts: NestedTextParts,
  control: (text: string, first: boolean) => Promise<unknown>,
  body: (text: string, first: boolean) => Promise<unknown>,
): Promise<unknown[]> {
  const results: unknown[] = [];
  const steps: [string | undefined, typeof control][] = [
    [parts.begin, control],
    [parts.body, body],
    [parts.end, control],
  ];
  for (const [text, run] of steps) {
    if (text === undefined) continue;
    const result = await run(text, results.length === 0);
    results.push(...(Array.isArray(result) ? (result as unknown[]) : [result]));
  }
  return results;
}
