import {
  Body,
  Controller,
  Get,
  HttpCode,
  type INestApplication,
  Module,
  Post,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ApiConflictResponse,
  ApiCreatedResponse,
  ApiHeader,
  ApiProperty,
  DocumentBuilder,
  type OpenAPIObject,
  SwaggerModule,
} from '@nestjs/swagger';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  type IdempotencyModuleOptions,
  Idempotent,
} from '../lib/index.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

class ChargeDto {
  @ApiProperty()
  id!: string;
}

@Controller('charges')
class ChargesController {
  @Post()
  @Idempotent()
  create() {
    return { id: 'ch_1' };
  }

  @Post('optional')
  @Idempotent({ required: false })
  optional() {
    return {};
  }

  @Post('capture')
  @HttpCode(200)
  @Idempotent()
  capture() {
    return {};
  }

  @Post('above')
  @ApiCreatedResponse({ description: 'The charge', type: ChargeDto })
  @Idempotent()
  above() {
    return { id: 'ch_2' };
  }

  @Post('below')
  @Idempotent()
  @ApiCreatedResponse({ description: 'The charge', type: ChargeDto })
  below() {
    return { id: 'ch_3' };
  }

  @Post('conflict')
  @Idempotent()
  @ApiConflictResponse({ description: 'The charge was already captured' })
  @ApiHeader({ name: 'idempotency-key', description: 'Mine' })
  conflict() {
    return {};
  }

  @Post('header')
  @Idempotent({ keyFrom: { header: 'X-Request-Id' } })
  header() {
    return {};
  }

  @Post('body')
  @Idempotent({ keyFrom: { body: 'requestId' } })
  body(@Body() body: { requestId: string }) {
    return body;
  }

  @Post('plain')
  plain() {
    return {};
  }
}

/** `@Idempotent()` on the class: its POST is documented, its GET is not. */
@Controller('accounts')
@Idempotent()
class AccountsController {
  @Post()
  create() {
    return {};
  }

  @Get()
  list() {
    return [];
  }
}

async function documentOf(url: string, options: IdempotencyModuleOptions, controllers: unknown[]) {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url,
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
        logging: false,
      }),
      IdempotencyModule.forRoot(options),
    ],
    controllers: controllers as never[],
  })
  class OpenApiModule {}
  const app: INestApplication = await NestFactory.create(OpenApiModule, {
    logger: false,
    abortOnError: false,
  });
  try {
    return SwaggerModule.createDocument(app, new DocumentBuilder().build());
  } finally {
    await app.close();
  }
}

const KEY_DESCRIPTION =
  'One key per operation: a retry with the same key gets the first answer again, never a ' +
  'second execution. 1 to 255 visible ASCII characters.';

const keyHeader = (name: string, required: boolean) => ({
  name,
  in: 'header',
  required,
  description: KEY_DESCRIPTION,
  schema: { type: 'string', minLength: 1, maxLength: 255 },
});

const replayed = {
  'Idempotent-Replayed': {
    description: 'true when this answer is a replay of the stored one',
    schema: { type: 'string', enum: ['true'] },
  },
};

const retryAfter = {
  'Retry-After': {
    description: 'Seconds to wait before retrying with the same key',
    schema: { type: 'integer', minimum: 0 },
  },
};

const problem = (status: number, codes: string[]) => ({
  'application/problem+json': {
    schema: {
      type: 'object',
      required: ['type', 'title', 'status', 'detail', 'code'],
      properties: {
        type: { type: 'string', example: `urn:idempotency:${codes[0]}` },
        title: { type: 'string' },
        status: { type: 'integer', example: status },
        detail: { type: 'string' },
        code: { type: 'string', enum: codes },
      },
    },
  },
});

const CONFLICT =
  'Another request with this key is still in progress, or this request lost its lease to ' +
  'another worker; retry with the same key after Retry-After seconds.';

describe('OpenAPI: @Idempotent() routes document themselves for @nestjs/swagger', () => {
  let database: TestDatabase;
  let doc: OpenAPIObject;
  let custom: OpenAPIObject;
  const op = (document: OpenAPIObject, path: string, method: 'post' | 'get' = 'post') => {
    const operation = document.paths[path]?.[method];
    if (!operation) throw new Error(`no ${method} ${path} in the document`);
    return operation;
  };
  const headerNames = (document: OpenAPIObject, path: string) =>
    (op(document, path).parameters ?? [])
      .filter((p) => 'in' in p && p.in === 'header')
      .map((p) => ('name' in p ? p.name : undefined));

  beforeAll(async () => {
    database = await createTestDatabase('openapi');
    doc = await documentOf(database.url, { globalKeys: true }, [
      ChargesController,
      AccountsController,
    ]);
    // Another app in the same process, with another header name, over a shared controller.
    custom = await documentOf(database.url, { globalKeys: true, headerName: 'X-Key' }, [
      AccountsController,
    ]);
  });
  afterAll(async () => {
    await database?.drop();
  });

  it('documents a POST route in full', () => {
    const operation = op(doc, '/charges');
    expect(operation.parameters).toEqual([keyHeader('Idempotency-Key', true)]);
    expect(operation.responses).toEqual({
      '201': { description: '', headers: replayed },
      '400': {
        description:
          'The idempotency key is missing or invalid, the tenant id is invalid, or the request ' +
          'body cannot be read as the JSON its content type announces.',
        content: problem(400, ['key_missing', 'key_invalid', 'tenant_invalid', 'request_invalid']),
      },
      '409': {
        description: CONFLICT,
        headers: retryAfter,
        content: problem(409, ['key_in_progress', 'lease_lost']),
      },
      '422': {
        description:
          'This key was already used with a different request (method, path or body); use a new ' +
          'key for a new operation.',
        content: problem(422, ['key_mismatch']),
      },
      '503': {
        description:
          'Retry later with the same key, after Retry-After seconds: the database is ' +
          'unavailable or rolled the work back for a passing reason, or a dependency is down. ' +
          'Nothing was stored.',
        headers: retryAfter,
        content: problem(503, ['store_unavailable', 'database_transient', 'retry_later']),
      },
    });
  });

  it('documents an optional key as not required, and no key_missing', () => {
    const operation = op(doc, '/charges/optional');
    expect(operation.parameters).toEqual([keyHeader('Idempotency-Key', false)]);
    expect(operation.responses['400']).toMatchObject({
      description:
        'The idempotency key is invalid, the tenant id is invalid, or the request body cannot ' +
        'be read as the JSON its content type announces.',
      content: problem(400, ['key_invalid', 'tenant_invalid', 'request_invalid']),
    });
  });

  it('puts the replay header on the 200 of an @HttpCode(200) route, and adds no 201', () => {
    const { responses } = op(doc, '/charges/capture');
    expect(Object.keys(responses).sort()).toEqual(['200', '400', '409', '422', '503']);
    expect(responses['200']).toEqual({ description: '', headers: replayed });
  });

  it.each(['above', 'below'])(
    "keeps the app's own @ApiCreatedResponse() placed %s @Idempotent()",
    (where) => {
      const { responses } = op(doc, `/charges/${where}`);
      expect(responses['201']).toEqual({
        description: 'The charge',
        headers: replayed,
        content: { 'application/json': { schema: { $ref: '#/components/schemas/ChargeDto' } } },
      });
      expect(Object.keys(responses).sort()).toEqual(['201', '400', '409', '422', '503']);
      expect(doc.components?.schemas?.ChargeDto).toEqual({
        type: 'object',
        properties: { id: { type: 'string' } },
        required: ['id'],
      });
    },
  );

  it("merges into the app's own 409 and keeps its own key header, not adding a second", () => {
    const operation = op(doc, '/charges/conflict');
    expect(operation.parameters).toEqual([
      { name: 'idempotency-key', in: 'header', description: 'Mine', schema: { type: 'string' } },
    ]);
    expect(operation.responses['409']).toEqual({
      description: `The charge was already captured\n\n${CONFLICT}`,
      headers: retryAfter,
      content: problem(409, ['key_in_progress', 'lease_lost']),
    });
    expect(operation.responses['201']).toEqual({ description: '', headers: replayed });
  });

  it.each<[string, (string | undefined)[]]>([
    ['/charges/header', ['X-Request-Id']],
    ['/charges/body', []],
  ])('documents the key where keyFrom reads it: %s', (path, names) => {
    expect(headerNames(doc, path)).toEqual(names);
    expect(op(doc, path).responses['422']).toBeDefined();
  });

  it('documents the X-Request-Id header in full', () => {
    expect(op(doc, '/charges/header').parameters).toEqual([keyHeader('X-Request-Id', true)]);
  });

  it('leaves a route without @Idempotent() as swagger makes it', () => {
    const operation = op(doc, '/charges/plain');
    expect(operation.parameters).toEqual([]);
    expect(operation.responses).toEqual({ '201': { description: '' } });
  });

  it('documents the POST of a class-level @Idempotent(), not its GET', () => {
    expect(op(doc, '/accounts').parameters).toEqual([keyHeader('Idempotency-Key', true)]);
    expect(op(doc, '/accounts').responses['201']).toEqual({ description: '', headers: replayed });
    const list = op(doc, '/accounts', 'get');
    expect(list.parameters).toEqual([]);
    expect(list.responses).toEqual({ '200': { description: '' } });
  });

  it("documents the module's headerName, and nothing of another app's", () => {
    expect(op(custom, '/accounts').parameters).toEqual([keyHeader('X-Key', true)]);
    expect(op(custom, '/accounts').responses['409']).toEqual({
      description: CONFLICT,
      headers: retryAfter,
      content: problem(409, ['key_in_progress', 'lease_lost']),
    });
  });
});
