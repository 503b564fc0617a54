import { answerMembersOf } from './replayed-member.js';
import {
  type GraphQLInputType,
  type GraphQLOutputType,
  type GraphQLResolveInfo,
  type GraphQLSchema,
} from 'graphql';
import { type IdempotencyRequest } from '../shapes/idempotency-request.js';

/**
 * What the library reads of a resolver call: the four arguments GraphQL gives a resolver
 * (`root, args, context, info`), typed here as far as it reads them so that the library
 * imports nothing of `graphql` or `@nestjs/graphql` (both optional peers).
 */
export interface GraphqlField {
  /** The operation the field is part of. */
  operation: string;
  /** A field of the operation's root type (`Mutation.createTransfer`), not of a nested object. */
  root: boolean;
  /** The field's name in the schema. */
  fieldName: string;
  /** Its name in the answer: its alias, or its name when it has none. */
  responseKey: string;
  /** Its arguments, as GraphQL coerced them (literals and variables alike), before any pipe. */
  args: Record<string, unknown>;
  /** The HTTP request the operation came in, when the driver's context holds it. */
  request: IdempotencyRequest | undefined;
  /** The field's type, its arguments' types and the schema: how its values are written. */
  types?: FieldTypes;
}

/** What the schema says of a field (see `wire-value.ts`). */
export interface FieldTypes {
  schema: GraphQLSchema;
  returnType: GraphQLOutputType;
  args: Record<string, GraphQLInputType>;
  /** The field's call, for a union's or an interface's `resolveType()` (see `wire-value.ts`). */
  call: ResolverCall;
}

/** The context and the info GraphQL gave the field's resolver. */
export interface ResolverCall {
  context: unknown;
  info: GraphQLResolveInfo;
}

interface ResolveInfo {
  fieldName?: unknown;
  operation?: { operation?: unknown };
  path?: { key?: unknown; prev?: unknown };
  schema?: GraphQLSchema;
  returnType?: GraphQLOutputType;
  parentType?: {
    getFields?: () => Record<
      string,
      { args?: readonly { name: string; type: GraphQLInputType }[] } | undefined
    >;
  };
}

/**
 * Reads the field from the resolver's arguments (Nest's `context.getArgs()` on a `graphql`
 * context). The HTTP request is where the drivers put it: `req` (Apollo, and Mercurius with
 * Nest's default context), else Mercurius' `reply.request`.
 */
export function readGraphqlField(resolverArgs: readonly unknown[]): GraphqlField {
  const [, args, context, info] = resolverArgs as [
    unknown,
    Record<string, unknown> | undefined,
    Record<string, unknown> | undefined,
    ResolveInfo | undefined,
  ];
  const fieldName = typeof info?.fieldName === 'string' ? info.fieldName : '';
  const key = info?.path?.key;
  return {
    operation: String(info?.operation?.operation ?? ''),
    root: info?.path !== undefined && info.path.prev === undefined,
    fieldName,
    responseKey: typeof key === 'string' ? key : fieldName,
    args: args ?? {},
    request: requestOf(context),
    types: typesOf(info, fieldName, context),
  };
}

function typesOf(
  info: ResolveInfo | undefined,
  fieldName: string,
  context: unknown,
): FieldTypes | undefined {
  const definition = info?.parentType?.getFields?.()[fieldName];
  if (!info?.schema || !info.returnType || !definition) return undefined;
  const args: Record<string, GraphQLInputType> = {};
  for (const arg of definition.args ?? []) args[arg.name] = arg.type;
  // GraphQL's own info (its schema and return type say so), read above as far as needed.
  const call = { context, info: info as GraphQLResolveInfo };
  // Before any operation of this schema is compiled with the app's own resolveType()s (an
  // executor with jit compiles a document at its second run, whatever the first came to).
  answerMembersOf(info.schema);
  return { schema: info.schema, returnType: info.returnType, args, call };
}

function requestOf(context: Record<string, unknown> | undefined): IdempotencyRequest | undefined {
  const candidates = [
    context?.req,
    (context?.reply as { request?: unknown } | undefined)?.request,
    context?.request,
  ];
  return candidates.find(isRequest);
}

function isRequest(value: unknown): value is IdempotencyRequest {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { headers?: unknown }).headers === 'object'
  );
}
