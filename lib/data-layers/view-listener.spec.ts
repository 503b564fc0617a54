import { jest } from '@jest/globals';
import { EventEmitter } from 'node:events';
import { sqlReaderReady } from '../transaction/sql/sql-parse.js';
import { forwardEvents, isListenControl, listenTextOf, ViewListener } from './view-listener.js';

beforeAll(() => sqlReaderReady());

describe('isListenControl', () => {
  it.each([
    ['LISTEN payments', true],
    ['  listen "Payments";', true],
    ['UNLISTEN payments', true],
    ['UNLISTEN *', true],
    ['LISTEN a; SELECT 1', false],
    ['LISTEN job_done; LISTEN job_failed', true],
    ["-- the worker's channels\nLISTEN job_done", true],
    ['UNLISTEN a; LISTEN b;', true],
    ['SELECT 1', false],
    ['NOTIFY payments', false],
    ['LISTEN', false],
    [undefined, false],
  ])('%s: %s', (text, expected) => {
    expect(isListenControl(text)).toBe(expected);
  });
});

describe('listenTextOf', () => {
  it.each<[string, unknown, ReturnType<typeof listenTextOf>]>([
    ['one LISTEN', 'LISTEN payments', 'listen'],
    ['two in one text', 'LISTEN a; UNLISTEN b', 'listen'],
    ['a LISTEN and a read', 'LISTEN a; SELECT 1', 'mixed'],
    ['a read and an UNLISTEN', 'SELECT 1; UNLISTEN *', 'mixed'],
    ['a read that names a channel', "SELECT 'listen here'", undefined],
    ['a NOTIFY', 'NOTIFY listeners', undefined],
    ['no text', undefined, undefined],
  ])('%s', (_case, text, expected) => {
    expect(listenTextOf(text)).toBe(expected);
  });
});

describe('forwardEvents', () => {
  it('tells notifications and notices on the view until stopped', () => {
    const from = new EventEmitter();
    const to = new EventEmitter();
    const heard: unknown[] = [];
    to.on('notification', (message) => heard.push(message));
    to.on('notice', (message) => heard.push(message));
    const stop = forwardEvents(from, to);
    from.emit('notification', 'n');
    from.emit('notice', 'w');
    stop();
    from.emit('notification', 'late');
    expect(heard).toEqual(['n', 'w']);
    expect(from.listenerCount('notification')).toBe(0);
  });
});

describe('ViewListener, its connection lost', () => {
  const fakeClient = () => {
    const client = Object.assign(new EventEmitter(), {
      released: [] as unknown[],
      query: jest.fn(() => Promise.resolve({ rows: [] })),
      release: (error?: unknown) => client.released.push(error ?? 'clean'),
    });
    return client;
  };

  it("tells the view 'error' then 'end', and gives the connection back with the error", async () => {
    const client = fakeClient();
    const view = new EventEmitter();
    const told: unknown[] = [];
    view.on('error', (error) => told.push(error));
    view.on('end', () => told.push('end'));
    const listener = new ViewListener(() => Promise.resolve(client as never), view);
    await listener.query(['LISTEN a']);
    const lost = new Error('Connection terminated unexpectedly');
    client.emit('error', lost);
    expect(told).toEqual([lost, 'end']);
    expect(client.released).toEqual([lost]);
    expect(listener.lost).toBe(lost);
    await expect(listener.query(['LISTEN b'])).rejects.toBe(lost);
    listener.release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(client.released).toEqual([lost]);
    expect(client.query).toHaveBeenCalledTimes(1);
  });

  it("emits no 'error' on a view none listens on (node's emit would throw)", async () => {
    const client = fakeClient();
    const view = new EventEmitter();
    const listener = new ViewListener(() => Promise.resolve(client as never), view);
    await listener.query(['LISTEN a']);
    expect(() => client.emit('error', new Error('lost'))).not.toThrow();
  });
});
