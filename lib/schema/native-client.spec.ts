import pg from 'pg';
import { isJavaScriptClient } from './native-client.js';

describe('isJavaScriptClient', () => {
  it.each([
    ["node-postgres' JavaScript client", new pg.Client(), true],
    // pg.native's client: its own fields, no protocol connection (read off pg 8's native/client.js)
    ['a native client', { native: {}, _types: {}, _queryQueue: [] }, false],
    ['a connection without parse', { connection: {} }, false],
    ['null', null, false],
    ['undefined', undefined, false],
  ])('%s', (_name, client, expected) => {
    expect(isJavaScriptClient(client)).toBe(expected);
  });
});
