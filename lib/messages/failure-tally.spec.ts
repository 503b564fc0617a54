import { FailureTally } from './failure-tally.js';

describe('FailureTally', () => {
  it('counts each message apart, countable failures and all of them', () => {
    const tally = new FailureTally();
    expect(tally.add('c', 'm', true)).toEqual({ seen: 1, failures: 1 });
    expect(tally.add('c', 'm', false)).toEqual({ seen: 1, failures: 2 });
    expect(tally.add('c', 'm', true)).toEqual({ seen: 2, failures: 3 });
    expect(tally.add('other', 'm', true)).toEqual({ seen: 1, failures: 1 });
  });

  it('starts again once a message is forgotten', () => {
    const tally = new FailureTally();
    tally.add('c', 'm', true);
    tally.forget('c', 'm');
    expect(tally.add('c', 'm', true)).toEqual({ seen: 1, failures: 1 });
  });

  it('keeps at most its bound, the least recently failed going first', () => {
    const tally = new FailureTally(2);
    tally.add('c', 'a', true);
    tally.add('c', 'b', true);
    tally.add('c', 'a', true); // a is now the most recent
    tally.add('c', 'c', true);
    expect(tally.size).toBe(2);
    expect(tally.add('c', 'a', true)).toEqual({ seen: 3, failures: 3 });
    expect(tally.add('c', 'b', true)).toEqual({ seen: 1, failures: 1 }); // b had gone
  });
});
