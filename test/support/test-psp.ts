import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo } from 'node:net';

/** A payment provider of the test's own: it records each call's Idempotency-Key. */
export interface TestPsp {
  url: string;
  /** The keys of the calls it received, in order. */
  keys: string[];
  /** Leaves the next `count` calls unanswered (a PSP that hangs while a worker dies). */
  hangNext(count: number): void;
  close(): Promise<void>;
}

/** Starts it on a free port; it answers `{ transfer: 'tr-<key>' }`, the same for one key. */
export async function startTestPsp(): Promise<TestPsp> {
  const keys: string[] = [];
  const hanging: ServerResponse[] = [];
  let hang = 0;
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const key = String(request.headers['idempotency-key'] ?? '');
    keys.push(key);
    request.resume();
    if (hang > 0) {
      hang -= 1;
      hanging.push(response);
      return;
    }
    response.setHeader('content-type', 'application/json');
    response.end(JSON.stringify({ transfer: `tr-${key}` }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/transfers`,
    keys,
    hangNext: (count) => (hang = count),
    close: () =>
      new Promise<void>((resolve) => {
        for (const response of hanging) response.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
