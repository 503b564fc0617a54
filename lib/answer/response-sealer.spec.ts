import { randomBytes } from 'node:crypto';
import { ResponseSealer, SEALED_MARKER, SealedResponseError } from './response-sealer.js';

const k1 = { id: 'k1', key: randomBytes(32) };
const k2 = { id: 'k2', key: randomBytes(32) };
const scope = { tenantId: '7', key: 'order-1' };
const response = {
  status: 201,
  headers: { 'content-type': 'application/json', location: '/charges/1' },
  body: Buffer.from('{"card":"4242 4242 4242 4242","name":"Ada"}'),
};

describe('ResponseSealer', () => {
  it('seals body and headers, and opens them as they were', () => {
    const sealed = new ResponseSealer([k1]).seal(scope, response);
    expect(sealed.status).toBe(201);
    expect(sealed.headers).toEqual({ [SEALED_MARKER]: '1' });
    expect(sealed.body.includes('4242')).toBe(false);
    expect(sealed.body.includes('/charges/1')).toBe(false);
    expect(new ResponseSealer([k1]).open(scope, sealed)).toEqual(response);
  });

  it('seals the same response differently every time (a fresh IV)', () => {
    const sealer = new ResponseSealer([k1]);
    expect(sealer.seal(scope, response).body.equals(sealer.seal(scope, response).body)).toBe(false);
  });

  it('returns a response stored before sealing was turned on as it is', () => {
    expect(new ResponseSealer([k1]).open(scope, response)).toBe(response);
  });

  it.each<[string, (sealed: Buffer) => Buffer, { tenantId: string; key: string }, string]>([
    [
      'copied under another key',
      (b) => b,
      { tenantId: '7', key: 'order-2' },
      'does not authenticate',
    ],
    [
      'copied under another tenant',
      (b) => b,
      { tenantId: '8', key: 'order-1' },
      'does not authenticate',
    ],
    [
      'a ciphertext byte altered',
      (b) => Buffer.concat([b.subarray(0, b.length - 1), Buffer.from([b[b.length - 1] ^ 1])]),
      scope,
      'does not authenticate',
    ],
    [
      'an unknown format',
      (b) => Buffer.concat([Buffer.from([9]), b.subarray(1)]),
      scope,
      'unknown format',
    ],
    ['cut short', (b) => b.subarray(0, 20), scope, 'cut short'],
  ])('refuses a row %s, naming why', (_name, alter, where, reason) => {
    const sealer = new ResponseSealer([k1]);
    const sealed = sealer.seal(scope, response);
    const stored = { ...sealed, body: alter(sealed.body) };
    expect(() => sealer.open(where, stored)).toThrow(SealedResponseError);
    expect(() => sealer.open(where, stored)).toThrow(reason);
  });

  it('binds the status: a row whose status was changed does not open', () => {
    const sealer = new ResponseSealer([k1]);
    const sealed = sealer.seal(scope, response);
    expect(() => sealer.open(scope, { ...sealed, status: 200 })).toThrow('does not authenticate');
  });

  it('rotates: the first key seals, every key opens, a dropped key is named', () => {
    const old = new ResponseSealer([k1]).seal(scope, response);
    const rotated = new ResponseSealer([k2, k1]);
    expect(rotated.open(scope, old)).toEqual(response);
    const fresh = rotated.seal(scope, response);
    expect(new ResponseSealer([k2]).open(scope, fresh)).toEqual(response);
    expect(() => new ResponseSealer([k2]).open(scope, old)).toThrow(
      'sealed with a key that is not among the configured keys',
    );
  });
});
