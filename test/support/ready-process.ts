import { type ChildProcess, spawn } from 'node:child_process';
import { compiled } from './worker-process.js';

/** A child process of a test: a job worker, a scheduled app's replica. */
export interface ReadyProcess {
  child: ChildProcess;
  /** What it printed, stdout and stderr. */
  output(): string;
  /** SIGKILLs it; resolves once it exited. */
  kill(): Promise<void>;
  /** Whether the test killed it (`kill`), rather than it exiting on its own. */
  killed?(): boolean;
}

/**
 * Runs a compiled script (`compiled`) with `env` over the test's, and resolves once it printed
 * `ready`; rejects with its output if it exits first. `what` names it in a timeout.
 */
export async function startReadyProcess(
  script: string,
  env: Record<string, string>,
  what: string,
): Promise<ReadyProcess> {
  const child = spawn(process.execPath, [compiled(script)], {
    env: { ...process.env, NODE_OPTIONS: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let killed = false;
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const started: ReadyProcess = {
    child,
    output: () => output,
    killed: () => killed,
    kill: () =>
      new Promise<void>((resolve) => {
        killed = true;
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  };
  // Waited for here, not with brokers.ts's `until`: a benchmark outside jest runs it too.
  const deadline = Date.now() + 60_000;
  while (!output.includes('ready') && child.exitCode === null) {
    if (Date.now() > deadline) {
      await started.kill();
      throw new Error(`timed out waiting for ${what}:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  if (child.exitCode !== null) throw new Error(`${what}: it exited:\n${output}`);
  return started;
}
