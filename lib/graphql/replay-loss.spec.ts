import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { lossMessage, warnLosses } from './replay-loss.js';

describe('warnLosses', () => {
  const loss = {
    type: 'Voucher',
    what: 'its data onPaid (a function) does not come back as it was',
  };

  it('says what is lost and what to do', () => {
    expect(lossMessage(loss)).toBe(
      "an idempotent mutation's value of type Voucher cannot be replayed as it was: its data " +
        "onPaid (a function) does not come back as it was. The first answer has the resolver's " +
        'own value; a replay gives the resolvers under the mutation (a @ResolveField() reading ' +
        'its parent) the stored form. Keep what they read to plain data, Dates, BigInts, Maps ' +
        'and Sets, or compute it in a @ResolveField()',
    );
  });

  it('says each loss once per logger, however often it happens', () => {
    const logger = new Logger('Idempotency');
    const warn = jest.spyOn(logger, 'warn').mockImplementation(() => undefined);
    const other = { type: 'Ticket', what: 'its field id (a number) comes back otherwise' };
    warnLosses(logger, [loss, loss]);
    warnLosses(logger, [loss, other]);
    expect(warn.mock.calls).toEqual([[lossMessage(loss)], [lossMessage(other)]]);
    // Another app's logger says it again.
    const another = new Logger('Idempotency');
    const warnAnother = jest.spyOn(another, 'warn').mockImplementation(() => undefined);
    warnLosses(another, [loss]);
    expect(warnAnother.mock.calls).toEqual([[lossMessage(loss)]]);
  });
});
