import { Inject } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { Idempotent } from '../../lib/index.js';
import { type OutageGraphql, type OutageLayer, Writers } from './outage-app.js';

/**
 * The outage app's GraphQL side (Apollo on Express): the same work as its routes, as a
 * mutation. Apart from the app, loaded only by the tests that send GraphQL.
 */
@ObjectType()
class Written {
  @Field(() => Int)
  rows!: number;
}

/** The same work as a GraphQL mutation (Apollo on Express). */
@Resolver(() => Written)
class OutageResolver {
  constructor(@Inject(Writers) private readonly writers: Writers) {}

  @Query(() => Int)
  ready() {
    return 1;
  }

  @Mutation(() => Written)
  @Idempotent()
  write(@Args('layer') layer: string, @Args('tag') tag: string) {
    return this.writers.work(layer as OutageLayer, tag);
  }
}

export const OUTAGE_GRAPHQL: OutageGraphql = {
  module: GraphQLModule.forRoot<ApolloDriverConfig>({
    driver: ApolloDriver,
    autoSchemaFile: true,
    graphiql: false,
  }),
  resolver: OutageResolver,
};
