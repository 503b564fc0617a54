import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';

/** A child process running a compiled script, which prints `listening on <port>` when ready. */
export interface WorkerProcess {
  port: number;
  url: string;
  child: ChildProcess;
  output(): string;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** Compiled scripts live under dist/ (built by `npm test` before jest runs). */
export function compiled(path: string): string {
  // An absolute path is a compiled file elsewhere (another build, for the benchmark).
  const file = isAbsolute(path) ? path : join(process.cwd(), 'dist', path);
  if (!existsSync(file)) {
    throw new Error(
      `${file} is missing: run \`npm test\` (it compiles before testing) or \`npx tsc -p tsconfig.json\``,
    );
  }
  return file;
}

export async function startWorker(
  script: string,
  env: Record<string, string>,
  timeoutMs = 60_000,
): Promise<WorkerProcess> {
  const child = spawn(process.execPath, [compiled(script)], {
    env: { ...process.env, ...env, NODE_OPTIONS: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${script} did not start in ${timeoutMs} ms:\n${output}`)),
      timeoutMs,
    );
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /listening on (\d+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${script} exited with ${code}:\n${output}`));
    });
  });
  child.removeAllListeners('exit');
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    child,
    output: () => output,
    kill: (signal = 'SIGKILL') =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill(signal);
      }),
  };
}
