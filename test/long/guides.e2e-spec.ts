import { execFile, execFileSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { promisify } from 'node:util';
import { dirname, join } from 'node:path';
import amqplib from 'amqplib';
import pg from 'pg';
import { RABBITMQ_URL, until } from '../support/brokers.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import {
  APP_COMPILER_OPTIONS,
  compile,
  installAsNamed,
  namedInstalls,
  packedPackage,
  root,
  startApp,
  type StartedApp,
} from '../support/packed-app.js';

/**
 * Every guide that shows an app, as a reader copies it: its files (docs/snippets, which the
 * pages show byte for byte: test/docs-snippets.e2e-spec.ts) placed where the page says, in a
 * fresh ES module app whose node_modules hold the packed package and what the page's
 * `npm install` lines install, and nothing more; all compiled by one `tsc`; each started on a
 * database of its own, and sent the page's own request twice: the page's answer, then the
 * same bytes as a replay.
 */

const execFileAsync = promisify(execFile);

/** What `nest new` gives an app before any guide: the packages every guide takes as there. */
const NEST_APP = [
  '@nestjs/common',
  '@nestjs/core',
  '@nestjs/platform-express',
  'reflect-metadata',
  'rxjs',
];

const page = (path: string) => readFileSync(join(root, path), 'utf8');

interface GuideApp {
  /** The app's folder, and the case's name. */
  name: string;
  /** The pages whose `npm install` lines the reader ran (with the README's for TypeORM apps). */
  pages: string[];
  /** The app's files: where each goes, and which snippet (or harness file) it is. */
  files: Record<string, string>;
  /** SQL the page says to apply before the app starts, in order (paths from the repository). */
  sql?: string[];
}

const QUICK_START: Record<string, string> = {
  'src/order.entity.ts': 'docs/snippets/quick-start/order.entity.ts',
  'src/create-orders.migration.ts': 'docs/snippets/quick-start/create-orders.migration.ts',
  'src/orders.controller.ts': 'docs/snippets/quick-start/orders.controller.ts',
  'src/app.module.ts': 'docs/snippets/quick-start/app.module.ts',
  'src/main.ts': 'docs/snippets/quick-start/main.ts',
};
const FASTIFY_MAIN = 'docs/snippets/quick-start/fastify.main.ts';
/** The library's tables as plain SQL, from the installed package (the pages' `psql -f`). */
const SCHEMA_SQL = 'node_modules/nestjs-idempotency-pg/migrations/schema.sql';

const GUIDES: GuideApp[] = [
  { name: 'quick-start', pages: ['README.md'], files: QUICK_START },
  {
    name: 'quick-start-fastify',
    pages: ['README.md', 'docs/guides/getting-started.md'],
    files: { ...QUICK_START, 'src/main.ts': FASTIFY_MAIN },
  },
  {
    name: 'prisma',
    pages: ['docs/guides/prisma.md'],
    files: {
      'prisma/schema.prisma': 'docs/snippets/prisma/prisma/schema.prisma',
      'scripts/prisma-generate.mjs': 'docs/snippets/prisma/scripts/prisma-generate.mjs',
      'src/prisma.service.ts': 'docs/snippets/prisma/src/prisma.service.ts',
      'src/app.module.ts': 'docs/snippets/prisma/src/app.module.ts',
      'src/orders.service.ts': 'docs/snippets/prisma/src/orders.service.ts',
      'src/orders.controller.ts': 'docs/snippets/prisma/src/orders.controller.ts',
      'src/shipping.service.ts': 'docs/snippets/prisma/src/shipping.service.ts',
      'src/main.ts': 'docs/snippets/quick-start/main.ts',
    },
    sql: [SCHEMA_SQL, 'docs/snippets/prisma/orders.sql'],
  },
  {
    name: 'drizzle',
    pages: ['docs/guides/drizzle.md'],
    files: {
      'src/database.ts': 'docs/snippets/drizzle/database.ts',
      'src/app.module.ts': 'docs/snippets/drizzle/app.module.ts',
      'src/schema.ts': 'docs/snippets/drizzle/schema.ts',
      'src/orders.service.ts': 'docs/snippets/drizzle/orders.service.ts',
      'src/orders.controller.ts': 'docs/snippets/drizzle/orders.controller.ts',
      'src/warehouse.ts': 'docs/snippets/drizzle/warehouse.ts',
      'src/main.ts': 'docs/snippets/quick-start/main.ts',
    },
    sql: [SCHEMA_SQL, 'docs/snippets/drizzle/orders.sql'],
  },
  {
    name: 'kysely',
    pages: ['docs/guides/kysely.md'],
    files: {
      'src/database.ts': 'docs/snippets/kysely/database.ts',
      'src/app.module.ts': 'docs/snippets/kysely/app.module.ts',
      'src/orders.controller.ts': 'docs/snippets/kysely/orders.controller.ts',
      'src/orders.service.ts': 'docs/snippets/kysely/orders.service.ts',
      'src/main.ts': 'docs/snippets/quick-start/main.ts',
    },
    sql: [SCHEMA_SQL, 'docs/snippets/kysely/orders.sql'],
  },
  {
    name: 'graphql-apollo',
    pages: ['README.md', 'docs/guides/graphql.md#set up'],
    files: {
      'src/app.module.ts': 'docs/snippets/graphql/app.module.ts',
      'src/transfer.entity.ts': 'docs/snippets/graphql/transfer.entity.ts',
      'src/create-transfers.migration.ts': 'docs/snippets/graphql/create-transfers.migration.ts',
      'src/transfers.resolver.ts': 'docs/snippets/graphql/transfers.resolver.ts',
      'src/main.ts': 'docs/snippets/quick-start/main.ts',
    },
  },
  {
    name: 'graphql-mercurius',
    pages: ['README.md', 'docs/guides/graphql.md#mercurius'],
    files: {
      'src/app.module.ts': 'docs/snippets/graphql/mercurius.module.ts',
      'src/transfer.entity.ts': 'docs/snippets/graphql/transfer.entity.ts',
      'src/create-transfers.migration.ts': 'docs/snippets/graphql/create-transfers.migration.ts',
      'src/transfers.resolver.ts': 'docs/snippets/graphql/transfers.resolver.ts',
      'src/main.ts': FASTIFY_MAIN,
    },
  },
  {
    name: 'consumers',
    pages: ['README.md', 'docs/guides/consumers.md'],
    files: {
      'src/app.module.ts': 'docs/snippets/consumers/app.module.ts',
      'src/settlement.entity.ts': 'docs/snippets/consumers/settlement.entity.ts',
      'src/create-settlements.migration.ts':
        'docs/snippets/consumers/create-settlements.migration.ts',
      'src/settlements.consumer.ts': 'docs/snippets/consumers/settlements.consumer.ts',
      'src/main.ts': 'docs/snippets/consumers/main.ts',
    },
  },
  {
    name: 'schedule',
    pages: ['README.md', 'docs/guides/schedule.md'],
    files: {
      'src/settlement.entity.ts': 'docs/snippets/schedule/settlement.entity.ts',
      'src/settlement.task.ts': 'docs/snippets/schedule/settlement.task.ts',
      'src/app.module.ts': 'docs/snippets/schedule/app.module.ts',
      'src/main.ts': 'docs/snippets/schedule/main.ts',
    },
  },
  {
    name: 'phases',
    pages: ['README.md'],
    files: {
      'src/charge.entity.ts': 'docs/snippets/phases/charge.entity.ts',
      'src/create-charges.migration.ts': 'docs/snippets/phases/create-charges.migration.ts',
      'src/psp.client.ts': 'docs/snippets/phases/psp.client.ts',
      'src/charges.service.ts': 'docs/snippets/phases/charges.service.ts',
      'src/charges.controller.ts': 'docs/snippets/phases/charges.controller.ts',
      'src/app.module.ts': 'docs/snippets/phases/app.module.ts',
      'src/main.ts': 'docs/snippets/quick-start/main.ts',
    },
  },
  {
    // The guide's function, in a script of the test's that calls it (client.md: "a function
    // of your app's"), against the phases guide's app.
    name: 'client',
    pages: ['docs/guides/client.md'],
    files: {
      'src/checkout.ts': 'docs/snippets/client/checkout.ts',
      'src/main.ts': 'test/support/guides/client/main.ts',
    },
  },
];

/**
 * The packages a page installs, or one section of it (`page.md#word`: the `npm install` lines
 * under the headings whose text has that word, up to the next heading; a `#` line inside a
 * code block is no heading).
 */
function installs(reference: string): string[] {
  const [path, word] = reference.split('#');
  if (!word) return namedInstalls(page(path));
  let inBlock = false;
  let inSection = false;
  const kept: string[] = [];
  for (const line of page(path).split('\n')) {
    if (line.startsWith('```')) inBlock = !inBlock;
    else if (!inBlock && /^#+ /.test(line)) inSection = line.toLowerCase().includes(word);
    if (inSection) kept.push(line);
  }
  return namedInstalls(kept.join('\n'));
}

describe('every guide, as copied, in a fresh app on the packed package', () => {
  let work: string;
  /** tsc's errors, by app: its files' lines of the one compile of every app. */
  const errors = new Map<string, string[]>();
  /** What went wrong putting an app together (a snippet missing, a failed generate). */
  const assembly = new Map<string, string[]>();
  const databases: TestDatabase[] = [];
  const running: StartedApp[] = [];
  const servers: Server[] = [];

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'idem-guides-'));
    const { tarball } = await packedPackage(work);
    for (const guide of GUIDES) {
      const app = join(work, 'apps', guide.name);
      const problems: string[] = [];
      mkdirSync(join(app, 'src'), { recursive: true });
      writeFileSync(
        join(app, 'package.json'),
        JSON.stringify({ name: guide.name, type: 'module' }),
      );
      for (const [to, from] of Object.entries(guide.files)) {
        if (!existsSync(join(root, from))) {
          problems.push(`${from} does not exist`);
          continue;
        }
        mkdirSync(dirname(join(app, to)), { recursive: true });
        cpSync(join(root, from), join(app, to));
      }
      try {
        installAsNamed(app, tarball, [...NEST_APP, ...guide.pages.flatMap(installs)]);
      } catch (error) {
        problems.push(String(error));
      }
      assembly.set(guide.name, problems);
    }
    // Prisma's client, generated as the guide says, before the compile that imports it.
    const prisma = join(work, 'apps', 'prisma');
    if (existsSync(join(prisma, 'scripts', 'prisma-generate.mjs'))) {
      try {
        execFileSync('node', ['--preserve-symlinks', 'scripts/prisma-generate.mjs'], {
          cwd: prisma,
          stdio: 'pipe',
        });
      } catch (error) {
        const { stdout, stderr } = error as { stdout: Buffer; stderr: Buffer };
        assembly.get('prisma')!.push(`prisma generate: ${stdout}${stderr}`);
      }
    }
    // One compile for every app: tsc's start-up is most of a small app's compile.
    writeFileSync(join(work, 'package.json'), JSON.stringify({ type: 'module' }));
    writeFileSync(
      join(work, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          ...APP_COMPILER_OPTIONS,
          preserveSymlinks: true,
          rootDir: 'apps',
          outDir: 'dist',
        },
        include: ['apps/*/src/**/*.ts'],
      }),
    );
    const output = compile(work);
    // Each app's compiled files find the app's own node_modules, as in its dist/.
    for (const guide of GUIDES) {
      mkdirSync(join(work, 'dist', guide.name), { recursive: true });
      symlinkSync(
        join(work, 'apps', guide.name, 'node_modules'),
        join(work, 'dist', guide.name, 'node_modules'),
      );
    }
    for (const guide of GUIDES) errors.set(guide.name, []);
    for (const line of output.split('\n').filter((line) => /error TS\d+/.test(line))) {
      const name = /(?:^|\/)apps\/([^/]+)\//.exec(line)?.[1];
      errors.get(name ?? GUIDES[0].name)?.push(line);
    }
  }, 300_000);

  afterAll(async () => {
    for (const app of running) app.child.kill('SIGKILL');
    for (const server of servers) server.close();
    await Promise.all(databases.map((database) => database.drop()));
    if (work) rmSync(work, { recursive: true, force: true });
  });

  /** The app compiled, on a fresh database with the page's SQL applied, started. */
  async function started(
    name: string,
    env: NodeJS.ProcessEnv = {},
    ready?: (output: string) => string | undefined,
  ): Promise<StartedApp> {
    expect([name, ...assembly.get(name)!]).toEqual([name]);
    expect([name, ...errors.get(name)!]).toEqual([name]);
    const guide = GUIDES.find((candidate) => candidate.name === name)!;
    const app = join(work, 'apps', name);
    const database = await createTestDatabase(`guide_${name}`);
    databases.push(database);
    if (guide.sql) {
      const client = new pg.Client({ connectionString: database.url });
      await client.connect();
      try {
        for (const file of guide.sql) {
          await client.query(
            readFileSync(
              file.startsWith('node_modules/') ? join(app, file) : join(root, file),
              'utf8',
            ),
          );
        }
      } finally {
        await client.end();
      }
    }
    const start = startApp(
      join(work, 'dist', name, 'src', 'main.js'),
      app,
      {
        ...process.env,
        ...env,
        DATABASE_URL: database.url,
        PORT: '0',
        NO_COLOR: '1',
        NODE_OPTIONS: '--preserve-symlinks',
      },
      ready,
    );
    const result = await start;
    running.push(result);
    return result;
  }

  /** A server of the test's on 127.0.0.1 (a PSP, a warehouse), answering with `answer`. */
  async function fake(
    answer: (body: string, key: string) => unknown,
  ): Promise<{ url: string; calls: string[] }> {
    const calls: string[] = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        const key = String(req.headers['idempotency-key']);
        calls.push(`${req.method} ${req.url} ${key}`);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(answer(body, key)));
      });
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, calls };
  }

  /** Sends the same request twice: the first answer, then its replay. */
  async function twice(url: string, init: RequestInit) {
    const first = await fetch(url, init);
    const firstBody = await first.text();
    const replay = await fetch(url, init);
    const replayBody = await replay.text();
    return {
      first: {
        status: first.status,
        replayed: first.headers.get('idempotent-replayed'),
        body: firstBody,
      },
      replay: {
        status: replay.status,
        replayed: replay.headers.get('idempotent-replayed'),
        body: replayBody,
      },
    };
  }

  const json = (key: string, body: unknown, headers: Record<string, string> = {}): RequestInit => ({
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
    body: JSON.stringify(body),
  });

  async function count(name: string, sql: string): Promise<number> {
    const database = databases.find((candidate) =>
      candidate.name.startsWith(`idem_guide_${name.replace(/-/g, '_')}_`),
    )!;
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      return Number((await client.query<{ count: string }>(sql)).rows[0].count);
    } finally {
      await client.end();
    }
  }

  /** The README's request, on the app of `name` (the quick start's files). */
  async function quickStart(name: string) {
    const app = await started(name);
    const { first, replay } = await twice(
      `${app.url}/orders`,
      json('8e03978e-40d5', { amount: 100 }, { 'x-tenant-id': '1' }),
    );
    expect([first.status, first.replayed]).toEqual([201, null]);
    expect(JSON.parse(first.body)).toEqual({ id: expect.any(String), amount: 100 });
    expect(replay).toEqual({ ...first, replayed: 'true' });
    // What the README says of the other answers.
    const problem = async (init: RequestInit) => {
      const response = await fetch(`${app.url}/orders`, init);
      return [response.status, ((await response.json()) as { code: string }).code];
    };
    const body = JSON.stringify({ amount: 100 });
    expect(await problem(json('8e03978e-40d5', { amount: 5 }, { 'x-tenant-id': '1' }))).toEqual([
      422,
      'key_mismatch',
    ]);
    expect(
      await problem({
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-tenant-id': '1' },
        body,
      }),
    ).toEqual([400, 'key_missing']);
    expect(
      await problem({
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'k2' },
        body,
      }),
    ).toEqual([400, 'tenant_invalid']);
    expect(await count(name, 'SELECT count(*) FROM orders')).toBe(1);
  }

  it("the README's quick start: 201, the same bytes replayed; 422, 400 key_missing, 400 tenant_invalid", async () => {
    await quickStart('quick-start');
  }, 60_000);

  it("the README's quick start without DATABASE_URL: says what to set", () => {
    expect(errors.get('quick-start')).toEqual([]);
    const env: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '--preserve-symlinks' };
    delete env.DATABASE_URL;
    const app = join(work, 'apps', 'quick-start');
    let result: { status: number; stderr: string };
    try {
      execFileSync('node', [join(work, 'dist', 'quick-start', 'src', 'main.js')], {
        cwd: app,
        env,
        stdio: 'pipe',
      });
      result = { status: 0, stderr: '' };
    } catch (error) {
      const { status, stderr } = error as { status: number; stderr: Buffer };
      result = { status, stderr: stderr.toString().trim() };
    }
    expect(result).toEqual({
      status: 1,
      stderr: 'Set DATABASE_URL, e.g. postgres://user:password@localhost:5432/app',
    });
  }, 60_000);

  it("the quick start on Fastify (getting-started's main.ts): the same 201 and replay", async () => {
    await quickStart('quick-start-fastify');
  }, 60_000);

  /** The orders guides: POST /orders, then POST /orders/:id/ship through a fake warehouse. */
  async function ordersGuide(name: string, ship: boolean) {
    const warehouse = await fake(() => ({ trackingNumber: 'TRK-1' }));
    const app = await started(name, { WAREHOUSE_URL: warehouse.url });
    const placed = await twice(`${app.url}/orders`, json('order-1', { sku: 'book', quantity: 2 }));
    expect([placed.first.status, placed.first.replayed]).toEqual([201, null]);
    expect(JSON.parse(placed.first.body)).toMatchObject({
      sku: 'book',
      quantity: 2,
      status: 'placed',
    });
    expect(placed.replay).toEqual({ ...placed.first, replayed: 'true' });
    expect(await count(name, 'SELECT count(*) FROM order_events')).toBe(1);
    if (!ship) return;
    const { id } = JSON.parse(placed.first.body) as { id: number };
    const shipped = await twice(`${app.url}/orders/${id}/ship`, json('ship-1', {}));
    expect([shipped.first.status, shipped.first.replayed]).toEqual([200, null]);
    expect(JSON.parse(shipped.first.body)).toEqual({
      id: Number(id),
      status: 'shipped',
      trackingNumber: 'TRK-1',
    });
    expect(shipped.replay).toEqual({ ...shipped.first, replayed: 'true' });
    expect(warehouse.calls).toEqual([`POST /shipments ${warehouse.calls[0]?.split(' ')[2]}`]);
  }

  it('prisma.md: the client generated where the snippets import it; 201 and replay; ship: 200 and replay', async () => {
    await ordersGuide('prisma', true);
  }, 60_000);

  it('drizzle.md: 201 and replay; ship: 200 and replay', async () => {
    await ordersGuide('drizzle', true);
  }, 60_000);

  it('kysely.md: 201 and replay', async () => {
    await ordersGuide('kysely', false);
  }, 60_000);

  /** The graphql page's mutation: its answer, then the same data with the replay marker. */
  async function graphqlGuide(name: string) {
    const app = await started(name);
    const { first, replay } = await twice(
      `${app.url}/graphql`,
      json(
        'transfer-1',
        { query: 'mutation { createTransfer(amount: 100, to: "acct_1") { id amount to } }' },
        { 'x-tenant-id': '1' },
      ),
    );
    expect([first.status, JSON.parse(first.body)]).toEqual([
      200,
      { data: { createTransfer: { id: 1, amount: 100, to: 'acct_1' } } },
    ]);
    expect([replay.status, JSON.parse(replay.body)]).toEqual([
      200,
      { ...JSON.parse(first.body), extensions: { idempotency: { replayed: ['createTransfer'] } } },
    ]);
    // The data's bytes as first sent; the replay adds its marker after them.
    expect(replay.body.startsWith(first.body.trimEnd().slice(0, -1))).toBe(true);
    expect(await count(name, 'SELECT count(*) FROM transfers')).toBe(1);
  }

  it('graphql.md on Apollo (Express): the mutation, then its replay', async () => {
    await graphqlGuide('graphql-apollo');
  }, 60_000);

  it('graphql.md on Mercurius (Fastify): the mutation, then its replay', async () => {
    await graphqlGuide('graphql-mercurius');
  }, 60_000);

  it('consumers.md: a RabbitMQ message delivered twice is applied once, both acknowledged', async () => {
    const connection = await amqplib.connect(RABBITMQ_URL);
    try {
      const channel = await connection.createChannel();
      // The guide's queue, fresh: a leftover of an earlier run must not be delivered here.
      await channel.deleteQueue('settlements');
      // The guide's main.ts prints nothing of its own: Nest's log says it listens.
      const app = await started('consumers', { RABBITMQ_URL }, (output) =>
        output.includes('Nest microservice successfully started') ? '' : undefined,
      );
      await until(
        async () => (await channel.checkQueue('settlements')).consumerCount === 1,
        'the consumer',
      );
      const message = Buffer.from(
        JSON.stringify({ pattern: 'settlement.created', data: { account: 'acct_1', amount: 100 } }),
      );
      for (let delivery = 0; delivery < 2; delivery++) {
        channel.sendToQueue('settlements', message, {
          messageId: 'settlement-1',
          persistent: true,
        });
      }
      await until(
        async () => (await count('consumers', 'SELECT count(*) FROM processed_messages')) === 1,
        'the first delivery',
      );
      await until(
        async () => (await count('consumers', 'SELECT count(*) FROM settlements')) === 1,
        'the settlement',
      );
      // The duplicate waited on the first's row and is acknowledged once it committed; a
      // moment for it (as test/messages.e2e-spec.ts), then the consumer stopped gives back
      // what it did not acknowledge: nothing comes back.
      await new Promise((resolve) => setTimeout(resolve, 300));
      const exited = new Promise((resolve) => app.child.once('exit', resolve));
      app.child.kill('SIGKILL');
      await exited;
      // The broker takes back an unacknowledged delivery once it sees the connection gone.
      await until(
        async () => (await channel.checkQueue('settlements')).consumerCount === 0,
        'the broker to see the consumer gone',
      );
      expect((await channel.checkQueue('settlements')).messageCount).toBe(0);
      expect(await count('consumers', 'SELECT count(*) FROM settlements')).toBe(1);
      await channel.deleteQueue('settlements');
    } finally {
      await connection.close();
    }
  }, 60_000);

  it('schedule.md: two replicas of the worker, its task every second: each tick settled once', async () => {
    const env = { SETTLE_CRON: '* * * * * *' };
    const ready = (output: string) => (output.includes('its scheduled tasks run') ? '' : undefined);
    await started('schedule', env, ready);
    // The second replica, on the first one's database (as replicas are).
    const database = databases.find((candidate) =>
      candidate.name.startsWith('idem_guide_schedule_'),
    )!;
    const second = startApp(
      join(work, 'dist', 'schedule', 'src', 'main.js'),
      join(work, 'apps', 'schedule'),
      {
        ...process.env,
        ...env,
        DATABASE_URL: database.url,
        NO_COLOR: '1',
        NODE_OPTIONS: '--preserve-symlinks',
      },
      ready,
    );
    running.push(await second);
    await new Promise((resolve) => setTimeout(resolve, 3_500));
    // Both read in one statement: the replicas still tick, so two reads a moment apart could
    // count a tick settled in between (CI saw 5 rows, then 6 slots).
    const extra = await count(
      'schedule',
      'SELECT count(*) - count(DISTINCT "upTo") AS count FROM settlement',
    );
    const slots = await count('schedule', 'SELECT count(DISTINCT "upTo") FROM settlement');
    expect(slots).toBeGreaterThanOrEqual(3);
    expect(extra).toBe(0);
  }, 60_000);

  /** The phases guide's app, a charge through a fake PSP: started once, for both cases. */
  let phases: Promise<{ app: StartedApp; psp: { url: string; calls: string[] } }> | undefined;
  function phasesApp() {
    phases ??= (async () => {
      const psp = await fake((_body, key) => ({ id: `auth_${key.length}` }));
      return { app: await started('phases', { PSP_URL: psp.url }), psp };
    })();
    return phases;
  }

  it('phases.md: 201 after the three phases, the PSP called once with the derived key; replay', async () => {
    const { app, psp } = await phasesApp();
    const { first, replay } = await twice(`${app.url}/charges`, json('charge-1', { amount: 100 }));
    expect([first.status, first.replayed]).toEqual([201, null]);
    expect(JSON.parse(first.body)).toEqual({
      id: expect.any(String),
      authorization: expect.stringMatching(/^auth_/),
    });
    expect(replay).toEqual({ ...first, replayed: 'true' });
    expect(psp.calls).toEqual([expect.stringMatching(/^POST \/authorizations .+:psp_authorized$/)]);
    expect(await count('phases', "SELECT count(*) FROM charges WHERE status = 'succeeded'")).toBe(
      1,
    );
  }, 60_000);

  it("client.md: checkout() retries a lost answer under the same key and gets the first one's bytes", async () => {
    expect([...assembly.get('client')!, ...errors.get('client')!]).toEqual([]);
    const { app } = await phasesApp();
    // A proxy that loses the first answer: the app answered it, the client never got it.
    const seen: { key: string; status: number; body: string }[] = [];
    const proxy = createServer((req, res) => {
      const target = new URL(req.url!, app.url);
      const upstream = httpRequest(
        target,
        { method: req.method, headers: req.headers },
        (answer) => {
          let body = '';
          answer.on('data', (chunk: Buffer) => (body += chunk.toString()));
          answer.on('end', () => {
            seen.push({
              key: String(req.headers['idempotency-key']),
              status: answer.statusCode!,
              body,
            });
            if (seen.length === 1) return req.socket.destroy();
            res.writeHead(answer.statusCode!, answer.headers);
            res.end(body);
          });
        },
      );
      req.pipe(upstream);
    });
    servers.push(proxy);
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const client = join(work, 'apps', 'client');
    // Not execFileSync: the proxy runs in this process, whose loop must go on.
    const { stdout: out } = await execFileAsync(
      'node',
      [join(work, 'dist', 'client', 'src', 'main.js')],
      {
        cwd: client,
        env: {
          ...process.env,
          API_URL: `http://127.0.0.1:${(proxy.address() as { port: number }).port}`,
          NODE_OPTIONS: '--preserve-symlinks',
        },
        encoding: 'utf8',
      },
    );
    expect(seen.map(({ status }) => status)).toEqual([201, 201]);
    expect(seen[1].key).toBe(seen[0].key);
    expect(JSON.parse(out)).toEqual({ status: 201, replayed: 'true', body: seen[0].body });
    // The operation over, its key is forgotten: the store file holds nothing.
    expect(JSON.parse(readFileSync(join(client, '.pending-operations.json'), 'utf8'))).toEqual({});
  }, 60_000);
});
