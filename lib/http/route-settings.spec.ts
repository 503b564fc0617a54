import { Body, Next, Req, Res } from '@nestjs/common';
import {
  declaredHeaders,
  defaultStatusOf,
  takesResponse,
  writesOwnResponse,
} from './route-settings.js';

class Routes {
  plain(@Body() _body: unknown) {}
  ownResponse(@Res() _res: unknown) {}
  passthrough(@Res({ passthrough: true }) _res: unknown) {}
  next(@Next() _next: unknown) {}
  request(@Req() _req: unknown) {}
  nothing() {}
}

describe('writesOwnResponse (Nest leaves the response to the handler)', () => {
  it.each<[keyof Routes, boolean]>([
    ['plain', false],
    ['ownResponse', true],
    ['passthrough', false],
    ['next', true],
    ['request', false],
    ['nothing', false],
  ])('%s: %s', (method, expected) => {
    expect(writesOwnResponse(Routes, method)).toBe(expected);
  });
});

describe('takesResponse (the handler may set the status and headers itself)', () => {
  it.each<[keyof Routes, boolean]>([
    ['plain', false],
    ['ownResponse', true],
    ['passthrough', true],
    ['next', true],
    ['request', false],
    ['nothing', false],
  ])('%s: %s', (method, expected) => {
    expect(takesResponse(Routes, method)).toBe(expected);
  });
});

describe('declaredHeaders (the @Header()s a stored response keeps)', () => {
  const kept = ['content-type', 'location'];
  it.each<[string, { name: string; value: string }[] | undefined, Record<string, string>]>([
    ['none declared', undefined, {}],
    [
      'a kept one, lower-cased',
      [{ name: 'Content-Type', value: 'text/csv' }],
      { 'content-type': 'text/csv' },
    ],
    ['one not kept', [{ name: 'X-Trace', value: '1' }], {}],
    [
      'kept and not kept',
      [
        { name: 'Location', value: '/a/1' },
        { name: 'Cache-Control', value: 'no-store' },
      ],
      { location: '/a/1' },
    ],
  ])('%s', (_name, declared, expected) => {
    expect(declaredHeaders(kept, declared)).toEqual(expected);
  });
});

describe('defaultStatusOf', () => {
  it.each<[number | undefined, string, number]>([
    [undefined, 'POST', 201],
    [undefined, 'PUT', 200],
    [undefined, 'GET', 200],
    [202, 'POST', 202],
    [204, 'DELETE', 204],
  ])('@HttpCode(%s) on %s: %s', (httpCode, method, expected) => {
    expect(defaultStatusOf(httpCode, method)).toBe(expected);
  });
});
