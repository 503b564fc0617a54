import { readsWrappedGetter, type WrappedField } from './wrapped-getters.js';

describe('readsWrappedGetter', () => {
  it.each<[string, WrappedField, boolean]>([
    [
      "a directive's wrapper over a @Field() getter (@upper)",
      { resolveField: false, nestField: true, getter: true },
      true,
    ],
    [
      'a @ResolveField() named as a getter of the class (the parent is its input)',
      { resolveField: true, nestField: true, getter: true },
      false,
    ],
    [
      "a directive's wrapper over a @Field()'s own data (kept as data)",
      { resolveField: false, nestField: true, getter: false },
      false,
    ],
    [
      "a schema-first resolver over a getter (not Nest's field: its read is unknown)",
      { resolveField: false, nestField: false, getter: true },
      false,
    ],
  ])('%s', (_case, field, reads) => {
    expect(readsWrappedGetter(field)).toBe(reads);
  });
});
