import { type ChildProcess, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import {
  APP_COMPILER_OPTIONS,
  compile,
  installPackage,
  packedPackage,
  root,
  startApp,
} from '../support/packed-app.js';

/**
 * The package as `npm publish` would make it: built the way `prepack` builds it (in a copy of
 * the sources, so that this suite's own `dist` stays as the other tests need it), packed, and
 * installed into two consumers, one ESM and one CommonJS, whose TypeScript must type-check
 * against it and whose Node.js must load it.
 */
describe('the npm package', () => {
  let work: string;
  let files: string[];
  let tarball: string;

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'idem-pack-'));
    ({ tarball, files } = await packedPackage(work));
  }, 120_000);
  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('holds the library, its migrations, the schema, the licence, the README and the docs', () => {
    for (const file of [
      'package.json',
      'README.md',
      'docs/README.md',
      'docs/guides/getting-started.md',
      'docs/reference/options.md',
      'LICENSE',
      'migrations/schema.sql',
      'dist/lib/index.js',
      'dist/lib/index.d.ts',
      'dist/lib/idempotency.interceptor.js',
    ]) {
      expect(files).toContain(file);
    }
    expect(files.some((file) => file.startsWith('dist/migrations/'))).toBe(true);
  });

  it('holds no tests, no sample app, no benchmark and no TypeScript sources (no snippets)', () => {
    // The docs' pages (docs/**/*.md) may name the sample app and the benchmarks.
    const code = files.filter((file) => !/^docs\/.*\.md$/.test(file));
    expect(files.filter((file) => file.startsWith('docs/snippets/'))).toEqual([]);
    const unwanted = code.filter((file) =>
      /(\.spec\.|e2e-spec|^test\/|^dist\/test\/|sample-app|bench|^lib\/|\.ts$)/.test(
        file.replace(/\.d\.ts$/, '.d'),
      ),
    );
    expect(unwanted).toEqual([]);
  });

  it('ships source maps whose sources are inside them', () => {
    const maps = files.filter((file) => file.endsWith('.js.map'));
    expect(maps.length).toBeGreaterThan(10);
    const extracted = join(work, 'extracted');
    mkdirSync(extracted);
    execFileSync('tar', ['-xzf', tarball, '-C', extracted, '--strip-components=1']);
    for (const map of maps) {
      const parsed = JSON.parse(readFileSync(join(extracted, map), 'utf8')) as {
        sources: string[];
        sourcesContent?: (string | null)[];
      };
      expect([map, parsed.sourcesContent?.length]).toEqual([map, parsed.sources.length]);
      expect(parsed.sourcesContent!.every((text) => typeof text === 'string')).toBe(true);
    }
  });

  it('type-checks and loads from an ESM consumer and from a CommonJS one', () => {
    const consumer = join(work, 'consumer');
    // The peers (Nest, TypeORM, pg) as the consumer's app would have them, and not the
    // optional GraphQL ones: the package must load and type-check without them.
    const installed = installPackage(consumer, tarball, [
      'graphql',
      '@nestjs/graphql',
      '@nestjs/apollo',
      '@nestjs/mercurius',
      '@apollo',
      'mercurius',
    ]);
    // The control: the consumer really has no graphql to find.
    expect(() =>
      execFileSync('node', ['--input-type=module', '-e', "await import('graphql')"], {
        cwd: consumer,
        stdio: 'pipe',
      }),
    ).toThrow(/Cannot find package 'graphql'/);
    const code = `
import { IdempotencyModule, Idempotent, type IdempotencyModuleOptions } from 'nestjs-idempotency-pg';
import { idempotentFetch, type IdempotentFetchOptions } from 'nestjs-idempotency-pg/client';
import { FileOperationStore } from 'nestjs-idempotency-pg/client/file-store';
import { MemoryClaimStore, type ClaimStoreHarness } from 'nestjs-idempotency-pg/testing';
import { IdempotencyHealthIndicator } from 'nestjs-idempotency-pg/terminus';

const options: IdempotencyModuleOptions = { globalKeys: true, keyFrom: { body: 'requestId' } };
export const module = IdempotencyModule.forRoot(options);
export const decorator: MethodDecorator & ClassDecorator = Idempotent({ leaseMs: 5000 });
export const onMutation = Idempotent({ keyFrom: { arg: 'idempotencyKey' } });
// @ts-expect-error: the types are real, not any: a lease is a number
export const wrong = () => Idempotent({ leaseMs: 'soon' });
export const client: IdempotentFetchOptions = { intent: 'x', store: new FileOperationStore('p') };
export const harness: ClaimStoreHarness = { create: () => new MemoryClaimStore() };
console.log(typeof IdempotencyModule, typeof Idempotent, typeof idempotentFetch, typeof MemoryClaimStore, typeof IdempotencyHealthIndicator);
`;
    writeFileSync(join(consumer, 'esm.mts'), code);
    writeFileSync(join(consumer, 'cjs.cts'), code);
    writeFileSync(
      join(consumer, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          strict: true,
          experimentalDecorators: true,
          skipLibCheck: false,
          types: ['node'],
          typeRoots: [join(root, 'node_modules', '@types')],
          ignoreDeprecations: '6.0',
        },
        files: ['esm.mts', 'cjs.cts'],
      }),
    );
    expect(compile(consumer)).toBe('');
    for (const file of ['esm.mjs', 'cjs.cjs']) {
      const out = execFileSync('node', [join(consumer, file)], { encoding: 'utf8' });
      expect([file, out.trim()]).toEqual([file, 'function function function function function']);
    }
    // The operator's command, as `npx nestjs-idempotency-pg` runs the package's bin.
    const { bin } = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as {
      bin: Record<string, string>;
    };
    const usage = execFileSync('node', [join(installed, bin['nestjs-idempotency-pg']), '--help'], {
      encoding: 'utf8',
    });
    expect(usage).toMatch(/^Usage: nestjs-idempotency-pg <command>/);
  }, 120_000);
  /**
   * An app on Kysely with no TypeORM at all: neither `typeorm` nor `@nestjs/typeorm` in its
   * node_modules. The module is given the app's `pg.Pool`, the library's tables come from the
   * package's plain SQL schema, and one idempotent request is served and replayed.
   */
  describe('a fresh app on Kysely, without TypeORM installed', () => {
    let app: string;
    let database: TestDatabase | undefined;
    let running: ChildProcess | undefined;

    beforeAll(() => {
      app = join(work, 'kysely-app');
      mkdirSync(join(app, 'src'), { recursive: true });
      writeFileSync(join(app, 'src', 'main.ts'), KYSELY_APP);
      writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'shop', type: 'module' }));
      writeFileSync(
        join(app, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: { ...APP_COMPILER_OPTIONS, outDir: 'dist', rootDir: 'src' },
          include: ['src'],
        }),
      );
      installPackage(app, tarball, ['typeorm', '@nestjs/typeorm']);
    });
    afterAll(async () => {
      running?.kill('SIGKILL');
      await database?.drop();
    });

    it('has no typeorm and no @nestjs/typeorm to load (the control: this repository has them)', () => {
      // Which of `names` Node resolves from `from`, as an import there would (none is loaded).
      const resolvable = (from: string, names: string[]) => {
        const script = `console.log(JSON.stringify(${JSON.stringify(names)}.map((name) => {
          try { import.meta.resolve(name); return true; } catch { return false; }
        })))`;
        const out = execFileSync('node', ['--input-type=module', '-e', script], {
          cwd: from,
          encoding: 'utf8',
        });
        return JSON.parse(out) as boolean[];
      };
      expect(existsSync(join(app, 'node_modules', 'typeorm'))).toBe(false);
      expect(resolvable(app, ['typeorm', '@nestjs/typeorm', 'kysely', 'pg'])).toEqual([
        false,
        false,
        true,
        true,
      ]);
      expect(resolvable(root, ['typeorm', '@nestjs/typeorm'])).toEqual([true, true]);
    });

    it('compiles, starts, answers 201 and replays the same bytes', async () => {
      expect(compile(app)).toBe('');
      database = await createTestDatabase('no_typeorm');
      const client = new pg.Client({ connectionString: database.url });
      await client.connect();
      try {
        await client.query(
          readFileSync(
            join(app, 'node_modules', 'nestjs-idempotency-pg', 'migrations', 'schema.sql'),
            'utf8',
          ),
        );
        await client.query('CREATE TABLE orders (id bigserial PRIMARY KEY, amount int NOT NULL)');
        const started = await startApp(join(app, 'dist', 'main.js'), app, {
          ...process.env,
          DATABASE_URL: database.url,
        });
        running = started.child;
        const send = () =>
          fetch(`${started.url}/orders`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'idempotency-key': 'no-typeorm-1' },
            body: JSON.stringify({ amount: 100 }),
          });
        const first = await send();
        const firstBody = await first.text();
        expect([first.status, first.headers.get('idempotent-replayed')]).toEqual([201, null]);
        expect(JSON.parse(firstBody)).toEqual({ id: expect.any(String), amount: 100 });
        const replay = await send();
        expect([replay.status, replay.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
        expect(await replay.text()).toBe(firstBody);
        const { rows } = await client.query<{ count: string }>('SELECT count(*) FROM orders');
        expect(rows).toEqual([{ count: '1' }]);
      } finally {
        await client.end();
      }
    }, 120_000);
  });
});

/** The app of the case without TypeORM: Kysely on a pool, the module given the same pool. */
const KYSELY_APP = `import 'reflect-metadata';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { type Generated, Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { IdempotencyModule, Idempotent } from 'nestjs-idempotency-pg';

interface Database {
  orders: { id: Generated<string>; amount: number };
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });

@Controller('orders')
class OrdersController {
  @Post()
  @Idempotent()
  async create(@Body() body: { amount: number }) {
    const order = await db
      .insertInto('orders')
      .values({ amount: body.amount })
      .returningAll()
      .executeTakeFirstOrThrow();
    return { id: order.id, amount: order.amount };
  }
}

@Module({
  imports: [IdempotencyModule.forRoot({ globalKeys: true, pool })],
  controllers: [OrdersController],
})
class AppModule {}

const app = await NestFactory.create(AppModule, { rawBody: true, logger: ['error'] });
await app.listen(0, '127.0.0.1');
console.log(\`listening on http://127.0.0.1:\${(app.getHttpServer().address() as { port: number }).port}\`);
`;
