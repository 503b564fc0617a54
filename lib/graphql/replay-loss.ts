import { type Logger } from '@nestjs/common';

/**
 * Something of a resolver's value that a replay cannot hand back as it was (a method of its
 * class, a function or a stream in its data): stored as it can be, and said in the app's log.
 * Not refused: the value is most often an entity with a helper method that no resolver under
 * the mutation calls, and refusing it would turn every such answer into an error.
 */
export interface ReplayLoss {
  /** The GraphQL type whose value it is in. */
  type: string;
  /** What is lost, in words (the members' names and kinds, never their values). */
  what: string;
}

/** What each logger has said, so that a type's loss is said once, not on every mutation. */
const said = new WeakMap<Logger, Set<string>>();

/** Logs each loss that `logger` has not said yet, once per type and what is lost. */
export function warnLosses(logger: Logger, losses: readonly ReplayLoss[]): void {
  for (const loss of losses) {
    const message = lossMessage(loss);
    let seen = said.get(logger);
    if (!seen) said.set(logger, (seen = new Set()));
    if (seen.has(message)) continue;
    seen.add(message);
    logger.warn(message);
  }
}

/** Logs `message` unless `logger` has said it already (a replay's warning, said once). */
export function warnOnce(logger: Logger, message: string): void {
  let seen = said.get(logger);
  if (!seen) said.set(logger, (seen = new Set()));
  if (seen.has(message)) return;
  seen.add(message);
  logger.warn(message);
}

/** The warning for a loss: what differs on a replay, and what to do about it. */
export function lossMessage(loss: ReplayLoss): string {
  return (
    `an idempotent mutation's value of type ${loss.type} cannot be replayed as it was: ` +
    `${loss.what}. The first answer has the resolver's own value; a replay gives the resolvers ` +
    'under the mutation (a @ResolveField() reading its parent) the stored form. Keep what ' +
    'they read to plain data, Dates, BigInts, Maps and Sets, or compute it in a @ResolveField()'
  );
}
