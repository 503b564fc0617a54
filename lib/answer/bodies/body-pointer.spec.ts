import {
  BODY_POINTER_MARKER,
  bodyProblem,
  pointerOf,
  sha256Hex,
  storedByPointer,
  withBody,
  withPointer,
} from './body-pointer.js';

const body = Buffer.from('{"a":"large enough"}');
const pointer = { id: '3f2a', length: body.length, sha256: sha256Hex(body) };
const response = (headers: Record<string, string> = {}, bytes = body) => ({
  status: 201,
  headers: { 'content-type': 'application/json', ...headers },
  body: bytes,
});

describe('storedByPointer', () => {
  it.each([
    ['a body over the threshold', response(), body.length - 1, true],
    ['a body at the threshold', response(), body.length, false],
    ['a body under it', response(), body.length + 1, false],
    ['a response that already points', response({ [BODY_POINTER_MARKER]: '{}' }), 0, false],
  ])('%s: %s', (_what, given, overBytes, expected) => {
    expect(storedByPointer(given, overBytes)).toBe(expected);
  });
});

describe('pointerOf', () => {
  it.each<[string, Record<string, string>, ReturnType<typeof pointerOf>]>([
    ['an inline body', {}, undefined],
    ['a pointer', { [BODY_POINTER_MARKER]: JSON.stringify(pointer) }, pointer],
    ['JSON that does not parse', { [BODY_POINTER_MARKER]: '{"id":' }, 'malformed'],
    ['no id', { [BODY_POINTER_MARKER]: JSON.stringify({ ...pointer, id: 1 }) }, 'malformed'],
    [
      'a fractional length',
      { [BODY_POINTER_MARKER]: JSON.stringify({ ...pointer, length: 1.5 }) },
      'malformed',
    ],
    [
      'a hash that is not hex SHA-256',
      { [BODY_POINTER_MARKER]: JSON.stringify({ ...pointer, sha256: 'abc' }) },
      'malformed',
    ],
  ])('%s', (_what, headers, expected) => {
    expect(pointerOf(response(headers))).toEqual(expected);
  });
});

describe('bodyProblem', () => {
  const flipped = Buffer.from(body);
  flipped[3] ^= 1;
  it.each<[string, Buffer | undefined, string | undefined]>([
    ['the stored body', body, undefined],
    ['no body', undefined, 'its body (3f2a) is missing from the body store'],
    [
      'a shorter body',
      body.subarray(1),
      `its body (3f2a) is ${body.length - 1} bytes, not the ${body.length} stored`,
    ],
    [
      'a body of the same length, one bit flipped',
      flipped,
      'its body (3f2a) does not match the SHA-256 stored with the key',
    ],
  ])('%s', (_what, found, expected) => {
    expect(bodyProblem(pointer, found)).toBe(expected);
  });
});

it('a pointer and its body make the response again, the marker gone', () => {
  const stored = withPointer(response(), pointer);
  expect(stored.body.length).toBe(0);
  expect(pointerOf(stored)).toEqual(pointer);
  expect(withBody(stored, body)).toEqual(response());
});
