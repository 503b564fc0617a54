import request from 'supertest';

/**
 * What every black-box test of the sample app sends and checks, whatever the route: the
 * contract's answers (problems, replays, 409s) and the client's habits (retrying while a key
 * is in progress). Shared by the files that drive the app's processes over HTTP.
 */

export type Res = request.Response;

export const MIB = 1024 * 1024;
export const PROBLEM = /^application\/problem\+json/;
export const JSON_TYPE = /^application\/json/;
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export const UNAUTHORIZED = {
  error: 'unauthorized',
  message: 'X-Tenant-Id must be a positive integer',
  statusCode: 401,
};

export const KEY_MISMATCH = {
  type: 'urn:idempotency:key_mismatch',
  title: 'Idempotency key reused',
  status: 422,
  detail:
    'This idempotency key was already used with a different request (method, path or body); ' +
    'use a new key for a new operation.',
  code: 'key_mismatch',
};

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `GET` with the tenant's header (none when `tenant` is undefined). */
export function getPath(url: string, path: string, tenant: string | undefined): Promise<Res> {
  let req = request(url).get(path);
  if (tenant !== undefined) req = req.set('X-Tenant-Id', tenant);
  return req.then((res) => res);
}

export function expectProblem(res: Res, status: number, code: string) {
  expect(res.status).toBe(status);
  expect(res.headers['content-type']).toMatch(PROBLEM);
  expect(res.body).toMatchObject({ status, code });
}

export function expectReplayOf(replay: Res, original: Res) {
  expect(replay.status).toBe(original.status);
  expect(replay.headers['idempotent-replayed']).toBe('true');
  expect(replay.headers['content-type']).toBe(original.headers['content-type']);
  expect(replay.text).toBe(original.text);
}

export function expectFresh(res: Res, status = 201) {
  expect(res.status).toBe(status);
  expect(res.headers['idempotent-replayed']).toBeUndefined();
}

export function expectInProgress(res: Res, maxSeconds: number) {
  expectProblem(res, 409, 'key_in_progress');
  expect(res.headers['retry-after']).toMatch(/^\d+$/);
  const seconds = Number(res.headers['retry-after']);
  expect(seconds).toBeGreaterThanOrEqual(1);
  expect(seconds).toBeLessThanOrEqual(maxSeconds);
}

/** Retries like a client while the key is in progress (409); returns the answer and the 409s. */
export async function retryWhileInProgress(
  send: () => Promise<Res>,
  maxMs = 20_000,
): Promise<{ res: Res; conflicts: Res[] }> {
  const conflicts: Res[] = [];
  const deadline = Date.now() + maxMs;
  for (;;) {
    const res = await send();
    if (res.status !== 409) return { res, conflicts };
    conflicts.push(res);
    if (Date.now() > deadline) throw new Error(`still 409 after ${maxMs} ms: ${res.text}`);
    await sleep(200);
  }
}

/** A JSON text padded with white space (still the same JSON) to exactly `size` bytes. */
export function padTo(json: string, size: number): string {
  const padding = size - Buffer.byteLength(json);
  if (padding < 0) throw new Error('the JSON is longer than the size asked for');
  return `${json.slice(0, -1)}${' '.repeat(padding)}}`;
}
