import { createConnection } from 'node:net';

export const RABBITMQ_URL = 'amqp://guest:guest@127.0.0.1:5672';
export const NATS_URL = 'nats://127.0.0.1:4222';

/**
 * Whether a broker answers on 127.0.0.1. This machine and CI run both (`.ci/run` starts them
 * if needed, and there a missing broker fails the suite); on a laptop without them the
 * broker's tests are skipped, saying so, rather than failing `npm test`.
 */
function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    const settle = (up: boolean) => {
      socket.destroy();
      resolve(up);
    };
    socket.once('connect', () => settle(true));
    socket.once('error', () => settle(false));
    socket.setTimeout(1000, () => settle(false));
  });
}
const required = process.env.CI === 'true';
const [rabbitmq, nats] = await Promise.all([answers(5672), answers(4222)]);
for (const [name, up] of [
  ['RabbitMQ (127.0.0.1:5672)', rabbitmq],
  ['NATS (127.0.0.1:4222)', nats],
] as const) {
  if (!up && !required) console.warn(`${name} is not answering: its message tests are skipped`);
}
/** Whether each broker's tests run (it answers, or CI requires it): for set-ups outside them. */
export const BROKERS = { rabbitmq: rabbitmq || required, nats: nats || required };
export const onRabbitMq = BROKERS.rabbitmq ? describe : describe.skip;
export const onNats = BROKERS.nats ? describe : describe.skip;

/** Polls `check` until it holds; `what` may be a function, read when the wait times out. */
export async function until(
  check: () => Promise<boolean>,
  what: string | (() => string),
  timeoutMs = 15_000,
) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${typeof what === 'function' ? what() : what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
