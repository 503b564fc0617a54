import { parentKeeping, type ParentKeepingTold } from './parent-keeping.js';

describe('parentKeeping', () => {
  const none: ParentKeepingTold = {
    byClass: false,
    selectsAppField: false,
    hasAppField: false,
    underAppParent: false,
  };
  const cases: [string, Partial<ParentKeepingTold>, ReturnType<typeof parentKeeping>][] = [
    [
      'no resolver of the app reads it: nothing more',
      {},
      { unselected: 'none', selectedInputs: false, children: false },
    ],
    [
      'a selected field of the app: unselected data in PARENT (left out first), the subtree kept',
      { selectsAppField: true, hasAppField: true },
      { unselected: 'parent', selectedInputs: true, children: 'data' },
    ],
    [
      'a selected field of the app under class-transformer: KEPT (the serializer reads it)',
      { selectsAppField: true, hasAppField: true, byClass: true },
      { unselected: 'kept', selectedInputs: true, children: 'class' },
    ],
    [
      'a field of the app not selected (a retry may select it): in PARENT',
      { hasAppField: true },
      { unselected: 'parent', selectedInputs: true, children: 'data' },
    ],
    [
      'under a selected field of an app parent: in PARENT, the subtree kept',
      { underAppParent: true },
      { unselected: 'parent', selectedInputs: true, children: 'data' },
    ],
    [
      'class-transformer: all of it in KEPT, its subtree by class',
      { byClass: true },
      { unselected: 'kept', selectedInputs: false, children: 'class' },
    ],
    [
      'class-transformer and an app parent: KEPT, the inputs too',
      { byClass: true, underAppParent: true },
      { unselected: 'kept', selectedInputs: true, children: 'class' },
    ],
  ];
  it.each(cases)('%s', (_name, told, expected) => {
    expect(parentKeeping({ ...none, ...told })).toEqual(expected);
  });
});
