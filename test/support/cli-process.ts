import { type ChildProcess, spawn } from 'node:child_process';
import { compiled } from './worker-process.js';

/** What a run of the compiled command printed, and how it exited. */
export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Starts the compiled `nestjs-idempotency-pg` (dist/lib/cli/main.js) as a user would run it,
 * with no DATABASE_URL from the test's environment.
 */
export function startCli(args: string[]): { child: ChildProcess; done: Promise<CliRun> } {
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '' };
  delete env.DATABASE_URL;
  const child = spawn(process.execPath, [compiled('lib/cli/main.js'), ...args], {
    env,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const done = new Promise<CliRun>((resolve) =>
    child.on('close', (code) => resolve({ code, stdout, stderr })),
  );
  return { child, done };
}

/** Runs the command to its end, its input closed. */
export function runCli(args: string[]): Promise<CliRun> {
  const { child, done } = startCli(args);
  child.stdin!.end();
  return done;
}

/** Resolves once the child has printed `text` on its output. */
export function printed(child: ChildProcess, text: string, timeoutMs = 30_000): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(
      () => reject(new Error(`"${text}" not printed in ${timeoutMs} ms:\n${seen}`)),
      timeoutMs,
    );
    const onData = (chunk: Buffer) => {
      seen += chunk.toString();
      if (seen.includes(text)) {
        clearTimeout(timer);
        child.stdout!.off('data', onData);
        resolve();
      }
    };
    child.stdout!.on('data', onData);
  });
}
