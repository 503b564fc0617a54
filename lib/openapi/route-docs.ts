import { MAX_KEY_LENGTH, REPLAYED_HEADER } from '../shapes/idempotency.constants.js';
import { type IdempotencyErrorCode } from '../shapes/idempotency.errors.js';
import { codesWithStatus, PROBLEM_CONTENT_TYPE } from '../http/problem.js';

/**
 * What an idempotent route adds to its OpenAPI operation, in the formats @nestjs/swagger's own
 * decorators store (`swagger/apiParameters`, `swagger/apiResponse`), so that swagger renders
 * it without the library importing swagger. Pure: the provider reads and writes the metadata.
 */

/** An OpenAPI schema, as far as these docs need one; anything else passes through. */
export interface OpenApiSchema {
  type?: string;
  enum?: readonly unknown[];
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  required?: readonly string[];
  properties?: Record<string, OpenApiSchema>;
  example?: unknown;
  [keyword: string]: unknown;
}

/** One entry of `swagger/apiParameters`, as `ApiHeader()` (and `ApiQuery()`...) store it. */
export interface ParameterMetadata {
  name?: string;
  in?: string;
  required?: boolean;
  description?: string;
  schema?: OpenApiSchema;
  [field: string]: unknown;
}

export interface HeaderObject {
  description?: string;
  schema?: OpenApiSchema;
  [field: string]: unknown;
}

/**
 * One value of `swagger/apiResponse`, as `ApiResponse()` stores it. An entry with `content` and
 * neither `type` nor `schema` is passed to the document as it is; with a `type` or `schema`,
 * swagger builds `content` from them instead.
 */
export interface ResponseMetadata {
  description?: string;
  headers?: Record<string, HeaderObject>;
  content?: Record<string, { schema?: OpenApiSchema; [field: string]: unknown }>;
  examples?: Record<string, unknown>;
  [field: string]: unknown;
}

/** `swagger/apiResponse`: entries by status ("201", "2XX", "default"). */
export type ResponsesMetadata = Record<string, ResponseMetadata>;

export interface RouteDocsInput {
  /** The key's header, when the key is read from one; a body field or a function has none. */
  keyHeader: string | undefined;
  required: boolean;
  /** What the route answers on success: `@HttpCode()`'s status, else 201 for POST, else 200. */
  successStatus: number;
  /** The handler's `swagger/apiParameters` before the library's. */
  parameters: readonly ParameterMetadata[] | undefined;
  /** Headers the controller class documents (`@ApiHeader()` on the class): not repeated. */
  classParameters: readonly ParameterMetadata[] | undefined;
  /** The handler's `swagger/apiResponse` before the library's. */
  responses: Readonly<ResponsesMetadata> | undefined;
  /**
   * The controller's own (`@ApiResponse()` on the class). Swagger lets a handler's entry hide
   * the class's of the same status, so the library's are merged into those.
   */
  classResponses: Readonly<ResponsesMetadata> | undefined;
}

export interface RouteDocs {
  /** The handler's parameters with the key header; undefined when it had none and gets none. */
  parameters: readonly ParameterMetadata[] | undefined;
  responses: ResponsesMetadata;
}

export const KEY_HEADER_DESCRIPTION =
  'One key per operation: a retry with the same key gets the first answer again, never a ' +
  'second execution. 1 to 255 visible ASCII characters.';

const REPLAYED: HeaderObject = {
  description: 'true when this answer is a replay of the stored one',
  schema: { type: 'string', enum: ['true'] },
};

const RETRY_AFTER: HeaderObject = {
  description: 'Seconds to wait before retrying with the same key',
  schema: { type: 'integer', minimum: 0 },
};

/** The error answers every idempotent route can give, by status (as `toProblem()` maps them). */
function problemResponses(required: boolean): ResponsesMetadata {
  return {
    '400': problem(
      400,
      `The idempotency key is ${required ? 'missing or ' : ''}invalid, the tenant id is ` +
        'invalid, or the request body cannot be read as the JSON its content type announces.',
      // A route whose key is optional never answers key_missing.
      codesWithStatus(400).filter((code) => required || code !== 'key_missing'),
    ),
    '409': problem(
      409,
      'Another request with this key is still in progress, or this request lost its lease ' +
        'to another worker; retry with the same key after Retry-After seconds.',
      codesWithStatus(409),
      true,
    ),
    '422': problem(
      422,
      'This key was already used with a different request (method, path or body); use a new ' +
        'key for a new operation.',
      codesWithStatus(422),
    ),
    '503': problem(
      503,
      'Retry later with the same key, after Retry-After seconds: the database is unavailable ' +
        'or rolled the work back for a passing reason, or a dependency is down. Nothing was ' +
        'stored.',
      codesWithStatus(503),
      true,
    ),
  };
}

function problem(
  status: number,
  description: string,
  codes: readonly IdempotencyErrorCode[],
  retryAfter = false,
): ResponseMetadata {
  return {
    description,
    ...(retryAfter ? { headers: { 'Retry-After': RETRY_AFTER } } : {}),
    content: { [PROBLEM_CONTENT_TYPE]: { schema: problemSchema(status, codes) } },
  };
}

/** The RFC 9457 body `toProblem()` builds: `type` is `urn:idempotency:` and the code. */
function problemSchema(status: number, codes: readonly IdempotencyErrorCode[]): OpenApiSchema {
  return {
    type: 'object',
    required: ['type', 'title', 'status', 'detail', 'code'],
    properties: {
      type: { type: 'string', example: `urn:idempotency:${codes[0]}` },
      title: { type: 'string' },
      status: { type: 'integer', example: status },
      detail: { type: 'string' },
      code: { type: 'string', enum: [...codes] },
    },
  };
}

const SUCCESS = /^2(\d\d|XX)$/i;

/** The handler's parameters and responses once the idempotent route's own are added. */
export function idempotentRouteDocs(input: RouteDocsInput): RouteDocs {
  const responses: ResponsesMetadata = { ...input.responses };
  const base = (status: string) => responses[status] ?? input.classResponses?.[status];
  // Swagger adds the default 2xx only to a handler without responses, which this one no
  // longer is: add it here, as swagger would have, to carry the replay header.
  const successes = Object.keys(responses).filter((status) => SUCCESS.test(status));
  const targets = successes.length > 0 ? successes : [String(input.successStatus)];
  for (const status of targets) {
    responses[status] = mergeResponseEntry(base(status) ?? { description: '' }, {
      headers: { [REPLAYED_HEADER]: REPLAYED },
    });
  }
  for (const [status, entry] of Object.entries(problemResponses(input.required))) {
    responses[status] = mergeResponseEntry(base(status), entry);
  }
  return { parameters: withKeyHeader(input), responses };
}

function withKeyHeader(input: RouteDocsInput): readonly ParameterMetadata[] | undefined {
  const name = input.keyHeader;
  if (name === undefined) return input.parameters;
  // Header names are case-insensitive: the app's own `@ApiHeader('idempotency-key')` stays.
  const documented = [...(input.parameters ?? []), ...(input.classParameters ?? [])].some(
    (p) => (p.in ?? 'header') === 'header' && p.name?.toLowerCase() === name.toLowerCase(),
  );
  if (documented) return input.parameters;
  return [
    ...(input.parameters ?? []),
    {
      name,
      in: 'header',
      required: input.required,
      description: KEY_HEADER_DESCRIPTION,
      schema: { type: 'string', minLength: 1, maxLength: MAX_KEY_LENGTH },
    },
  ];
}

/**
 * Swagger's own merge of two `@ApiResponse()` entries of one status (descriptions joined,
 * examples merged), except that headers and content, which swagger replaces, are merged by
 * name, the existing entry's winning a name both have: the app's own words on its route are
 * the more specific.
 */
export function mergeResponseEntry(
  existing: ResponseMetadata | undefined,
  incoming: ResponseMetadata,
): ResponseMetadata {
  if (!existing) return incoming;
  const descriptions = [existing.description, incoming.description].filter((d) => !!d);
  const merged: ResponseMetadata = {
    ...existing,
    ...incoming,
    description: descriptions.join('\n\n'),
  };
  const examples = mergeMaps(existing.examples, incoming.examples);
  const headers = mergeMaps(incoming.headers, existing.headers);
  const content = mergeMaps(incoming.content, existing.content);
  if (examples) merged.examples = examples;
  if (headers) merged.headers = headers;
  if (content) merged.content = content;
  return merged;
}

function mergeMaps<T extends object>(first: T | undefined, second: T | undefined): T | undefined {
  return first && second ? { ...first, ...second } : (second ?? first);
}
