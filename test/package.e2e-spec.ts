import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { createTestDatabase, type TestDatabase } from './support/database.js';

const root = resolve(import.meta.dirname, '..');

/**
 * The package from its tarball, and the peers as an app would have them (no network), but for
 * `leftOut` (names of packages, or of whole scopes as `@scope`): an app without them.
 */
function installPackage(app: string, tarball: string, leftOut: string[] = []): string {
  const modules = join(app, 'node_modules');
  const installed = join(modules, 'nestjs-idempotency-pg');
  mkdirSync(installed, { recursive: true });
  execFileSync('tar', ['-xzf', tarball, '-C', installed, '--strip-components=1']);
  for (const entry of readdirSync(join(root, 'node_modules'))) {
    if (entry === '.bin' || entry === '.package-lock.json' || leftOut.includes(entry)) continue;
    if (!entry.startsWith('@') || !leftOut.some((name) => name.startsWith(`${entry}/`))) {
      symlinkSync(join(root, 'node_modules', entry), join(modules, entry));
      continue;
    }
    // A scope some of whose packages are left out: the others, one by one.
    mkdirSync(join(modules, entry));
    for (const name of readdirSync(join(root, 'node_modules', entry))) {
      if (leftOut.includes(`${entry}/${name}`)) continue;
      symlinkSync(join(root, 'node_modules', entry, name), join(modules, entry, name));
    }
  }
  return installed;
}

/** tsc's output over a project: empty when it compiles. */
function compile(project: string): string {
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  try {
    return execFileSync('node', [tsc, '-p', project], { encoding: 'utf8' });
  } catch (error) {
    return (error as { stdout: string }).stdout;
  }
}

/** Starts the app and resolves with the URL it prints once it listens. */
function start(app: string, env: NodeJS.ProcessEnv): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn('node', [join(app, 'dist', 'main.js')], {
    cwd: app,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  return new Promise((resolvePromise, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /listening on (\S+)/.exec(output);
      if (match) resolvePromise({ child, url: match[1] });
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.on('exit', (code) => reject(new Error(`the app exited (${code}):\n${output}`)));
  });
}

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

  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), 'idem-pack-'));
    const source = join(work, 'source');
    mkdirSync(source);
    for (const entry of [
      'package.json',
      'README.md',
      'LICENSE',
      'docs',
      'tsconfig.json',
      'tsconfig.build.json',
      'lib',
      'migrations',
      'sample-app',
    ]) {
      cpSync(join(root, entry), join(source, entry), { recursive: true });
    }
    symlinkSync(join(root, 'node_modules'), join(source, 'node_modules'));
    const packed = JSON.parse(
      execFileSync('npm', ['pack', '--json', '--pack-destination', work], {
        cwd: source,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    ) as { filename: string; files: { path: string }[] }[];
    files = packed[0].files.map(({ path }) => path);
    tarball = join(work, packed[0].filename);
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
   * The README's quick start as a new user meets it: its files (docs/snippets/quick-start, which
   * the README shows byte for byte: test/docs-snippets.e2e-spec.ts) copied into a fresh ESM
   * app with the packed package, compiled with the app's own tsconfig, started on an empty
   * database: its migrations run, a first POST answers 201 and its retry the same bytes.
   */
  describe("the README's quick start, in a fresh app", () => {
    let app: string;
    let database: TestDatabase | undefined;
    let running: ChildProcess | undefined;

    beforeAll(() => {
      app = join(work, 'quick-start-app');
      mkdirSync(join(app, 'src'), { recursive: true });
      const snippets = join(root, 'docs', 'snippets', 'quick-start');
      for (const file of readdirSync(snippets))
        cpSync(join(snippets, file), join(app, 'src', file));
      writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'shop', type: 'module' }));
      writeFileSync(
        join(app, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            module: 'nodenext',
            moduleResolution: 'nodenext',
            target: 'es2022',
            strict: true,
            experimentalDecorators: true,
            emitDecoratorMetadata: true,
            skipLibCheck: true,
            outDir: 'dist',
            rootDir: 'src',
            types: ['node'],
            typeRoots: [join(root, 'node_modules', '@types')],
            ignoreDeprecations: '6.0',
          },
          include: ['src'],
        }),
      );
      installPackage(app, tarball);
    });
    afterAll(async () => {
      running?.kill('SIGKILL');
      await database?.drop();
    });

    it('compiles against the package as published', () => {
      expect(compile(app)).toBe('');
    }, 120_000);

    it('says what is missing when DATABASE_URL is not set', () => {
      const env = { ...process.env };
      delete env.DATABASE_URL;
      const result = spawnSync('node', [join(app, 'dist', 'main.js')], { cwd: app, env });
      expect([result.status, result.stderr.toString().trim()]).toEqual([
        1,
        'Set DATABASE_URL, e.g. postgres://user:password@localhost:5432/app',
      ]);
    }, 60_000);

    it('answers its first 201, then the same bytes as a replay', async () => {
      database = await createTestDatabase('quick_start');
      const started = await start(app, { ...process.env, DATABASE_URL: database.url, PORT: '0' });
      running = started.child;
      const send = () =>
        fetch(`${started.url}/orders`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'idempotency-key': '8e03978e-40d5',
            'x-tenant-id': '1',
          },
          body: JSON.stringify({ amount: 100 }),
        });
      const first = await send();
      const firstBody = await first.text();
      expect([first.status, first.headers.get('idempotent-replayed')]).toEqual([201, null]);
      expect(JSON.parse(firstBody)).toEqual({ id: expect.any(String), amount: 100 });
      const replay = await send();
      expect([replay.status, replay.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
      expect(await replay.text()).toBe(firstBody);
      // What the README says of the other answers.
      const problem = async (response: Response) => [
        response.status,
        ((await response.json()) as { code: string }).code,
      ];
      const other = await fetch(`${started.url}/orders`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'idempotency-key': '8e03978e-40d5',
          'x-tenant-id': '1',
        },
        body: JSON.stringify({ amount: 5 }),
      });
      expect(await problem(other)).toEqual([422, 'key_mismatch']);
      const noKey = await fetch(`${started.url}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-tenant-id': '1' },
        body: JSON.stringify({ amount: 100 }),
      });
      expect(await problem(noKey)).toEqual([400, 'key_missing']);
      const noTenant = await fetch(`${started.url}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'k2' },
        body: JSON.stringify({ amount: 100 }),
      });
      expect(await problem(noTenant)).toEqual([400, 'tenant_invalid']);
      const client = new pg.Client({ connectionString: database.url });
      await client.connect();
      try {
        const { rows } = await client.query<{ count: string }>('SELECT count(*) FROM orders');
        expect(rows).toEqual([{ count: '1' }]);
      } finally {
        await client.end();
      }
    }, 120_000);
  });
});
