import { Int, Mutation, Query, ResolveField, Resolver, Subscription } from '@nestjs/graphql';
import {
  calledKind,
  declaredKind,
  resolvedField,
  type ResolverKind,
  resolverProblem,
} from './resolver-placement.js';

describe('resolverProblem', () => {
  it.each<[ResolverKind, string | undefined]>([
    ['mutation', undefined],
    ['query', 'a GraphQL query is safe'],
    ['subscription', 'a GraphQL subscription is a stream of events'],
    ['field', 'a @ResolveField() runs once per object of an answer'],
  ])('%s: %s', (kind, expected) => {
    const problem = resolverProblem('@Idempotent() on R.m', kind);
    if (expected === undefined) expect(problem).toBeUndefined();
    else expect(problem).toMatch(new RegExp(`^@Idempotent\\(\\) on R\\.m: ${escape(expected)}`));
  });
});

describe('calledKind', () => {
  it.each<[string, boolean, ResolverKind]>([
    ['mutation', true, 'mutation'],
    ['query', true, 'query'],
    ['subscription', true, 'subscription'],
    ['mutation', false, 'field'],
    ['query', false, 'field'],
    ['', true, 'query'],
  ])('a %s field at the root: %s -> %s', (operation, root, kind) => {
    expect(calledKind(operation, root)).toBe(kind);
  });
});

/** Marked by `@nestjs/graphql`'s own decorators, as an app's resolver is. */
@Resolver(() => Int)
class Methods {
  @Query(() => Int)
  query() {}

  @Mutation(() => Int)
  mutation() {}

  @Subscription(() => Int)
  subscription() {}

  @ResolveField(() => Int)
  field() {}

  plain() {}
}

describe('declaredKind', () => {
  it.each<[keyof Methods, ResolverKind | undefined]>([
    ['query', 'query'],
    ['mutation', 'mutation'],
    ['subscription', 'subscription'],
    ['field', 'field'],
    ['plain', undefined],
  ])('%s', (name, kind) => {
    expect(declaredKind(Methods.prototype[name])).toBe(kind);
  });
});

@Resolver('Transfer')
class TransferFields {
  @ResolveField(() => Int)
  receipt() {}

  @ResolveField('fees', () => Int)
  feesOf() {}

  @Mutation(() => Int)
  mutation() {}
}

describe('resolvedField', () => {
  it.each<[keyof TransferFields, string | undefined]>([
    ['receipt', 'Transfer.receipt'],
    ['feesOf', 'Transfer.fees'], // named in the decorator
    ['mutation', undefined],
  ])('%s', (name, expected) => {
    expect(resolvedField(TransferFields, name, TransferFields.prototype[name])).toBe(expected);
  });
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\@]/g, '\\$&');
}
