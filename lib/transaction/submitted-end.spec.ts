import { EventEmitter } from 'node:events';
import { endOf } from './submitted-end.js';

/** A node-postgres client as `readyForNext` reads it: busy with a statement. */
function busyClient() {
  return { readyForQuery: false, connection: new EventEmitter() };
}

async function settledYet(ended: Promise<void>): Promise<boolean> {
  let settled = false;
  void ended.then(() => (settled = true));
  await new Promise((resolve) => setImmediate(resolve));
  return settled;
}

describe('endOf', () => {
  it.each([
    ['its ReadyForQuery', 'handleReadyForQuery'],
    ['its error', 'handleError'],
  ] as const)('settles at %s, and the submittable still hears it', async (_case, method) => {
    const heard: string[] = [];
    const submittable = {
      handleReadyForQuery: () => heard.push('handleReadyForQuery'),
      handleError: () => heard.push('handleError'),
    };
    const ended = endOf(submittable, busyClient());
    submittable[method]();
    await ended;
    expect(heard).toEqual([method]);
  });

  it('settles at once for one node-postgres could not tell it ended', async () => {
    await expect(endOf({})).resolves.toBeUndefined();
  });

  // Adversary 83: node-postgres' `query_timeout` calls `handleError` and leaves it running.
  it.each<[string, (submittable: Submittable, client: Busy) => void, boolean]>([
    ['the read timeout alone: still running', () => undefined, false],
    [
      "the read timeout, then the client's next ReadyForQuery: ended",
      (_submittable, client) => client.connection.emit('readyForQuery'),
      true,
    ],
    [
      'the read timeout, then its own ReadyForQuery: ended',
      (submittable) => submittable.handleReadyForQuery(),
      true,
    ],
    [
      'the read timeout, then the server cancelled it: ended',
      (submittable) => submittable.handleError(new Error('canceling statement')),
      true,
    ],
    [
      "the read timeout, then the client's connection ended: ended",
      (_submittable, client) => client.connection.emit('end'),
      true,
    ],
  ])('%s', async (_case, then, expected) => {
    const client = busyClient();
    const submittable: Submittable = {
      handleReadyForQuery: () => undefined,
      handleError: () => undefined,
    };
    const ended = endOf(submittable, client);
    submittable.handleError(new Error('Query read timeout'));
    then(submittable, client);
    expect(await settledYet(ended)).toBe(expected);
  });

  it('the read timeout of a client that does not tell its readiness: ended at once', async () => {
    const submittable: Submittable = {
      handleReadyForQuery: () => undefined,
      handleError: () => undefined,
    };
    const ended = endOf(submittable, {});
    submittable.handleError(new Error('Query read timeout'));
    expect(await settledYet(ended)).toBe(true);
  });
});

interface Submittable {
  handleReadyForQuery: () => void;
  handleError: (error: Error) => void;
}
type Busy = ReturnType<typeof busyClient>;
