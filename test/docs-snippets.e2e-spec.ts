import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { IDEMPOTENCY_CHANNELS } from '../lib/events/idempotency-events.js';
import { codesWithStatus } from '../lib/http/problem.js';
import { codeBlockProblems, type Markdown } from './support/markdown-snippets.js';

const root = resolve(import.meta.dirname, '..');

/** Every file under a folder, as paths from the repository's root. */
function filesUnder(folder: string, suffix: string): string[] {
  return readdirSync(join(root, folder), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith(suffix))
    .map((file) => join(folder, file))
    .sort();
}

const pages: Markdown[] = ['README.md', ...filesUnder('docs', '.md')].map((path) => ({
  path,
  text: readFileSync(join(root, path), 'utf8'),
}));
const read = (path: string): string | undefined => {
  try {
    return readFileSync(join(root, path), 'utf8');
  } catch {
    return undefined;
  }
};

/**
 * The docs' code, checked: each TypeScript block of the README and docs/ is a file of
 * docs/snippets (named by the marker above it, shown byte for byte), and those files compile
 * against the library's types. The README's quick start also runs, from the packed package,
 * in test/package.e2e-spec.ts.
 */
describe('the code in the docs', () => {
  it('shows every TypeScript block as a snippet file, byte for byte', () => {
    expect(pages.flatMap((page) => codeBlockProblems(page, read))).toEqual([]);
  });

  it("shows each of the quick start's files in the README", () => {
    const readme = pages.find(({ path }) => path === 'README.md')!.text;
    const missing = filesUnder('docs/snippets/quick-start', '.ts').filter(
      (file) => !readme.includes(`<!-- snippet: ${file} -->`),
    );
    expect(missing).toEqual([]);
  });

  it("compiles every snippet against the library's types (and would fail a wrong one)", () => {
    const work = mkdtempSync(join(tmpdir(), 'idem-snippets-'));
    try {
      // A control: a snippet with a type error must be the one error reported, so the check
      // is known to look at the snippets' types at all.
      writeFileSync(
        join(work, 'wrong.mts'),
        "import { Idempotent } from 'nestjs-idempotency-pg';\nexport const wrong = Idempotent({ leaseMs: 'soon' });\n",
      );
      writeFileSync(
        join(work, 'tsconfig.json'),
        JSON.stringify({
          extends: join(root, 'docs', 'snippets', 'tsconfig.json'),
          compilerOptions: { rootDir: '/', typeRoots: [join(root, 'node_modules', '@types')] },
          include: [join(root, 'docs', 'snippets', '**', '*.ts'), join(work, 'wrong.mts')],
        }),
      );
      const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
      let output = '';
      try {
        output = execFileSync('node', [tsc, '-p', work, '--pretty', 'false'], {
          encoding: 'utf8',
        });
      } catch (error) {
        output = (error as { stdout: string }).stdout;
      }
      const errors = output
        .split('\n')
        .filter((line) => /error TS\d+:/.test(line))
        .map((line) => relative(root, line.replace(/\(\d+,\d+\).*$/, '')));
      expect([...new Set(errors)]).toEqual([relative(root, join(work, 'wrong.mts'))]);
      expect(filesUnder('docs/snippets', '.ts').length).toBeGreaterThan(20);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }, 180_000);
});

/** The reference pages against the code: what the code can answer or emit is listed. */
describe('the reference', () => {
  const page = (path: string) => pages.find((candidate) => candidate.path === path)!.text;

  it('lists every problem code with its status', () => {
    const listed = [
      ...page('docs/reference/problems.md').matchAll(/^\| `([a-z_]+)` \| (\d{3}) \|/gm),
    ]
      .map(([, code, status]) => `${code} ${status}`)
      .sort();
    const answered = [400, 409, 422, 500, 503]
      .flatMap((status) => codesWithStatus(status).map((code) => `${code} ${status}`))
      .sort();
    expect(listed).toEqual(answered);
  });

  it('lists every diagnostics channel and every metric instrument', () => {
    const text = page('docs/reference/events-and-metrics.md');
    const channels = Object.entries(IDEMPOTENCY_CHANNELS).filter(
      ([name, id]) => !text.includes(`| \`${id}\` (\`${name}\`) |`),
    );
    expect(channels).toEqual([]);
    const source = readFileSync(join(root, 'lib', 'events', 'idempotency-metrics.ts'), 'utf8');
    const instruments = [...source.matchAll(/\.create\w+\('([\w.]+)'/g)].map(([, name]) => name);
    expect(instruments.length).toBeGreaterThan(5);
    expect(instruments.filter((name) => !text.includes(`| \`${name}\` |`))).toEqual([]);
  });
});
