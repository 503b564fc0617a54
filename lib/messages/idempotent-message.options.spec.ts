import {
  type IdempotentMessageOptions,
  resolveMessageOptions,
} from './idempotent-message.options.js';

describe('resolveMessageOptions', () => {
  it('fills in the defaults', () => {
    expect(resolveMessageOptions({}, 'Settlements.settle')).toEqual({
      consumer: 'Settlements.settle',
      messageId: undefined,
      maxAttempts: 5,
      ack: false,
    });
  });

  it.each<[string, IdempotentMessageOptions, string]>([
    ['an empty consumer', { consumer: '' }, 'consumer must be 1 to 255 characters'],
    ['a long consumer', { consumer: 'c'.repeat(256) }, 'consumer must be 1 to 255 characters'],
    [
      'a consumer with a NUL',
      { consumer: 'queue\u0000a' },
      'consumer cannot be stored: it holds a NUL character',
    ],
    [
      'a consumer with a lone surrogate',
      { consumer: 'queue\ud800' },
      'consumer cannot be stored: it holds a lone surrogate (not Unicode)',
    ],
    ['zero attempts', { maxAttempts: 0 }, 'maxAttempts must be a positive integer, got 0'],
  ])('refuses %s at start-up', (_name, options, message) => {
    expect(() => resolveMessageOptions(options, 'Settlements.settle')).toThrow(
      `@IdempotentMessage(): ${message}`,
    );
  });
});
