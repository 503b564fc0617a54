import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/**
 * The package as a user gets it (packed, installed), and apps built on it: shared by the
 * package's own suite (test/package.e2e-spec.ts) and the one that starts every guide
 * (test/long/guides.e2e-spec.ts).
 */
export const root = resolve(import.meta.dirname, '..', '..');

/**
 * The package as `npm publish` would make it: built the way `prepack` builds it, in a copy of
 * the sources under `work` (so that the repository's own `dist` stays as the other tests need
 * it), and packed there. Returns the tarball and the paths it holds.
 */
export function packPackage(work: string): { tarball: string; files: string[] } {
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
  return {
    tarball: join(work, packed[0].filename),
    files: packed[0].files.map(({ path }) => path),
  };
}

/**
 * The packed package, packed once per jest run: the first suite to ask packs it into the run's
 * shared folder (IDEM_PACK_DIR, made by test/support/global-setup.mjs, removed by its
 * teardown), the others wait for it. Outside jest, or without the folder, packs under `work`.
 */
export async function packedPackage(work: string): Promise<{ tarball: string; files: string[] }> {
  const shared = process.env.IDEM_PACK_DIR;
  if (!shared || !existsSync(shared)) return packPackage(work);
  const result = join(shared, 'packed.json');
  try {
    mkdirSync(join(shared, 'lock'));
  } catch {
    // Another suite packs: wait for its result (or its failure) rather than pack again.
    const deadline = Date.now() + 240_000;
    while (!existsSync(result)) {
      if (Date.now() > deadline) throw new Error(`no pack in ${shared} after 240 s`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const packed = JSON.parse(readFileSync(result, 'utf8')) as
      { tarball: string; files: string[] } | { error: string };
    if ('error' in packed) throw new Error(`the shared pack failed: ${packed.error}`);
    return packed;
  }
  let packed: { tarball: string; files: string[] } | { error: string };
  try {
    mkdirSync(join(shared, 'work'));
    packed = packPackage(join(shared, 'work'));
  } catch (error) {
    packed = { error: String(error) };
  }
  // Written whole, then renamed: a waiting suite never reads half of it.
  writeFileSync(`${result}.tmp`, JSON.stringify(packed));
  renameSync(`${result}.tmp`, result);
  if ('error' in packed) throw new Error(packed.error);
  return packed;
}

/**
 * The package from its tarball, and the peers as an app would have them (no network), but for
 * `leftOut` (names of packages, or of whole scopes as `@scope`): an app without them. Apps in
 * folders under `app` find the same node_modules, as in a workspace.
 */
export function installPackage(app: string, tarball: string, leftOut: string[] = []): string {
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

/** The compiler options of a fresh ES module app on Nest, as the README asks for. */
export const APP_COMPILER_OPTIONS = {
  module: 'nodenext',
  moduleResolution: 'nodenext',
  target: 'es2022',
  strict: true,
  experimentalDecorators: true,
  emitDecoratorMetadata: true,
  skipLibCheck: true,
  types: ['node'],
  typeRoots: [join(root, 'node_modules', '@types')],
  ignoreDeprecations: '6.0',
};

/** tsc's output over a project: empty when it compiles. */
export function compile(project: string): string {
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  try {
    return execFileSync('node', [tsc, '-p', project, '--pretty', 'false'], { encoding: 'utf8' });
  } catch (error) {
    return (error as { stdout: string }).stdout;
  }
}

/** A started app: its process, the URL it printed, and what it wrote so far. */
export interface StartedApp {
  child: ChildProcess;
  url: string;
  output: () => string;
}

/**
 * Starts `node <main>` in `cwd` and resolves once it prints `listening on <url>` (or, with
 * `ready`, once `ready` says so); rejects with its output if it exits first.
 */
export function startApp(
  main: string,
  cwd: string,
  env: NodeJS.ProcessEnv,
  ready: (output: string) => string | undefined = (output) =>
    /listening on (\S+)/.exec(output)?.[1],
): Promise<StartedApp> {
  const child = spawn('node', [main], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  return new Promise((resolvePromise, reject) => {
    let done = false;
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const url = ready(output);
      if (url !== undefined && !done) {
        done = true;
        resolvePromise({ child, url, output: () => output });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.on('exit', (code) => {
      if (!done) reject(new Error(`the app exited (${code}):\n${output}`));
    });
  });
}

interface LockedPackage {
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

/**
 * The packages `npm install <names>` puts at the top of node_modules, read from this
 * repository's lock file: the named ones, their dependencies and the peers npm installs with
 * them (those not marked optional), and theirs. Optional peers come only when named, as with npm.
 */
export function installedBy(names: string[]): Set<string> {
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, LockedPackage>;
  };
  const top = new Set<string>();
  const seen = new Set<string>();
  // Where a dependency of the package at `from` is found: its own node_modules, then its parents'.
  const locate = (from: string, name: string): string | undefined => {
    let base = from;
    for (;;) {
      const candidate = `${base ? `${base}/` : ''}node_modules/${name}`;
      if (lock.packages[candidate]) return candidate;
      if (!base) return undefined;
      const at = base.lastIndexOf('node_modules/');
      base = at <= 0 ? '' : base.slice(0, at - 1);
    }
  };
  const visit = (path: string | undefined) => {
    if (!path || seen.has(path)) return;
    seen.add(path);
    if (!path.slice('node_modules/'.length).includes('node_modules/')) {
      top.add(path.slice('node_modules/'.length));
    }
    const entry = lock.packages[path];
    const wanted = [
      ...Object.keys(entry.dependencies ?? {}),
      ...Object.keys(entry.optionalDependencies ?? {}),
      ...Object.keys(entry.peerDependencies ?? {}).filter(
        (peer) => !entry.peerDependenciesMeta?.[peer]?.optional,
      ),
    ];
    for (const name of wanted) visit(locate(path, name));
  };
  for (const name of names) {
    if (!lock.packages[`node_modules/${name}`]) throw new Error(`${name} is not in the lock file`);
    visit(`node_modules/${name}`);
  }
  return top;
}

/**
 * An app's node_modules as `npm install` of the package (its tarball) and of `names` makes it:
 * each package a link into this repository's node_modules, and nothing else. Run the app with
 * `node --preserve-symlinks` (and compile it with `preserveSymlinks`), so that a package finds
 * its own imports from the app's node_modules, as installed, not from the repository's: a peer
 * the guide does not install is then missing, as it would be.
 */
export function installAsNamed(app: string, tarball: string, names: string[]): void {
  const own = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as LockedPackage;
  const packages = installedBy([
    ...names.filter((name) => name !== 'nestjs-idempotency-pg'),
    ...Object.keys(own.dependencies ?? {}),
    ...Object.keys(own.peerDependencies ?? {}).filter(
      (peer) => !own.peerDependenciesMeta?.[peer]?.optional,
    ),
  ]);
  const modules = join(app, 'node_modules');
  const installed = join(modules, 'nestjs-idempotency-pg');
  mkdirSync(installed, { recursive: true });
  execFileSync('tar', ['-xzf', tarball, '-C', installed, '--strip-components=1']);
  for (const name of packages) {
    mkdirSync(dirname(join(modules, name)), { recursive: true });
    symlinkSync(join(root, 'node_modules', name), join(modules, name));
  }
}

/** The packages a page's `npm install` lines name (options such as `--save-dev` left out). */
export function namedInstalls(markdown: string): string[] {
  return [...markdown.matchAll(/^npm install (.+)$/gm)].flatMap(([, rest]) =>
    rest.split(/\s+/).filter((word) => word !== '' && !word.startsWith('-')),
  );
}
