import { OUTERMOST_SAVEPOINT, typeormSavepointAsWithout } from './typeorm-savepoint-names.js';

describe("typeormSavepointAsWithout: TypeORM's savepoints named as without the library (adversary 83)", () => {
  it.each<[string, unknown, unknown]>([
    // The runner's depth 1 is the request's: its code's own transaction, a BEGIN without it.
    ['its outermost transaction', 'SAVEPOINT typeorm_1', `SAVEPOINT ${OUTERMOST_SAVEPOINT}`],
    ['its release', 'RELEASE SAVEPOINT typeorm_1', `RELEASE SAVEPOINT ${OUTERMOST_SAVEPOINT}`],
    [
      'its rollback',
      'ROLLBACK TO SAVEPOINT typeorm_1',
      `ROLLBACK TO SAVEPOINT ${OUTERMOST_SAVEPOINT}`,
    ],
    // Its first nested one: typeorm_1, as TypeORM names it without the library.
    ['its first nested transaction', 'SAVEPOINT typeorm_2', 'SAVEPOINT typeorm_1'],
    ['released', 'RELEASE SAVEPOINT typeorm_2', 'RELEASE SAVEPOINT typeorm_1'],
    ['rolled back', 'ROLLBACK TO SAVEPOINT typeorm_2', 'ROLLBACK TO SAVEPOINT typeorm_1'],
    ['deeper', 'SAVEPOINT typeorm_12', 'SAVEPOINT typeorm_11'],
    // Not TypeORM's own statement as it sends it: left as it is.
    ['a savepoint of its code', 'SAVEPOINT attempt', 'SAVEPOINT attempt'],
    ['its code naming one', 'ROLLBACK TO typeorm_2', 'ROLLBACK TO typeorm_2'],
    ['with more after it', 'SAVEPOINT typeorm_2; SELECT 1', 'SAVEPOINT typeorm_2; SELECT 1'],
    ['lower case', 'savepoint typeorm_2', 'savepoint typeorm_2'],
    ['no depth', 'SAVEPOINT typeorm_0', 'SAVEPOINT typeorm_0'],
    ['another statement', 'SELECT 1', 'SELECT 1'],
    ['not a text', undefined, undefined],
  ])('%s', (_name, text, expected) => {
    expect(typeormSavepointAsWithout(text)).toBe(expected);
  });
});
