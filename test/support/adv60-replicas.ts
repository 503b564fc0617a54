import { spawn } from 'node:child_process';
import { until } from './brokers.js';
import { type TaskReplica, type TaskReplicas } from './task-replicas.js';
import { compiled } from './worker-process.js';

/** The adversary-60 replicas started by a test file, killed after each test. */
const started: TaskReplica[] = [];

afterEach(async () => {
  await Promise.all(started.splice(0).map((replica) => replica.kill()));
});

/**
 * Starts a replica of test/support/adv60-replica.ts (its env documented there) on the
 * database of `replicas` (its `ticks` table); resolves once its timers run.
 */
export async function startAdv60Replica(
  replicas: TaskReplicas,
  env: Record<string, string>,
): Promise<TaskReplica> {
  const child = spawn(process.execPath, [compiled('test/support/adv60-replica.js')], {
    env: { ...process.env, NODE_OPTIONS: '', DATABASE_URL: replicas.url(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const replica: TaskReplica = {
    child,
    output: () => output,
    kill: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  };
  started.push(replica);
  await until(
    () => Promise.resolve(output.includes('ready') || child.exitCode !== null),
    'the replica to start',
    60_000,
  );
  if (child.exitCode !== null) throw new Error(`the replica exited:\n${output}`);
  return replica;
}

/** How many times each slot's work began, in the replicas' output (`begun <slot>` lines). */
export function runsBySlot(...replicas: TaskReplica[]): Map<string, number> {
  const runs = new Map<string, number>();
  for (const replica of replicas) {
    for (const [, slot] of replica.output().matchAll(/^begun (\S+)/gm)) {
      runs.set(slot, (runs.get(slot) ?? 0) + 1);
    }
  }
  return runs;
}
