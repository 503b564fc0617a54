import { toProblem } from '../http/problem.js';
import {
  type IdempotencyError,
  IdempotencyKeyInProgressError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyMismatchError,
  IdempotencyKeyMissingError,
  IdempotencyLeaseLostError,
  IdempotencyRequestInvalidError,
  IdempotencyResponseTooLargeError,
  IdempotencyStoredResponseUnreadableError,
  IdempotencyStoreUnavailableError,
  IdempotencyTenantInvalidError,
  IdempotencyTransactionAbortedError,
  RetryLaterError,
  TransientDatabaseError,
  PermanentDatabaseError,
} from '../shapes/idempotency.errors.js';
import {
  idempotentRouteDocs,
  mergeResponseEntry,
  type ParameterMetadata,
  type ResponseMetadata,
  type ResponsesMetadata,
  type RouteDocsInput,
} from './route-docs.js';

const route = (input: Partial<RouteDocsInput> = {}): RouteDocsInput => ({
  keyHeader: 'Idempotency-Key',
  required: true,
  successStatus: 201,
  parameters: undefined,
  classParameters: undefined,
  responses: undefined,
  classResponses: undefined,
  ...input,
});

const keyParam = (name: string, required: boolean) => ({
  name,
  in: 'header',
  required,
  description:
    'One key per operation: a retry with the same key gets the first answer again, never a ' +
    'second execution. 1 to 255 visible ASCII characters.',
  schema: { type: 'string', minLength: 1, maxLength: 255 },
});

const replayed = {
  'Idempotent-Replayed': {
    description: 'true when this answer is a replay of the stored one',
    schema: { type: 'string', enum: ['true'] },
  },
};

/** Each error after its code, for the tests' names. */
const named = (errors: IdempotencyError[]) =>
  errors.map((error) => [error.code, error] as [string, IdempotencyError]);

const problemOf = (responses: ResponsesMetadata, status: number) =>
  responses[String(status)].content?.['application/problem+json']?.schema;

describe('idempotentRouteDocs: the key header parameter', () => {
  const traceId: ParameterMetadata = { name: 'X-Trace', in: 'header', required: false };
  it.each<[string, Partial<RouteDocsInput>, ParameterMetadata[] | undefined]>([
    ['the module header, required', {}, [keyParam('Idempotency-Key', true)]],
    ['a key that is optional', { required: false }, [keyParam('Idempotency-Key', false)]],
    ['keyFrom: { header }', { keyHeader: 'X-Request-Id' }, [keyParam('X-Request-Id', true)]],
    [
      'after the parameters already there',
      { parameters: [traceId] },
      [traceId, keyParam('Idempotency-Key', true)],
    ],
    ['a key in the body: none, nothing written', { keyHeader: undefined }, undefined],
    [
      'a key in the body: the others kept',
      { keyHeader: undefined, parameters: [traceId] },
      [traceId],
    ],
    [
      'not twice: the app documents it (in another case)',
      { parameters: [{ name: 'idempotency-key', in: 'header', description: 'Mine' }] },
      [{ name: 'idempotency-key', in: 'header', description: 'Mine' }],
    ],
    [
      'not twice: the controller documents it',
      { parameters: [traceId], classParameters: [{ name: 'Idempotency-Key', in: 'header' }] },
      [traceId],
    ],
    [
      'a query parameter of the same name is another parameter',
      { parameters: [{ name: 'Idempotency-Key', in: 'query' }] },
      [{ name: 'Idempotency-Key', in: 'query' }, keyParam('Idempotency-Key', true)],
    ],
  ])('%s', (_name, input, parameters) => {
    expect(idempotentRouteDocs(route(input)).parameters).toEqual(parameters);
  });
});

describe('idempotentRouteDocs: the replay header on the success answer', () => {
  const charge: ResponseMetadata = {
    description: 'The charge',
    type: class Charge {},
    isArray: false,
  };
  it.each<[string, Partial<RouteDocsInput>, Record<string, ResponseMetadata>]>([
    ['POST: the 201 swagger would add', {}, { '201': { description: '', headers: replayed } }],
    ['@HttpCode(200)', { successStatus: 200 }, { '200': { description: '', headers: replayed } }],
    [
      "the app's own 201, kept",
      { responses: { '201': charge } },
      { '201': { ...charge, headers: replayed } },
    ],
    [
      'every 2xx the app documents, and no 201 added',
      { responses: { '200': { description: 'a' }, '202': { description: 'b' } } },
      {
        '200': { description: 'a', headers: replayed },
        '202': { description: 'b', headers: replayed },
      },
    ],
    [
      'a 2XX range',
      { responses: { '2XX': { description: 'ok' } } },
      { '2XX': { description: 'ok', headers: replayed } },
    ],
    [
      'a default entry is not a success: the 201 is added, the default left alone',
      { responses: { default: { description: 'd' } } },
      { default: { description: 'd' }, '201': { description: '', headers: replayed } },
    ],
    [
      'merged with the headers already there',
      { responses: { '201': { description: 'c', headers: { Location: { description: 'l' } } } } },
      { '201': { description: 'c', headers: { ...replayed, Location: { description: 'l' } } } },
    ],
    [
      "the app's own Idempotent-Replayed wins",
      {
        responses: {
          '201': { description: 'c', headers: { 'Idempotent-Replayed': { description: 'mine' } } },
        },
      },
      { '201': { description: 'c', headers: { 'Idempotent-Replayed': { description: 'mine' } } } },
    ],
    [
      "the controller's 201, which the handler's would hide",
      { classResponses: { '201': { description: 'from the class' } } },
      { '201': { description: 'from the class', headers: replayed } },
    ],
  ])('%s', (_name, input, expected) => {
    const { responses } = idempotentRouteDocs(route(input));
    const withoutProblems = Object.fromEntries(
      Object.entries(responses).filter(
        ([status]) => !['400', '409', '422', '503'].includes(status),
      ),
    );
    expect(withoutProblems).toEqual(expected);
  });

  it("leaves the input's objects as they were", () => {
    const responses = { '201': { description: 'c', headers: { Location: { description: 'l' } } } };
    const parameters = [{ name: 'X-Trace', in: 'header' }];
    const copy = structuredClone({ responses, parameters });
    idempotentRouteDocs(route({ responses, parameters }));
    expect({ responses, parameters }).toEqual(copy);
  });
});

describe('idempotentRouteDocs: the problem answers', () => {
  const { responses } = idempotentRouteDocs(route());

  it('documents 409 in full', () => {
    expect(responses['409']).toEqual({
      description:
        'Another request with this key is still in progress, or this request lost its lease to ' +
        'another worker; retry with the same key after Retry-After seconds.',
      headers: {
        'Retry-After': {
          description: 'Seconds to wait before retrying with the same key',
          schema: { type: 'integer', minimum: 0 },
        },
      },
      content: {
        'application/problem+json': {
          schema: {
            type: 'object',
            required: ['type', 'title', 'status', 'detail', 'code'],
            properties: {
              type: { type: 'string', example: 'urn:idempotency:key_in_progress' },
              title: { type: 'string' },
              status: { type: 'integer', example: 409 },
              detail: { type: 'string' },
              code: { type: 'string', enum: ['key_in_progress', 'lease_lost'] },
            },
          },
        },
      },
    });
  });

  it.each<[boolean, number, string[]]>([
    [true, 400, ['key_missing', 'key_invalid', 'tenant_invalid', 'request_invalid']],
    [false, 400, ['key_invalid', 'tenant_invalid', 'request_invalid']],
    [true, 409, ['key_in_progress', 'lease_lost']],
    [true, 422, ['key_mismatch']],
    [true, 503, ['store_unavailable', 'database_transient', 'retry_later']],
  ])('required %s: %s carries %j', (required, status, codes) => {
    const docs = idempotentRouteDocs(route({ required })).responses;
    expect(problemOf(docs, status)?.properties?.code?.enum).toEqual(codes);
  });

  // What toProblem() answers is what is documented: status, code, and the Retry-After header.
  it.each(
    named([
      new IdempotencyKeyMissingError('the Idempotency-Key header'),
      new IdempotencyKeyInvalidError('the Idempotency-Key header', 'it is empty'),
      new IdempotencyTenantInvalidError(null),
      new IdempotencyRequestInvalidError('duplicate key'),
      new IdempotencyKeyMismatchError(),
      new IdempotencyKeyInProgressError(3),
      new IdempotencyLeaseLostError(),
      new IdempotencyStoreUnavailableError(null),
      new TransientDatabaseError(null),
      new RetryLaterError(),
    ]),
  )('%s is documented as toProblem() answers it', (_code, error) => {
    const answer = toProblem(error);
    const documented = responses[String(answer.status)];
    expect(problemOf(responses, answer.status)?.properties?.code?.enum).toContain(error.code);
    expect(documented.headers?.['Retry-After'] !== undefined).toBe(
      answer.headers['retry-after'] !== undefined,
    );
    expect(Object.keys(problemOf(responses, answer.status)?.properties ?? {})).toEqual(
      Object.keys(answer.body),
    );
  });

  it.each(
    named([
      new IdempotencyTransactionAbortedError(null),
      new IdempotencyResponseTooLargeError(10),
      new IdempotencyStoredResponseUnreadableError('no key'),
      new PermanentDatabaseError(null),
    ]),
  )('%s is a 500, not documented as one of the route’s answers', (_code, error) => {
    expect(toProblem(error).status).toBe(500);
    expect(responses['500']).toBeUndefined();
  });

  it("merges into the app's own entry of the status", () => {
    const mine: ResponseMetadata = {
      description: 'The charge was already captured',
      content: { 'application/json': { schema: { type: 'object' } } },
    };
    const merged = idempotentRouteDocs(route({ responses: { '409': mine } })).responses['409'];
    expect(merged.description).toBe(
      'The charge was already captured\n\nAnother request with this key is still in progress, ' +
        'or this request lost its lease to another worker; retry with the same key after ' +
        'Retry-After seconds.',
    );
    expect(Object.keys(merged.content ?? {})).toEqual([
      'application/problem+json',
      'application/json',
    ]);
    expect(merged.content?.['application/json']).toEqual(mine.content?.['application/json']);
  });

  it("merges into the controller's own entry, which the handler's would hide", () => {
    const docs = idempotentRouteDocs(route({ classResponses: { '503': { description: 'Down' } } }));
    expect(docs.responses['503'].description).toMatch(/^Down\n\nRetry later with the same key/);
  });
});

describe('mergeResponseEntry', () => {
  it.each<[string, ResponseMetadata | undefined, ResponseMetadata, ResponseMetadata]>([
    ['nothing there yet', undefined, { description: 'b' }, { description: 'b' }],
    ['descriptions joined', { description: 'a' }, { description: 'b' }, { description: 'a\n\nb' }],
    ['an empty one dropped', { description: '' }, { description: 'b' }, { description: 'b' }],
    ['none incoming', { description: 'a' }, {}, { description: 'a' }],
    [
      'other fields: the incoming one wins, as in swagger',
      { description: 'a', type: 'string', isArray: false },
      { description: 'b', isArray: true },
      { description: 'a\n\nb', type: 'string', isArray: true },
    ],
    [
      'headers by name, the existing one winning a name both have',
      { headers: { A: { description: 'mine' }, B: { description: 'b' } } },
      { headers: { A: { description: 'ours' }, C: { description: 'c' } } },
      {
        description: '',
        headers: { A: { description: 'mine' }, B: { description: 'b' }, C: { description: 'c' } },
      },
    ],
    [
      'content by media type',
      { content: { 'application/json': { schema: { type: 'object' } } } },
      { content: { 'application/problem+json': { schema: { type: 'string' } } } },
      {
        description: '',
        content: {
          'application/problem+json': { schema: { type: 'string' } },
          'application/json': { schema: { type: 'object' } },
        },
      },
    ],
    [
      'examples merged, the incoming one winning, as in swagger',
      { examples: { a: 1, b: 1 } },
      { examples: { b: 2 } },
      { description: '', examples: { a: 1, b: 2 } },
    ],
  ])('%s', (_name, existing, incoming, merged) => {
    expect(mergeResponseEntry(existing, incoming)).toEqual(merged);
  });
});
