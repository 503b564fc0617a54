import { inMessagesSchema, RECORD_MESSAGE, TOUCH_MESSAGE } from './postgres-statements.js';

describe('inMessagesSchema: a delivery’s record names its table in the library’s schema', () => {
  it.each<[string, { name: string; text: string }, string | undefined, string]>([
    [
      'the record, in public',
      RECORD_MESSAGE,
      'public',
      'INSERT INTO "public".processed_messages (',
    ],
    [
      'the touch, in a schema needing quotes',
      TOUCH_MESSAGE,
      'Idem "K"',
      'UPDATE "Idem ""K""".processed_messages SET',
    ],
    ['unknown: as it is', RECORD_MESSAGE, undefined, 'INSERT INTO processed_messages ('],
  ])('%s', (_name, statement, schema, start) => {
    const qualified = inMessagesSchema(statement, schema);
    expect(qualified.text.startsWith(start)).toBe(true);
    expect(qualified.name).toBe(statement.name);
  });
});
