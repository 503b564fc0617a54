import { type Outcome } from './handler-program.js';

/** How a delivery was settled with RabbitMQ, as the consumer's process printed it. */
export type Settlement = 'ack' | 'requeue' | 'reject';

/** What a message id's run left: the broker's side, and the database's. */
export interface DeliveryRecord {
  /** The model of the program the message carries (begun before the handler). */
  model: Outcome;
  /** Copies of the message published under its id (duplicates and the last check's included). */
  published: number;
  /** Every settlement of a delivery of the id, in order. */
  settlements: Settlement[];
  /** The effect rows of the program, by path (`path×n` when applied n times). */
  applied: string[];
  /** Whether its id is in `processed_messages`. */
  recorded: boolean;
  /** Its failures counted towards giving it up (`message_failures.attempts`, 0 when none). */
  counted: number;
}

/**
 * The violations in one message id's run, none when it is right. A message is settled once
 * per copy published, each copy the same way: acknowledged with the program's effects applied
 * exactly once and its id recorded, and no failure counted against it (every fault is an
 * outage, never the message's: a poison count for one would dead-letter a good message); or,
 * when the program fails on its own (its model is an error), rejected with nothing applied
 * and nothing recorded. What the library may refuse (a session lock, a cursor) may be given
 * up too, with nothing applied.
 */
export function checkDelivery(record: DeliveryRecord): string[] {
  const { model, settlements, applied } = record;
  const acks = settlements.filter((s) => s === 'ack').length;
  const rejects = settlements.filter((s) => s === 'reject').length;
  const heard = settlements.join(',') || 'nothing';
  const violations: string[] = [];
  if (acks + rejects < record.published) {
    violations.push(
      `${acks + rejects} of ${record.published} copies settled (the broker heard: ${heard})`,
    );
  }
  // What the library may refuse may be refused on one copy and done on another.
  const refusable = model.kind === 'ok' && model.refusable;
  if (acks && rejects && !refusable) {
    violations.push(`acknowledged and rejected (the broker heard: ${heard})`);
  }
  const shown = `[${applied.join(',')}]`;
  if (model.kind === 'ok') {
    const wanted = [...model.writes].sort();
    if (rejects) {
      if (!model.refusable) violations.push(`given up (the broker heard: ${heard})`);
      else if (applied.length && !acks) violations.push(`given up with effects ${shown} applied`);
    }
    if (acks) {
      if (applied.join(',') !== wanted.join(',')) {
        violations.push(
          `acknowledged with effects ${shown}, the model wants [${wanted.join(',')}]`,
        );
      }
      if (!record.recorded) violations.push('acknowledged, its id not recorded');
    }
    // A refusal may hang on the moment (a cursor opened while another is): counted, then done.
    if (record.counted && !rejects && !model.refusable) {
      violations.push(`${record.counted} failures counted against a message that succeeds`);
    }
    return violations;
  }
  // The handler fails on its own every time (its error, a swallowed failure, a refusal).
  if (acks) violations.push(`acknowledged, the model wants it given up (${model.kind})`);
  if (applied.length) violations.push(`effects ${shown} applied, the model wants none`);
  if (record.recorded) violations.push('its id recorded, the model wants it given up');
  return violations;
}

/**
 * A duplicate of a message once acknowledged (delivered after it was settled): it changes
 * nothing, and is acknowledged. `before` is what the message left when its copies were
 * settled, `after` the same once the duplicate was.
 */
export function checkDuplicate(before: DeliveryRecord, after: DeliveryRecord): string[] {
  if (!before.settlements.includes('ack')) return [];
  const violations: string[] = [];
  const was = before.applied.join(',');
  const is = after.applied.join(',');
  if (was !== is) violations.push(`a duplicate changed its effects: [${was}], then [${is}]`);
  const answered = after.settlements.slice(before.settlements.length);
  if (answered.some((s) => s !== 'ack')) {
    violations.push(`a duplicate was settled ${answered.join(',')}, not acknowledged`);
  }
  return violations;
}

/**
 * Work the handler left running (`fuzz_later`, by path): each write lands at most once, and
 * only one the model lets land; once the message is acknowledged, each write of the run that
 * committed lands, unless a crash or a drop (`mayLose`) took it. A message given up (what the
 * library may refuse) committed no run: its writes rolled back with its deliveries.
 */
export function checkLeftRunning(
  model: Outcome,
  landed: string[],
  { mayLose, acknowledged }: { mayLose: boolean; acknowledged: boolean },
): string[] {
  const forgets = model.kind === 'ok' ? [...model.forgets].sort() : [];
  const mayLand = model.kind === 'ok' ? [...forgets, ...model.mayForget] : [];
  const lost = forgets.filter((path) => !landed.includes(path));
  if (
    landed.some((path) => path.includes('×') || !mayLand.includes(path)) ||
    (acknowledged && !mayLose && lost.length)
  ) {
    return [
      `work left running landed [${landed.join(',')}], the model wants [${forgets.join(',')}]`,
    ];
  }
  return [];
}
