import {
  IdempotencyKeyInProgressError,
  IdempotencyKeyMissingError,
  IdempotencyResponseTooLargeError,
} from '../shapes/idempotency.errors.js';
import {
  answerProblem,
  type ProblemAnswer,
  type ProblemRenderer,
  problemResponse,
  toProblem,
} from './problem.js';

const inProgress = new IdempotencyKeyInProgressError(7);
const stripe: ProblemRenderer = (problem) => ({
  body: { error: { type: 'idempotency_error', code: problem.body.code } },
});

describe('answerProblem', () => {
  it.each<[string, ProblemRenderer | undefined, ProblemAnswer]>([
    ['no renderer: the problem', undefined, toProblem(inProgress)],
    [
      'a body only: JSON, Retry-After kept, the problem’s status',
      stripe,
      {
        status: 409,
        headers: { 'content-type': 'application/json; charset=utf-8', 'retry-after': '7' },
        body: { error: { type: 'idempotency_error', code: 'key_in_progress' } },
      },
    ],
    [
      'its own status and headers, by any case, over the library’s',
      () => ({
        status: 429,
        headers: { 'Content-Type': 'application/vnd.x+json', 'Retry-After': '9' },
        body: {},
      }),
      {
        status: 429,
        headers: { 'content-type': 'application/vnd.x+json', 'retry-after': '9' },
        body: {},
      },
    ],
  ])('%s', (_name, render, expected) => {
    expect(answerProblem(inProgress, render)).toEqual(expected);
  });

  it.each<[string, ProblemRenderer, string]>([
    [
      'it throws',
      () => {
        throw new Error('bug in the app');
      },
      'bug in the app',
    ],
    [
      'a status that is not one',
      () => ({ status: 99, body: {} }),
      'renderProblem returned status 99',
    ],
    [
      'a fractional status',
      () => ({ status: 400.5, body: {} }),
      'renderProblem returned status 400.5',
    ],
    ['no body', () => ({ body: null as never }), 'renderProblem returned no body object'],
    ['nothing', () => undefined as never, 'renderProblem returned no body object'],
    ['a BigInt in the body', () => ({ body: { amount: 1n } }), 'BigInt'],
    [
      'a cycle in the body',
      () => {
        const body: Record<string, unknown> = {};
        body.self = body;
        return { body };
      },
      'circular',
    ],
    [
      'a body whose toJSON throws',
      () => ({
        body: {
          toJSON: () => {
            throw new Error('toJSON failed');
          },
        },
      }),
      'toJSON failed',
    ],
    [
      'a body JSON writes as nothing',
      () => ({ body: { toJSON: () => undefined } }),
      'JSON.stringify writes as nothing',
    ],
  ])('the problem as it is when the renderer fails: %s', (_name, render, reason) => {
    const heard: unknown[] = [];
    expect(answerProblem(inProgress, render, (error) => heard.push(error))).toEqual(
      toProblem(inProgress),
    );
    expect(String(heard[0])).toContain(reason);
  });
});

describe('problemResponse', () => {
  it.each<[string, ProblemRenderer | undefined, string, string]>([
    [
      'problem+json by default',
      undefined,
      'application/problem+json',
      '"type":"urn:idempotency:response_too_large"',
    ],
    [
      'the app’s shape, as the bytes that are stored and replayed',
      stripe,
      'application/json; charset=utf-8',
      '{"error":{"type":"idempotency_error","code":"response_too_large"}}',
    ],
  ])('%s', (_name, render, contentType, body) => {
    const response = problemResponse(new IdempotencyResponseTooLargeError(1024), render);
    expect(response.status).toBe(500);
    expect(response.headers['content-type']).toBe(contentType);
    expect(response.body.toString()).toContain(body);
  });

  it('a problem without Retry-After gets none from the renderer’s default headers', () => {
    const answer = answerProblem(
      new IdempotencyKeyMissingError('the Idempotency-Key header'),
      stripe,
    );
    expect(answer.headers).toEqual({ 'content-type': 'application/json; charset=utf-8' });
  });
});
