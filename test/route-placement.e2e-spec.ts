import {
  Body,
  Controller,
  Delete,
  Get,
  type INestApplication,
  Injectable,
  Module,
  Patch,
  Post,
  Put,
} from '@nestjs/common';
import { getDataSourceToken, InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { type DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../lib/index.js';
import { ADAPTERS, type AdapterName, bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/** Counts each run of a handler in the database: a replay adds nothing. */
@Injectable()
class Runs {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async record(route: string): Promise<number> {
    const rows = (await this.dataSource.query('INSERT INTO runs (route) VALUES ($1) RETURNING id', [
      route,
    ])) as { id: number }[];
    return rows[0].id;
  }

  async count(route: string): Promise<number> {
    const rows = (await this.dataSource.query(
      'SELECT count(*)::int AS n FROM runs WHERE route = $1',
      [route],
    )) as { n: number }[];
    return rows[0].n;
  }
}

/** `@Idempotent()` on the class: its POST, PATCH and DELETE routes, not its GET or PUT. */
@Controller('accounts')
@Idempotent()
class AccountsController {
  constructor(private readonly runs: Runs) {}

  @Post()
  async create() {
    return { id: await this.runs.record('create') };
  }

  @Patch(':id')
  async rename() {
    return { id: await this.runs.record('rename') };
  }

  @Delete(':id')
  async close() {
    return { id: await this.runs.record('close') };
  }

  @Put(':id')
  async replace() {
    return { id: await this.runs.record('replace') };
  }

  @Get()
  async list() {
    return { runs: await this.runs.count('create') };
  }

  /** Its own options over the class's: the key is optional here. */
  @Post('import')
  @Idempotent({ required: false })
  async import() {
    return { id: await this.runs.record('import') };
  }
}

/** A base controller of the app's (Nest's inheritance recipe): not idempotent itself. */
@Injectable()
class LedgerBase {
  constructor(protected readonly runs: Runs) {}

  @Post()
  async post() {
    return { id: await this.runs.record(`${this.constructor.name}.post`) };
  }
}

/** `@Idempotent()` on the class covers the routes it inherits, its base left as it was. */
@Controller('ledger')
@Idempotent()
class LedgerController extends LedgerBase {}

/** The same base, served without the library. */
@Controller('plain-ledger')
class PlainLedgerController extends LedgerBase {}

/** Keys read from elsewhere than `Idempotency-Key`. */
@Controller('keyed')
class KeyedController {
  constructor(private readonly runs: Runs) {}

  @Post('header')
  @Idempotent({ keyFrom: { header: 'X-Request-Id' } })
  async header() {
    return { id: await this.runs.record('header') };
  }

  @Post('body')
  @Idempotent({ keyFrom: { body: 'meta.requestId' } })
  async body(@Body() body: { amount: number }) {
    return { id: await this.runs.record('body'), amount: body.amount };
  }

  @Post('query')
  @Idempotent({
    keyFrom: {
      name: 'the op query parameter',
      read: (req) => new URL(req.url, 'http://x').searchParams.get('op') ?? undefined,
    },
    fingerprintQuery: true,
  })
  async query() {
    return { id: await this.runs.record('query') };
  }
}

async function startApp(url: string, adapter: AdapterName, controllers: unknown[]) {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url,
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
        logging: false,
      }),
      IdempotencyModule.forRoot({ globalKeys: true }),
    ],
    controllers: controllers as never[],
    providers: [Runs],
  })
  class PlacementModule {}
  return bootstrapTestApp(PlacementModule, adapter);
}

describe.each(ADAPTERS)('where @Idempotent() goes and where keys come from, on %s', (adapter) => {
  let database: TestDatabase;
  let app: INestApplication;
  const http = () => request(app.getHttpServer());

  beforeAll(async () => {
    database = await createTestDatabase(`placement_${adapter}`);
    app = await startApp(database.url, adapter, [
      AccountsController,
      KeyedController,
      LedgerController,
      PlainLedgerController,
    ]);
    const dataSource = app.get<DataSource>(getDataSourceToken());
    await dataSource.query('CREATE TABLE runs (id serial PRIMARY KEY, route text NOT NULL)');
  });
  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  describe('on a controller class', () => {
    it.each([
      ['POST', '/accounts', 'create'],
      ['PATCH', '/accounts/1', 'rename'],
      ['DELETE', '/accounts/1', 'close'],
    ] as const)(
      'makes %s idempotent: a retry replays, the handler ran once',
      async (method, path, route) => {
        const send = () =>
          http()[method.toLowerCase() as 'post'](path).set('Idempotency-Key', `class-${route}`);
        const first = await send();
        expect(first.status).toBeLessThan(300);
        const again = await send();
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.body).toEqual(first.body);
        expect(await app.get(Runs).count(route)).toBe(1);
        const missing = await http()[method.toLowerCase() as 'post'](path);
        expect(missing.status).toBe(400);
        expect(missing.body.code).toBe('key_missing');
      },
    );

    it('leaves GET and PUT alone: no key asked, every call runs', async () => {
      expect((await http().get('/accounts')).status).toBe(200);
      await http().put('/accounts/1').set('Idempotency-Key', 'put-1').expect(200);
      const again = await http().put('/accounts/1').set('Idempotency-Key', 'put-1').expect(200);
      expect(again.headers['idempotent-replayed']).toBeUndefined();
      expect(await app.get(Runs).count('replace')).toBe(2);
    });

    it('covers the routes the class inherits; its base class and a sibling stay as they were', async () => {
      const send = (path: string) => http().post(path).set('Idempotency-Key', 'inherited-1');
      const first = await send('/ledger');
      expect(first.status).toBe(201);
      const again = await send('/ledger');
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.body).toEqual(first.body);
      expect(await app.get(Runs).count('LedgerController.post')).toBe(1);
      // The base class's method is not touched: its other subclass runs each time.
      await send('/plain-ledger').expect(201);
      const plain = await send('/plain-ledger').expect(201);
      expect(plain.headers['idempotent-replayed']).toBeUndefined();
      expect(await app.get(Runs).count('PlainLedgerController.post')).toBe(2);
    });

    it('lets a method’s own options override the class’s', async () => {
      await http().post('/accounts/import').expect(201);
      await http().post('/accounts/import').expect(201);
      expect(await app.get(Runs).count('import')).toBe(2); // no key, not required: runs each time
      const keyed = await http().post('/accounts/import').set('Idempotency-Key', 'imp-1');
      const again = await http().post('/accounts/import').set('Idempotency-Key', 'imp-1');
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.body).toEqual(keyed.body);
    });
  });

  describe('keyFrom', () => {
    it('reads another header; Idempotency-Key is not it', async () => {
      const first = await http().post('/keyed/header').set('X-Request-Id', 'h-1');
      const again = await http().post('/keyed/header').set('X-Request-Id', 'h-1');
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.body).toEqual(first.body);
      const wrong = await http().post('/keyed/header').set('Idempotency-Key', 'h-2');
      expect(wrong.status).toBe(400);
      expect(wrong.body.detail).toBe(
        'The X-Request-Id header is required on this route; send one key per operation.',
      );
    });

    it('reads a field of the body; the rest of the body is still fingerprinted', async () => {
      const send = (amount: number, requestId: unknown = 'b-1') =>
        http().post('/keyed/body').send({ amount, meta: { requestId } });
      const first = await send(5);
      expect(first.status).toBe(201);
      const again = await send(5);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.body).toEqual(first.body);
      expect((await send(6)).status).toBe(422);
      expect(await app.get(Runs).count('body')).toBe(1);
    });

    it.each([
      [
        { amount: 1 },
        400,
        'The meta.requestId field of the body is required on this route; send one key per operation.',
      ],
      [{ meta: { requestId: 7 } }, 201, undefined],
      [
        { meta: { requestId: { id: 'x' } } },
        400,
        'The meta.requestId field of the body is invalid: it is an object, not a string.',
      ],
      [
        { meta: { requestId: '' } },
        400,
        'The meta.requestId field of the body is invalid: it is empty.',
      ],
      [
        { meta: { requestId: 'a b' } },
        400,
        'The meta.requestId field of the body is invalid: it must be visible ASCII characters only (no spaces).',
      ],
    ])('answers a body key %j with %s', async (body, status, detail) => {
      const res = await http().post('/keyed/body').send(body);
      expect(res.status).toBe(status);
      if (detail) expect(res.body.detail).toBe(detail);
    });

    it('reads a key through a function, named in its errors', async () => {
      const first = await http().post('/keyed/query?op=q-1');
      const again = await http().post('/keyed/query?op=q-1');
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.body).toEqual(first.body);
      const missing = await http().post('/keyed/query');
      expect(missing.status).toBe(400);
      expect(missing.body.detail).toBe(
        'The op query parameter is required on this route; send one key per operation.',
      );
    });
  });
});

describe('@Idempotent() where it cannot work fails the start-up', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase('placement_fail');
  });
  afterAll(() => database?.drop());

  @Controller('reads')
  class ReadsController {
    @Get()
    @Idempotent()
    read() {
      return {};
    }
  }

  @Injectable()
  class ChargesService {
    @Idempotent()
    charge() {
      return {};
    }
  }

  @Controller('events')
  class EventsController {
    /** As `@EventPattern('charge.created')` marks it, read by name. */
    @Idempotent()
    onCharge() {
      return {};
    }
  }
  Reflect.defineMetadata(
    'microservices:pattern',
    ['charge.created'],
    EventsController.prototype.onCharge,
  );

  @Controller('helpers')
  class HelperController {
    @Idempotent()
    helper() {
      return {};
    }
  }

  it.each<[string, unknown[], string]>([
    ['on a GET route', [ReadsController], '@Idempotent() on ReadsController.read: GET is safe'],
    [
      'on a provider’s method',
      [ChargesService],
      '@Idempotent() on ChargesService.charge: not a controller',
    ],
    [
      'on a message handler',
      [EventsController],
      '@Idempotent() on EventsController.onCharge: a message handler',
    ],
    [
      'on a controller method that is not a route',
      [HelperController],
      '@Idempotent() on HelperController.helper: not a route handler',
    ],
  ])('%s', async (_name, classes, message) => {
    const isProvider = classes[0] === ChargesService;
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: database.url, logging: false }),
        IdempotencyModule.forRoot({ globalKeys: true }),
      ],
      controllers: (isProvider ? [] : classes) as never[],
      providers: (isProvider ? classes : []) as never[],
    })
    class FailingModule {}
    await expect(bootstrapTestApp(FailingModule)).rejects.toThrow(message);
  });
});
