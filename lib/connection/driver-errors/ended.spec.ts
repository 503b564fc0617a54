import { DataLayerEndedError, isEndedDataLayer } from './ended.js';

class TypeORMError extends Error {
  override get name() {
    return 'TypeORMError';
  }
}

describe('isEndedDataLayer', () => {
  it.each([
    ["Kysely's destroyed driver", new Error('driver has already been destroyed'), true],
    ["TypeORM's destroyed DataSource", new TypeORMError('Driver not Connected'), true],
    ['the DataSource gone when the library asks for its pool', new DataLayerEndedError('x'), true],
    ['another TypeORM error', new TypeORMError('Entity metadata was not found'), false],
    ['the same words in another class', new TypeError('driver has already been destroyed'), false],
    ['a handler error', new Error('not found'), false],
    ['not an error', 'driver has already been destroyed', false],
    ['null', null, false],
  ])('%s: %s', (_name, error, expected) => {
    expect(isEndedDataLayer(error)).toBe(expected);
  });
});
