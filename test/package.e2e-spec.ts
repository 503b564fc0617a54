import { execFileSync } from 'node:child_process';
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

const root = resolve(import.meta.dirname, '..');

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

  it('holds the library, its migrations, the schema, the licence and the README', () => {
    for (const file of [
      'package.json',
      'README.md',
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

  it('holds no tests, no sample app, no benchmark and no TypeScript sources', () => {
    const unwanted = files.filter((file) =>
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
    const modules = join(consumer, 'node_modules');
    const installed = join(modules, 'nestjs-idempotency-pg');
    mkdirSync(installed, { recursive: true });
    execFileSync('tar', ['-xzf', tarball, '-C', installed, '--strip-components=1']);
    // The peers (Nest, TypeORM, pg) as the consumer's app would have them.
    for (const entry of readdirSync(join(root, 'node_modules'))) {
      if (entry !== '.bin' && entry !== '.package-lock.json') {
        symlinkSync(join(root, 'node_modules', entry), join(modules, entry));
      }
    }
    const code = `
import { IdempotencyModule, Idempotent, type IdempotencyModuleOptions } from 'nestjs-idempotency-pg';
import { idempotentFetch, type IdempotentFetchOptions } from 'nestjs-idempotency-pg/client';
import { FileOperationStore } from 'nestjs-idempotency-pg/client/file-store';
import { MemoryClaimStore, type ClaimStoreHarness } from 'nestjs-idempotency-pg/testing';
import { IdempotencyHealthIndicator } from 'nestjs-idempotency-pg/terminus';

const options: IdempotencyModuleOptions = { globalKeys: true, keyFrom: { body: 'requestId' } };
export const module = IdempotencyModule.forRoot(options);
export const decorator: MethodDecorator & ClassDecorator = Idempotent({ leaseMs: 5000 });
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
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const compiled = (() => {
      try {
        return execFileSync('node', [tsc, '-p', consumer], { encoding: 'utf8' });
      } catch (error) {
        return (error as { stdout: string }).stdout;
      }
    })();
    expect(compiled).toBe('');
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
});
