import { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import { type StoredResponse } from '../shapes/stored-response.js';
import { holdResponse } from './response-hold.js';

/** A real ServerResponse whose end() records what would have gone out. */
function recordingResponse(): {
  raw: ServerResponse;
  sent: Promise<{ status: number; body: string }>;
} {
  const raw = new ServerResponse(new IncomingMessage(new Socket()));
  const sent = new Promise<{ status: number; body: string }>((resolve) => {
    raw.end = ((body?: Buffer) => {
      resolve({ status: raw.statusCode, body: body?.toString() ?? '' });
      return raw;
    }) as ServerResponse['end'];
  });
  return { raw, sent };
}

const fallback: StoredResponse = {
  status: 500,
  headers: { 'content-type': 'application/problem+json' },
  body: Buffer.from('{"code":"fallback"}'),
};

describe('holdResponse when the finalizer fails', () => {
  it.each<[string, () => Promise<StoredResponse>]>([
    [
      'throws at once (a problem that could not be built)',
      () => {
        throw new TypeError('Do not know how to serialize a BigInt');
      },
    ],
    ['rejects', () => Promise.reject(new TypeError('Do not know how to serialize a BigInt'))],
  ])('over the limit, a finalizer that %s: onFinalizeError answers', async (_name, onOverflow) => {
    const { raw, sent } = recordingResponse();
    const heard: unknown[] = [];
    holdResponse(
      raw,
      () => Promise.resolve(undefined),
      (error) => {
        heard.push(error);
        return Promise.resolve(fallback);
      },
      { maxBytes: 4, onOverflow },
    );
    raw.end('more than four bytes');
    expect(await sent).toEqual({ status: 500, body: '{"code":"fallback"}' });
    expect(String(heard[0])).toContain('BigInt');
  });

  it('a finalizer of a written answer that throws at once: onFinalizeError answers', async () => {
    const { raw, sent } = recordingResponse();
    holdResponse(
      raw,
      () => {
        throw new Error('bug');
      },
      () => fallback,
    );
    raw.end('ok');
    expect((await sent).status).toBe(500);
  });
});
