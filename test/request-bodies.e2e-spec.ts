import {
  Body,
  Controller,
  type INestApplication,
  type LoggerService,
  Module,
  Post,
  Req,
  UploadedFile,
  UseInterceptors,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ExpressAdapter,
  FileInterceptor,
  type NestExpressApplication,
} from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import fastifyMultipart from '@fastify/multipart';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { type DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../lib/index.js';
import { type AdapterName, ADAPTERS } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { SIDE_EFFECTS_DDL } from './support/test-app.js';

/** What multer gives a handler for one file (the fields this test reads). */
interface MulterFile {
  fieldname: string;
  originalname: string;
  size: number;
}

/** What `@fastify/multipart` (`attachFieldsToBody: true`) puts in the body for one file. */
interface FastifyFilePart {
  filename: string;
  _buf: Buffer;
}

abstract class Recording {
  constructor(protected readonly dataSource: DataSource) {}

  protected async record(route: string): Promise<number> {
    const rows = (await this.dataSource.query(
      'INSERT INTO side_effects (route) VALUES ($1) RETURNING id',
      [route],
    )) as { id: number }[];
    return rows[0].id;
  }
}

/** Bodies every adapter parses the same way: forms, text, bytes, none. */
@Controller()
class BodiesController extends Recording {
  constructor(@InjectDataSource() dataSource: DataSource) {
    super(dataSource);
  }

  @Post('form')
  @Idempotent()
  async form(@Body() body: unknown) {
    return { id: await this.record('form'), body };
  }

  @Post('text')
  @Idempotent()
  async text(@Body() body: unknown) {
    return { id: await this.record('text'), length: String(body).length };
  }

  @Post('bytes')
  @Idempotent()
  async bytes(@Body() body: Buffer) {
    return { id: await this.record('bytes'), length: body.length };
  }

  @Post('empty')
  @Idempotent()
  async empty() {
    return { id: await this.record('empty') };
  }

  /** A body no parser of the app reads: the library cannot see it. */
  @Post('unread')
  @Idempotent()
  async unread() {
    return { id: await this.record('unread') };
  }
}

/** Uploads through multer: `@Idempotent()` above `FileInterceptor`, so multer runs first. */
@Controller()
class ExpressUploadController extends Recording {
  constructor(@InjectDataSource() dataSource: DataSource) {
    super(dataSource);
  }

  @Post('upload')
  @Idempotent()
  @UseInterceptors(FileInterceptor('file'))
  async upload(@UploadedFile() file: MulterFile, @Body() body: { note?: string }) {
    const id = await this.record('upload');
    return { id, filename: file.originalname, size: file.size, note: body.note ?? null };
  }

  /** The other order: the library's interceptor runs before multer has read the upload. */
  @Post('upload-unparsed')
  @UseInterceptors(FileInterceptor('file'))
  @Idempotent()
  async unparsed(@UploadedFile() file: MulterFile) {
    const id = await this.record('upload-unparsed');
    return { id, filename: file.originalname };
  }
}

/** Uploads through `@fastify/multipart`, its parts attached to the body. */
@Controller()
class FastifyUploadController extends Recording {
  constructor(@InjectDataSource() dataSource: DataSource) {
    super(dataSource);
  }

  @Post('upload')
  @Idempotent()
  async upload(@Req() req: { body?: { file?: FastifyFilePart; note?: { value: string } } }) {
    const id = await this.record('upload');
    const file = req.body?.file;
    return {
      id,
      filename: file?.filename,
      size: file?._buf.length,
      note: req.body?.note?.value ?? null,
    };
  }

  @Post('upload-unparsed')
  @Idempotent()
  async unparsed() {
    return { id: await this.record('upload-unparsed') };
  }
}

/** The app's warnings, where the library says what to change for a body it cannot see. */
class RecordingLogger implements LoggerService {
  readonly warnings: string[] = [];
  log(): void {}
  error(): void {}
  warn(message: unknown, ...rest: unknown[]): void {
    this.warnings.push([message, ...rest].map((part) => String(part)).join(' '));
  }
}

async function createBodiesApp(
  databaseUrl: string,
  adapter: AdapterName,
  logger: LoggerService,
  multipart: { attachFieldsToBody?: true } = { attachFieldsToBody: true },
): Promise<INestApplication> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: databaseUrl,
        migrations: IDEMPOTENCY_MIGRATIONS,
        migrationsRun: true,
        logging: false,
      }),
      IdempotencyModule.forRoot({ tenant: () => '1', replayCacheSize: 0 }),
    ],
    controllers: [
      BodiesController,
      adapter === 'express' ? ExpressUploadController : FastifyUploadController,
    ],
  })
  class BodiesAppModule {}

  if (adapter === 'express') {
    const app = await NestFactory.create<NestExpressApplication>(
      BodiesAppModule,
      new ExpressAdapter(),
      {
        rawBody: true,
        logger,
        abortOnError: false,
      },
    );
    // Express parses neither text nor bytes unless asked to.
    app.useBodyParser('text');
    app.useBodyParser('raw');
    await app.init();
    return app;
  }
  const fastify = new FastifyAdapter();
  const app = await NestFactory.create(BodiesAppModule, fastify, {
    rawBody: true,
    logger,
    abortOnError: false,
  });
  // Fastify parses text/plain itself, bytes once asked to.
  fastify.useBodyParser('application/octet-stream', true);
  await fastify.register(fastifyMultipart as never, multipart as never);
  await app.init();
  await (fastify.getInstance() as { ready(): Promise<void> }).ready();
  return app;
}

describe.each(ADAPTERS)('request bodies in the fingerprint on %s', (adapter) => {
  let database: TestDatabase;
  let db: Client;
  let app: INestApplication;
  const logger = new RecordingLogger();

  beforeAll(async () => {
    database = await createTestDatabase(`bodies_${adapter}`);
    db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(SIDE_EFFECTS_DDL);
    app = await createBodiesApp(database.url, adapter, logger);
  });
  afterAll(async () => {
    await app?.close();
    await db?.end();
    await database?.drop();
  });

  const post = (path: string, key: string) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key);
  const executions = async (route: string) =>
    Number(
      (
        await db.query<{ n: string }>('SELECT count(*) AS n FROM side_effects WHERE route = $1', [
          route,
        ])
      ).rows[0].n,
    );
  let keys = 0;
  const newKey = (name: string) => `${adapter}-${name}-${++keys}`;

  /** The answer to a key reused with another request. */
  function expectMismatch(res: request.Response) {
    expect(res.status).toBe(422);
    expect(res.headers['content-type']).toMatch('application/problem+json');
    expect(res.body).toMatchObject({ code: 'key_mismatch', status: 422 });
  }
  /** The answer to a body the library cannot see, before anything is claimed. */
  function expectUnread(res: request.Response, mediaType: string) {
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toMatch('application/problem+json');
    expect(res.body).toMatchObject({
      code: 'request_invalid',
      status: 400,
      detail: `The request body cannot be fingerprinted: no body parser read its ${mediaType} body.`,
    });
  }
  function expectReplay(res: request.Response, first: request.Response) {
    expect(res.status).toBe(first.status);
    expect(res.headers['idempotent-replayed']).toBe('true');
    expect(res.text).toBe(first.text);
  }

  describe('multipart/form-data uploads', () => {
    type Upload = { bytes: string; filename: string; type: string; note: string };
    const base: Upload = { bytes: 'first file', filename: 'a.txt', type: 'text/plain', note: 'n' };
    const upload = (key: string, u: Upload) =>
      post('/upload', key)
        .field('note', u.note)
        .attach('file', Buffer.from(u.bytes), { filename: u.filename, contentType: u.type });

    it('the same upload sent again (another boundary) is replayed, the handler runs once', async () => {
      const key = newKey('upload-same');
      const before = await executions('upload');
      const first = await upload(key, base);
      expect(first.status).toBe(201);
      expect(first.body).toMatchObject({ filename: 'a.txt', size: 10, note: 'n' });
      expectReplay(await upload(key, base), first);
      expect(await executions('upload')).toBe(before + 1);
    });

    it.each<[string, Partial<Upload>]>([
      ['other bytes of the same length', { bytes: 'other file' }],
      ['another file name', { filename: 'b.txt' }],
      ['another media type', { type: 'application/octet-stream' }],
      ['another text field', { note: 'm' }],
    ])('%s with the same key: 422 key_mismatch, not a replay', async (_name, change) => {
      const key = newKey('upload-other');
      const before = await executions('upload');
      expect((await upload(key, base)).status).toBe(201);
      expectMismatch(await upload(key, { ...base, ...change }));
      expect(await executions('upload')).toBe(before + 1);
    });

    it('an upload no parser read yet: 400 request_invalid, nothing runs, the log says why', async () => {
      const unparsed = await createBodiesApp(database.url, adapter, logger, {});
      try {
        const res = await request(unparsed.getHttpServer())
          .post('/upload-unparsed')
          .set('Idempotency-Key', newKey('unparsed'))
          .attach('file', Buffer.from('bytes'), { filename: 'a.txt', contentType: 'text/plain' });
        expectUnread(res, 'multipart/form-data');
        expect(await executions('upload-unparsed')).toBe(0);
        const advice =
          adapter === 'express'
            ? 'write @Idempotent() above @UseInterceptors(FileInterceptor(...))'
            : 'register @fastify/multipart with attachFieldsToBody: true';
        expect(logger.warnings.join('\n')).toContain(advice);
      } finally {
        await unparsed.close();
      }
    });
  });

  describe('application/x-www-form-urlencoded', () => {
    const form = (key: string, body: string) =>
      post('/form', key).set('Content-Type', 'application/x-www-form-urlencoded').send(body);

    it.each([
      ['the parameters in another order', 'a=1&b=two&c=3', 'c=3&a=1&b=two'],
      ['a byte spelled %XX, a space spelled +', 'name=A+B&x=%2F', 'x=/&name=%41%20B'],
      ['empty sequences between parameters', 'a=1&b=2', '&a=1&&b=2&'],
      ['repeated names in their order, others moved', 'a=1&b=x&a=2', 'b=x&a=1&a=2'],
    ])('%s: the same request, replayed', async (_name, body, again) => {
      const key = newKey('form-same');
      const before = await executions('form');
      const first = await form(key, body);
      expect(first.status).toBe(201);
      expectReplay(await form(key, again), first);
      expect(await executions('form')).toBe(before + 1);
    });

    it.each([
      ['another value', 'a=1&b=2', 'a=1&b=3'],
      ['a repeated name in another order', 'a=1&a=2', 'a=2&a=1'],
      ['a parameter more', 'a=1', 'a=1&b=2'],
      ['%2B (a plus) is not + (a space)', 'a=%2B', 'a=+'],
    ])('%s: 422 key_mismatch', async (_name, body, other) => {
      const key = newKey('form-other');
      const before = await executions('form');
      expect((await form(key, body)).status).toBe(201);
      expectMismatch(await form(key, other));
      expect(await executions('form')).toBe(before + 1);
    });
  });

  describe.each([
    ['text/plain', '/text', 'text'],
    ['application/octet-stream', '/bytes', 'bytes'],
  ])('%s: exact bytes', (type, path, route) => {
    const send = (key: string, body: string) =>
      post(path, key).set('Content-Type', type).send(Buffer.from(body));

    it('the same bytes: replayed', async () => {
      const key = newKey(`${route}-same`);
      const before = await executions(route);
      const first = await send(key, 'a=1 & b=2');
      expect(first.status).toBe(201);
      expectReplay(await send(key, 'a=1 & b=2'), first);
      expect(await executions(route)).toBe(before + 1);
    });

    it('other bytes, even white space: 422 key_mismatch', async () => {
      const key = newKey(`${route}-other`);
      expect((await send(key, 'a=1 & b=2')).status).toBe(201);
      expectMismatch(await send(key, 'a=1 &  b=2'));
    });
  });

  describe('no body', () => {
    it('twice: replayed; then with a body: 422 key_mismatch', async () => {
      const key = newKey('empty');
      const before = await executions('empty');
      const first = await post('/empty', key);
      expect(first.status).toBe(201);
      expectReplay(await post('/empty', key), first);
      expectMismatch(await post('/empty', key).set('Content-Type', 'text/plain').send('x'));
      expect(await executions('empty')).toBe(before + 1);
    });
  });

  if (adapter === 'express') {
    it('a body no parser read (application/xml): 400 request_invalid, nothing runs', async () => {
      const res = await post('/unread', newKey('unread'))
        .set('Content-Type', 'application/xml')
        .send('<a>1</a>');
      expectUnread(res, 'application/xml');
      expect(await executions('unread')).toBe(0);
      expect(logger.warnings.join('\n')).toContain(
        'BodiesController.unread: refused a request (400), no body parser read its ' +
          'application/xml body, so the fingerprint would leave its body out; if the route ' +
          "takes such bodies: register a parser for it (on Express, app.useBodyParser('text') " +
          "or 'raw')",
      );
    });
  }
});
