import { EventEmitter } from 'node:events';
import { PassThrough, Writable } from 'node:stream';
import pg from 'pg';
import { readyForNext, runsToItsEnd } from './still-running.js';

describe('runsToItsEnd: a submittable whose end the connection waits for by itself', () => {
  const told = { handleReadyForQuery() {}, handleError() {}, submit() {} };
  it.each<[string, unknown, boolean]>([
    ['a pg.Query', new pg.Query('SELECT 1'), true],
    ['a submittable told its end', told, true],
    // Stops mid-way until its code reads on.
    ['a pg-cursor (close)', { ...told, close() {} }, false],
    [
      'a pg-query-stream (its cursor)',
      Object.assign(new PassThrough(), told, { cursor: {} }),
      false,
    ],
    ['a COPY stream', Object.assign(new Writable(), told), false],
    ['one node-postgres cannot tell it ended', { submit() {} }, false],
    ['nothing', undefined, false],
  ])('%s: %s', (_name, submittable, expected) => {
    expect(runsToItsEnd(submittable)).toBe(expected);
  });
});

describe('readyForNext: the client ready for its next statement', () => {
  function client(readyForQuery: unknown) {
    return { readyForQuery, connection: new EventEmitter() };
  }

  it.each<[string, unknown]>([
    ['ready', client(true)],
    ['a client that does not tell (pg-native)', {}],
    ['a busy client with no connection to listen to', { readyForQuery: false }],
  ])('settles at once: %s', async (_name, given) => {
    await expect(readyForNext(given)).resolves.toBeUndefined();
  });

  it.each(['readyForQuery', 'end', 'error'])(
    'busy: settles at its connection\'s next "%s", and listens no more',
    async (event) => {
      const busy = client(false);
      let settled = false;
      const ready = readyForNext(busy).then(() => (settled = true));
      await Promise.resolve();
      expect(settled).toBe(false);
      busy.connection.emit(event, new Error('gone'));
      await ready;
      expect(settled).toBe(true);
      expect(
        ['readyForQuery', 'end', 'error'].map((name) => busy.connection.listenerCount(name)),
      ).toEqual([0, 0, 0]);
    },
  );
});
