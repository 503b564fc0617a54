import { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import { pinContentType } from './pin-content-type.js';

describe('pinContentType', () => {
  const problem = 'application/problem+json';
  it.each<[string, string, string, string]>([
    ['Nest 11 resetting an error body to JSON', 'Content-Type', 'application/json', problem],
    [
      'Express res.json() with its charset',
      'content-type',
      'application/json; charset=utf-8',
      problem,
    ],
    ['another media type the app chose', 'Content-Type', 'text/csv', 'text/csv'],
  ])('%s', (_name, header, value, kept) => {
    const response = new ServerResponse(new IncomingMessage(new Socket()));
    response.setHeader('Content-Type', problem);
    pinContentType(response, problem);
    response.setHeader(header, value);
    expect(response.getHeader('content-type')).toBe(kept);
  });

  it('leaves other headers alone', () => {
    const response = new ServerResponse(new IncomingMessage(new Socket()));
    pinContentType(response, problem);
    response.setHeader('Retry-After', '1');
    expect(response.getHeader('retry-after')).toBe('1');
  });
});
