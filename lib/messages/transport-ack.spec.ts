import { type AckingHandler, ackRefusal } from './transport-ack.js';

// Nest's Transport enum values (RMQ 5, NATS 2), as its servers carry them in transportId.
const RMQ = 5;
const NATS = 2;
const anywhere: AckingHandler = { name: 'Settlements.settle' };
const onRmq: AckingHandler = { name: 'Settlements.onRmq', transport: RMQ };
const onNats: AckingHandler = { name: 'Settlements.onNats', transport: NATS };

describe('ackRefusal', () => {
  it.each<[string, unknown, AckingHandler[], string | undefined]>([
    [
      'RabbitMQ with noAck: true',
      { transportId: RMQ, noAck: true },
      [anywhere],
      'Settlements.settle',
    ],
    ['RabbitMQ with noAck: false', { transportId: RMQ, noAck: false }, [anywhere], undefined],
    [
      'RabbitMQ with noAck: true, a handler named for it',
      { transportId: RMQ, noAck: true },
      [onRmq, onNats],
      'Settlements.onRmq:',
    ],
    [
      'RabbitMQ with noAck: true, only a handler named for NATS',
      { transportId: RMQ, noAck: true },
      [onNats],
      undefined,
    ],
    [
      'RabbitMQ with noAck: true, every handler listed',
      { transportId: RMQ, noAck: true },
      [anywhere, onRmq],
      'Settlements.settle, Settlements.onRmq:',
    ],
    ['NATS: no acknowledgements, ack means nothing', { transportId: NATS }, [anywhere], undefined],
    ['a custom strategy without transportId, noAck: true', { noAck: true }, [onRmq], 'onRmq'],
    ['a custom strategy without noAck', {}, [anywhere], undefined],
    ['no handler with ack', { transportId: RMQ, noAck: true }, [], undefined],
    ['no server at all', undefined, [anywhere], undefined],
  ])('%s', (_what, server, handlers, names) => {
    const refusal = ackRefusal(server, handlers);
    if (names === undefined) expect(refusal).toBeUndefined();
    else expect(refusal).toContain(names);
  });

  it('names noAck: false and the 406 the broker would answer', () => {
    expect(ackRefusal({ transportId: RMQ, noAck: true }, [anywhere])).toBe(
      '@IdempotentMessage({ ack: true }) on Settlements.settle: the RabbitMQ transport runs ' +
        "with noAck: true (Nest's default when the option is left out), so the broker counts " +
        "each delivery acknowledged as it sends it, and the library's ack would close the " +
        'channel (406 PRECONDITION_FAILED, unknown delivery tag). Set noAck: false in the ' +
        "transport's options, or leave ack off",
    );
  });
});
