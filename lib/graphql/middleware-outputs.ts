import {
  type FieldNode,
  type GraphQLError,
  type GraphQLFieldResolver,
  type GraphQLObjectType,
  type GraphQLOutputType,
  type GraphQLResolveInfo,
  type GraphQLSchema,
} from 'graphql';
import { defineOwn, defineOwnSymbol } from './own-member.js';
import { absentOnReplay, lackedFields } from './absent-fields.js';
import { unnamedPlain } from './bare-objects.js';
import { entryAbsent, entryInstance } from './parent-entry.js';
import { parentRefSource } from './parent-graph.js';
import { ontoNode } from './parent-identity.js';
import { completedOutput, readList } from './completed-output.js';
import { wrapsField } from './field-wrappers.js';
import { type GraphqlModule } from './graphql-module.js';
import { aliasGroups, markErrorUnder, mergedAnswers } from './merged-aliases.js';
import { notedParent, parentData, parentsReader } from './app-parents.js';
import { type SharedRead } from './node-classes.js';
import { keepsOwnMember } from './kept-member.js';
import { leafAgain } from './leaf-again.js';
import { aliasErrorChoice } from './alias-error-choice.js';
import { answerApart, answeredApart, answersApart } from './apart-answers.js';
import { sharedParents } from './alias-parents.js';
import { aliasErrorsRead, answerAliasRead } from './alias-errors.js';
import { indexItems, indexItemsUnread, mayHoldMemberList } from './item-indexes.js';
import { noteOwnLocated } from './jit-located.js';
import { argumentsOf, namedStepsOf } from './named-path.js';
import { answeredMemberAt } from './answered-members.js';
import { namesInside } from './output-names.js';
import { nestField } from './nest-fields.js';
import { notStoredField } from './not-stored-field.js';
import { nulledPlace } from './nulled-place.js';
import { type StoredFieldError } from './field-answer.js';
import {
  type AnswerPath,
  keySteps,
  noteFirstResult,
  noteAppParent,
  insideFirstOutput,
  noteMiddlewarePath,
  replayedOutputAt,
  toldOf,
} from './output-paths.js';
import { errorUnder, fieldErrorAgain } from './replayed-field-error.js';
import { noteRepeated } from './repeated-errors.js';
import { answerAsMember } from './replayed-member.js';
import { fieldResolution } from './resolved-fields.js';
import { noteResolverKind } from './resolver-kind.js';
import { selectedFields, subfieldKeys } from './selection.js';
import { pathOf } from './stored-at-answer.js';

/**
 * Field middleware on an `@Idempotent()` mutation's answer (`@Field({ middleware })`, the
 * global `fieldMiddleware`): its output is stored as the first answer gave it, masked by any
 * layer outside (a `ClassSerializerInterceptor`), and a replay answers that output; the
 * middleware never runs on a replay. The answer commits with the resolver's effects before
 * GraphQL resolves the fields under it (field resolvers see the committed rows), its
 * middleware outputs pending; the operation's answer hook completes it (output-paths.ts,
 * `completeAnswer` of the claim store).
 */

/** The `extensions.code` of a replayed field whose first answer's outputs never came. */
export const FIELD_OUTPUT_PENDING = 'field_output_pending';

/** The message of that error (see `FIELD_OUTPUT_PENDING`). */
export function outputPendingMessage(type: string, field: string): string {
  return (
    `The field ${type}.${field} runs field middleware, whose output was not stored: the first ` +
    'call with this idempotency key committed its work, but its answer did not complete it ' +
    '(its process stopped, or its client left, before the answer was sent; or the output was ' +
    "over the mutation's maxResponseBytes; or another root field's error nulled the whole " +
    'answer and the output could not be made again). The mutation ran once; its other fields are ' +
    'replayed. Read this one with a query.'
  );
}

/** The schemas whose middleware fields answer a replay's stored output. */
const answering = new WeakSet<object>();
/** Whether an object type has middleware fields at any depth under it, by type. */
const middlewareBelow = new WeakMap<object, boolean>();

/**
 * Puts a wrapper on each schema field with field middleware, once per schema: on a replay of
 * the mutation above it (by the operation's context and the field's path), it answers the
 * stored output; otherwise it notes the field's path (at a first answer, for the answer hook
 * to store its output) and runs the field as before. graphql-js reads `fieldDef.resolve` as
 * each field runs, so a wrapper put on before the nested fields resolve serves this operation.
 */
export function answerOutputsOf(graphql: GraphqlModule, schema: GraphQLSchema | undefined): void {
  if (!schema || answering.has(schema)) return;
  answering.add(schema);
  const roots = [schema.getQueryType(), schema.getMutationType(), schema.getSubscriptionType()];
  for (const type of Object.values(schema.getTypeMap())) {
    if (!graphql.isObjectType(type) || type.name.startsWith('__')) continue;
    if (!roots.includes(type)) {
      keepAppParentsOf(type);
      markListsOf(graphql, schema, type);
      answerAliasReadsOf(graphql, type);
    }
    for (const field of Object.values(type.getFields())) {
      const own = field.resolve;
      if (!own || fieldResolution(type, field.name) !== 'middleware') continue;
      const resolve: GraphQLFieldResolver<unknown, unknown> = function (
        this: unknown,
        source,
        args,
        context,
        info,
      ) {
        const path = pathOf(info);
        // The member each abstract value above was answered as (graphql-jit tells none).
        const memberOf = (place: readonly (string | number)[]) => answeredMemberAt(context, place);
        const named = () => namedStepsOf(graphql, info, type.name, undefined, memberOf);
        const viaApp = (rootLength: number) =>
          appResolvedBetween(graphql, info, rootLength, memberOf);
        const replayed = replayedOutputAt(context, path, named, viaApp);
        if (!replayed) {
          const selection = {
            schema,
            nodes: info.fieldNodes,
            fragments: info.fragments,
            variables: info.variableValues,
          };
          noteMiddlewarePath(
            context,
            path,
            named,
            (value, memberAt) => namesInside(graphql, selection, field.type, value, memberAt),
            (value, memberAt, resultAt) =>
              completedOutput(graphql, selection, field.type, value, memberAt, resultAt),
            (at, memberAt) => nulledPlaceIn(graphql, info, at, memberAt),
          );
          let given: unknown;
          try {
            given = own.call(this, source, args, context, info);
          } catch (error) {
            // Noted as thrown, for an answer that does not say where (unanswered-nulls.ts).
            const thrown = Promise.reject(error);
            thrown.catch(() => undefined);
            noteFirstResult(context, path, thrown);
            throw error;
          }
          // Each member in a list marked with its index before GraphQL completes it.
          const mark = (raw: unknown) => {
            const value = readList(graphql, field.type, raw);
            try {
              indexItems(graphql, selection, context, field.type, value, path);
            } catch {
              // Unmarked: its list items' members are not noted (see `itemIndexes`).
            }
            return value;
          };
          const result =
            typeof (given as PromiseLike<unknown> | null)?.then === 'function'
              ? Promise.resolve(given).then(mark)
              : mark(given);
          noteFirstResult(context, path, result);
          return result;
        }
        // The key twice in one operation: the first answer's middleware result, answered again.
        if (replayed.kind === 'shared') {
          const { remade } = replayed;
          if (!remade) return replayed.result;
          // As a stored output is answered: what the first call selected, and no more.
          const answer = (result: unknown) => {
            const made = remade(result);
            if (!made) return result;
            const { key, members } = made;
            const value = outputValue(
              {
                graphql,
                schema,
                info,
                members,
                errors: {},
                field: { key, path },
                names: namesOf(made.names, undefined),
              },
              field.type,
              made.wire,
              info.fieldNodes,
              key,
              made.named,
            );
            if (value instanceof Error) throw ownLocated(value, context, path);
            return value;
          };
          const result = replayed.result;
          return typeof (result as PromiseLike<unknown> | null)?.then === 'function'
            ? Promise.resolve(result).then(answer)
            : answer(result);
        }
        if (replayed.kind === 'pending') throw outputPending(graphql, type.name, field.name);
        if (replayed.kind === 'unstored') throw notStoredField(graphql, type.name, field.name);
        // Nulled from above at the first answer: the error that nulled it, at its place.
        if (replayed.kind === 'nulled') {
          const again = fieldErrorAgain(graphql, replayed.error, replayed.path);
          // Once in the answer where the replay makes it again itself (repeated-errors.ts).
          noteRepeated(again);
          throw ownLocated(again, context, path);
        }
        const { members, errors, key, parents } = replayed;
        const names = namesOf(replayed.names, replayed.told);
        // The parents' one graph, read once for the whole replay (app-parents.ts).
        const read = parentsReader(replayed.outputsGraph);
        let value = outputValue(
          {
            graphql,
            schema,
            info,
            members,
            errors,
            field: { key, path },
            names,
            parents,
            read,
            context,
          },
          field.type,
          replayed.wire,
          info.fieldNodes,
          key,
          replayed.named,
        );
        // The first call's other aliases of this field, each rebuilt with this selection and
        // merged in: each selected field read from the alias that stored it (merged-aliases.ts).
        for (const other of replayed.others ?? []) {
          const built = outputValue(
            {
              graphql,
              schema,
              info,
              members,
              errors: other.errors,
              field: { key: other.key, path },
              names,
              parents,
              read,
              context,
            },
            field.type,
            other.wire,
            info.fieldNodes,
            other.key,
            replayed.named,
          );
          value = mergedAnswers(value, built);
        }
        // The first answer's error at this field, or under it, answered again: its output null.
        if (value instanceof Error) throw ownLocated(value, context, path);
        return value;
      };
      // Still Nest's middleware to the library's walk (see `fieldResolution`).
      noteResolverKind(resolve, 'middleware');
      field.resolve = resolve;
    }
  }
}

/** Where GraphQL put the null for an error at `path` of `info`'s operation (nulled-place.ts). */
function nulledPlaceIn(
  graphql: GraphqlModule,
  info: GraphQLResolveInfo,
  path: readonly (string | number)[],
  memberAt: (key: string) => string | undefined,
): number | undefined {
  try {
    const { schema, operation } = info;
    const root = schema.getRootType(operation.operation);
    if (!root) return undefined;
    // The operation's root selection, read as a field's.
    const top = { kind: graphql.Kind.FIELD, selectionSet: operation.selectionSet } as FieldNode;
    const selection = {
      schema,
      nodes: [top],
      fragments: info.fragments,
      variables: info.variableValues,
    };
    return nulledPlace(graphql, selection, root, path, memberAt);
  } catch {
    // An executor's info without them (not told: the first error under the ancestor taken).
    return undefined;
  }
}

/**
 * Puts a wrapper on each field of `type` the app resolves (a `@ResolveField()`): at a first
 * answer, where its parent is inside a middleware field's output, the parent's own data is
 * noted (see app-parents.ts), then the app's resolver runs as before, on replays too.
 */
function keepAppParentsOf(type: GraphQLObjectType): void {
  for (const field of Object.values(type.getFields())) {
    const own = field.resolve;
    if (!own || fieldResolution(type, field.name) !== 'app') continue;
    const resolve: GraphQLFieldResolver<unknown, unknown> = function (
      this: unknown,
      source,
      args,
      context,
      info,
    ) {
      if (typeof source === 'object' && source !== null) {
        noteAppParent(
          context,
          () => pathOf(info).slice(0, -1),
          (answer) => notedParent(source, type.name, answer, lackedFieldsOf(type, source)),
        );
      }
      return own.call(this, source, args, context, info);
    };
    noteResolverKind(resolve, 'app');
    field.resolve = resolve;
  }
}

/**
 * The fields GraphQL reads from a parent of `type` (not the app's) that `source` lacks
 * (absent-fields.ts `lackedFields`), read where Nest reads each: its class property.
 */
function lackedFieldsOf(type: GraphQLObjectType, source: object): string[] {
  const fields = Object.keys(type.getFields())
    .filter((name) => fieldResolution(type, name) !== 'app')
    .map((name) => {
      const reading = nestField(type.name, name);
      return { name, property: reading?.property ?? name, filled: Boolean(reading?.fallback) };
    });
  return lackedFields(fields, (property) => property in source);
}

/**
 * Puts a wrapper on each field of `type` read from its parent's property whose value is an
 * object (or a list of them): a replay's rebuilt parent holds a read of the library's there
 * where the field's aliases were each nulled by an error of their own (alias-errors.ts),
 * which Nest's reader gives as it is; the wrapper reads it for the alias GraphQL resolves.
 */
function answerAliasReadsOf(graphql: GraphqlModule, type: GraphQLObjectType): void {
  for (const field of Object.values(type.getFields())) {
    if (!graphql.isCompositeType(graphql.getNamedType(field.type))) continue;
    const kind = fieldResolution(type, field.name);
    // Never a field the executor's field resolver reads (see field-wrappers.ts).
    if (kind !== 'property' || !wrapsField(field)) continue;
    const own = field.resolve!;
    const resolve: GraphQLFieldResolver<unknown, unknown> = function (
      this: unknown,
      source,
      args,
      context,
      info,
    ) {
      // Given apart from the property a kept parent's app resolvers read (apart-answers.ts).
      const answered = answeredApart(source, field.name);
      const given = answered ? answered.value : own.call(this, source, args, context, info);
      return answerAliasRead(given, args, context, info);
    };
    // Told as the field was (its resolver's kind read before the wrapper).
    noteResolverKind(resolve, kind);
    field.resolve = resolve;
  }
}

/**
 * Puts a wrapper on each field of `type` whose value may hold a list of a union's or an
 * interface's members, but a middleware field's (which marks its own): at a first answer,
 * where the field is inside a middleware field's output and the walk of that output did not
 * read its value (a getter, loaded on each read), the items GraphQL completes are marked with
 * their places as GraphQL gets them (item-indexes.ts, `indexItemsUnread`), so that the member
 * each item's `resolveType()` tells is noted at its own place (adversary 83).
 */
function markListsOf(graphql: GraphqlModule, schema: GraphQLSchema, type: GraphQLObjectType) {
  for (const field of Object.values(type.getFields())) {
    if (!mayHoldMemberList(graphql, field.type)) continue;
    const kind = fieldResolution(type, field.name);
    if (kind === 'middleware' || !wrapsField(field)) continue;
    const own = field.resolve!;
    const resolve: GraphQLFieldResolver<unknown, unknown> = function (
      this: unknown,
      source,
      args,
      context,
      info,
    ) {
      const given = own.call(this, source, args, context, info);
      const path = pathOf(info);
      if (!insideFirstOutput(context, path)) return given;
      const selection = {
        schema,
        nodes: info.fieldNodes,
        fragments: info.fragments,
        variables: info.variableValues,
      };
      const mark = (raw: unknown) => {
        const value = readList(graphql, field.type, raw);
        indexItemsUnread(graphql, selection, context, field.type, value, path);
        return value;
      };
      return typeof (given as PromiseLike<unknown> | null)?.then === 'function'
        ? Promise.resolve(given).then(mark)
        : mark(given);
    };
    // Told as the field was (its resolver's kind read before the wrapper).
    noteResolverKind(resolve, kind);
    field.resolve = resolve;
  }
}

/**
 * Whether a field the app resolves (a `@ResolveField()`) is between the mutation's field (the
 * first `rootLength` steps of the path) and the field GraphQL is resolving: each step's field
 * found by its response key in the operation, under the type graphql-js' `typename` tells, or
 * where it tells none (graphql-jit: adversary 84), under the type the schema gives the field
 * above: under a union or interface, the member the replay answered its value as
 * (`memberOf`, answered-members.ts), else each member that selects it (adversary 89: one of
 * them an app's field is one between). Not found: none is known.
 */
function appResolvedBetween(
  graphql: GraphqlModule,
  info: GraphQLResolveInfo,
  rootLength: number,
  memberOf?: (place: readonly (string | number)[]) => string | undefined,
): boolean {
  let length = 0;
  for (let at: GraphQLResolveInfo['path'] | undefined = info.path; at; at = at.prev) length++;
  let found = false;
  const onField = (index: number, type: GraphQLObjectType, name: string) => {
    if (index >= rootLength && index < length - 1 && fieldResolution(type, name) === 'app') {
      found = true;
    }
  };
  namedStepsOf(graphql, info, undefined, onField, memberOf);
  return found;
}

/**
 * An error under the field (its own `path`), noted for graphql-jit, which locates what a
 * resolver throws at the field: the answer hook puts its path and locations back (see
 * jit-located.ts).
 */
function ownLocated(error: Error, context: unknown, path: AnswerPath): Error {
  const { path: ownPath, locations } = error as { path?: unknown; locations?: unknown };
  if (Array.isArray(ownPath) && Array.isArray(locations)) {
    noteOwnLocated(context, { path, message: error.message, locations, ownPath });
  }
  return error;
}

/**
 * A rebuilt error under a stored alias at the retry's place of it (`at`, the path of the
 * response key that reads it): its steps under the alias (`under` steps of its path are the
 * alias's place) after that place. The error itself where it is there already.
 */
function relocatedError(
  graphql: GraphqlModule,
  error: Error,
  at: AnswerPath,
  under: number | undefined,
): Error {
  const own = error as Partial<GraphQLError>;
  if (under === undefined || !Array.isArray(own.path) || at.length === 0) return error;
  const path = [...at, ...own.path.slice(under)];
  if (path.length === own.path.length && path.every((step, i) => step === own.path![i])) {
    return error;
  }
  return new graphql.GraphQLError(error.message, {
    path,
    source: own.source,
    positions: own.positions,
    extensions: own.extensions,
    originalError: own.originalError ?? undefined,
  });
}

/** The error a replayed middleware field answers when its output never came. */
export function outputPending(graphql: GraphqlModule, type: string, field: string): GraphQLError {
  return new graphql.GraphQLError(outputPendingMessage(type, field), {
    extensions: { code: FIELD_OUTPUT_PENDING },
  });
}

/**
 * Whether a field with middleware may be answered under `type` (at any depth, members of
 * unions and interfaces too): only then is a mutation's answer stored with its outputs pending.
 */
export function hasMiddlewareUnder(
  graphql: GraphqlModule,
  schema: GraphQLSchema,
  type: GraphQLOutputType,
): boolean {
  const named = graphql.getNamedType(type);
  const known = middlewareBelow.get(named);
  if (known !== undefined) return known;
  const seen = new Set<string>();
  const visit = (outputType: GraphQLOutputType): boolean => {
    const inner = graphql.getNamedType(outputType);
    if (seen.has(inner.name)) return false;
    seen.add(inner.name);
    if (graphql.isAbstractType(inner)) return schema.getPossibleTypes(inner).some(visit);
    if (!graphql.isObjectType(inner)) return false;
    return Object.values(inner.getFields()).some(
      (field) => fieldResolution(inner, field.name) === 'middleware' || visit(field.type),
    );
  };
  const found = visit(named);
  middlewareBelow.set(named, found);
  return found;
}

/** Where `key` (at or under the middleware field's) is in the replay's answer. */
function placeOf(field: Conversion['field'], key: string): AnswerPath {
  return [...field.path, ...keySteps(key.slice(field.key.length + 1))];
}

interface Conversion {
  graphql: GraphqlModule;
  schema: GraphQLSchema;
  info: GraphQLResolveInfo;
  members: Readonly<Record<string, string>>;
  /** The stored errors at or under the output, by key (see `StoredOutputs.errors`). */
  errors: Readonly<Record<string, StoredFieldError>>;
  /** The middleware field: its key under the mutation, and its path in the replay's answer. */
  field: { key: string; path: AnswerPath };
  /** The stored named keys (`StoredOutputs.names`): by named key, and each key's named key. */
  names?: StoredNames;
  /** The kept own data of app-resolved fields' parents (`StoredOutputs.parents`), by key. */
  parents?: Readonly<Record<string, unknown>>;
  /** Reads a node of the parents' one graph (`StoredOutputs.outputsGraph`), if they have one. */
  read?: SharedRead;
  /** The replay's operation context, where its errors under the output are noted for jit. */
  context?: unknown;
}

interface StoredNames {
  byName: Readonly<Record<string, string>>;
  byKey: Readonly<Record<string, string>>;
}

function namesOf(
  names: Readonly<Record<string, string>> | undefined,
  told: Readonly<Record<string, string>> | undefined,
): StoredNames | undefined {
  if (!names) return undefined;
  return { byName: names, byKey: told ?? toldOf(names) };
}

/**
 * The response key under the stored object at `key` that answers the field the retry selects
 * as `step` (its name and arguments) under response keys `asked`: the first call's key of the
 * same named field, else one of `asked` the stored object holds, unless the first call's key
 * there was another field's. Undefined: the first call did not select it.
 */
export function storedSubkey(
  stored: Readonly<Record<string, unknown>>,
  key: string,
  named: string | undefined,
  step: string,
  asked: readonly string[],
  names: StoredNames | undefined,
): string | undefined {
  const name = named === undefined ? undefined : `${named}.${step}`;
  const first = name === undefined ? undefined : names?.byName[name];
  if (first !== undefined && first.startsWith(`${key}.`)) {
    const responseKey = first.slice(key.length + 1);
    if (!responseKey.includes('.') && responseKey in stored) return responseKey;
  }
  return asked.find((responseKey) => storedAs(stored, key, name, responseKey, names));
}

/**
 * Whether the stored object at `key` holds `responseKey` as the field named `name` (its named
 * key): it holds the key, and the first call's key there was no other field's.
 */
export function storedAs(
  stored: Readonly<Record<string, unknown>>,
  key: string,
  name: string | undefined,
  responseKey: string,
  names: StoredNames | undefined,
): boolean {
  if (!(responseKey in stored)) return false;
  const told = names?.byKey[`${key}.${responseKey}`];
  return name === undefined || told === undefined || told === name;
}

/**
 * A stored output (as the answer held it: by response key, each scalar as it was written) as
 * the field's value again: each scalar through its `parseValue()`, so that GraphQL writes the
 * same bytes; each object by its fields' names (what GraphQL's resolvers read), as far as the
 * retry selects it; a union's or interface's member told by the member noted at the first
 * answer (`members`, by `key`), or its `__typename`. A null where the first answer had an
 * error (at it, or under it) is that error again (see `fieldErrorAgain`), which graphql-js
 * throws where the value holds it, as it threw the first.
 */
export function outputValue(
  conversion: Conversion,
  type: GraphQLOutputType,
  wire: unknown,
  nodes: readonly FieldNode[],
  key: string,
  named?: string,
): unknown {
  const { graphql, schema, info, members } = conversion;
  if (wire === null || wire === undefined) {
    const failure = errorUnder(conversion.errors, key);
    if (!failure) return null;
    const place = failure.steps.length > 0 ? placeOf(conversion.field, key) : undefined;
    const again = fieldErrorAgain(graphql, failure.error, place && [...place, ...failure.steps]);
    // Under the field at `place`, whose value it is: graphql-jit locates it there, and the
    // answer hook puts its own path and locations back (adversary 90; jit-located.ts).
    if (place && conversion.context !== undefined) ownLocated(again, conversion.context, place);
    // Where it was under the null, as the rebuilt values read it: another alias's object
    // merged with it holds it there (merged-aliases.ts).
    const steps = place && fieldSteps(conversion, type, nodes, failure.steps);
    return steps ? markErrorUnder(again, steps) : again;
  }
  if (graphql.isNonNullType(type)) {
    return outputValue(conversion, type.ofType, wire, nodes, key, named);
  }
  if (graphql.isListType(type)) {
    if (!Array.isArray(wire)) return wire;
    return wire.map((item, i) =>
      outputValue(conversion, type.ofType, item, nodes, `${key}.${i}`, named && `${named}.${i}`),
    );
  }
  // Written by its scalar as the answer held it (leaf-again.ts).
  if (graphql.isLeafType(type)) return leafAgain(type, wire);
  if (typeof wire !== 'object' || Array.isArray(wire)) return wire;
  const stored = wire as Record<string, unknown>;
  let concrete: GraphQLObjectType | undefined = graphql.isObjectType(type) ? type : undefined;
  if (!concrete) {
    const name = members[key] ?? stored.__typename;
    const found = typeof name === 'string' ? schema.getType(name) : undefined;
    if (found && graphql.isObjectType(found)) concrete = found;
  }
  if (!concrete) return { ...stored };
  const fields = concrete.getFields();
  // The parent of a field the app resolves: its own data as it was at the first answer (the
  // resolver runs again and reads it), the selected fields over it as the answer wrote them.
  const kept = conversion.parents?.[key];
  const ownData = parentData(kept, conversion.read);
  // Without a prototype where the first call's parent had none (`i: null`, as the value's
  // `__instance`: bare-objects.ts), its own data over it (adversary 110).
  const value = unnamedPlain(entryInstance(kept)) as Record<string, unknown>;
  // As a spread copies (its own enumerable members, symbols too), each defined, never set.
  for (const name of Reflect.ownKeys(ownData)) {
    if (!Object.prototype.propertyIsEnumerable.call(ownData, name)) continue;
    const item: unknown = Reflect.get(ownData, name);
    if (typeof name === 'symbol') defineOwnSymbol(value, name, item);
    else defineOwn(value, name, item);
  }
  /** The selected fields the first call's parent lacked: left off (absent-fields.ts). */
  const absent = absentOnReplay(entryAbsent(kept));
  /** The fields answered apart from its kept data (see `answersApart`), by name. */
  const apartAnswers: [string, unknown][] = [];
  const selection = { nodes, fragments: info.fragments, variables: info.variableValues };
  for (const [name, fieldNodes] of selectedFields(graphql, schema, concrete, selection)) {
    const definition = fields[name];
    if (!definition) continue;
    // Its resolver's input is the parent's own data of that name, kept as it was (a raw
    // column it maps), never its answer.
    if (kept !== undefined && fieldResolution(concrete, name) === 'app') continue;
    const step = name + argumentsOf(graphql, definition, fieldNodes[0], info.variableValues);
    const asked = fieldNodes.map((each) => each.alias?.value ?? name);
    const inner = named === undefined ? undefined : `${named}.${step}`;
    // Each response key from its own stored object where the first call stored it so (one
    // field under two aliases, each its own selection), merged into the one value GraphQL's
    // default resolver reads for all of them (see merged-aliases.ts).
    // The first call's other response keys of this very field (told by their named keys).
    const others =
      inner === undefined
        ? []
        : Object.keys(stored).filter(
            (responseKey) => conversion.names?.byKey[`${key}.${responseKey}`] === inner,
          );
    const groups = aliasGroups(
      asked,
      fieldNodes,
      (responseKey) => storedAs(stored, key, inner, responseKey, conversion.names),
      () => storedSubkey(stored, key, named, step, asked, conversion.names),
      others,
    );
    // Where Nest reads it (a `@Field({ name })` on another property).
    const property = nestField(concrete.name, name)?.property;
    const own = property ?? name;
    let item: unknown;
    if (groups.some((group) => group.storedKey !== undefined)) {
      // The kept own data where the answer is no other value of it (kept-member.ts): what
      // the app's resolver read at the first answer (a raw `7` the answer wrote `"7"`).
      const wires = groups.flatMap(({ storedKey }) =>
        storedKey === undefined ? [] : [stored[storedKey]],
      );
      const member = {
        has: Object.prototype.hasOwnProperty.call(ownData, own),
        value: ownData[own],
      };
      const resolution = fieldResolution(concrete, name);
      if (keepsOwnMember(graphql, resolution, definition.type, member, wires)) continue;
      // Lacked by the first call's parent, answered null: left off, as GraphQL's read of it
      // answers null again (a field behind middleware answers its stored output anyway).
      if (absent.has(name) && !member.has && wires.every((wire) => wire === null)) continue;
      // A property: every alias reads the one object, rebuilt over the data kept at any of
      // them (alias-parents.ts), so the kept value wins whichever alias merges first.
      const grouping =
        resolution === 'property'
          ? {
              ...conversion,
              parents: sharedParents(
                conversion.parents,
                groups.flatMap(({ storedKey }) =>
                  storedKey === undefined ? [] : [`${key}.${storedKey}`],
                ),
              ),
            }
          : conversion;
      // Each response key's own error, where its alias was nulled (alias-errors.ts): the one
      // under the stored alias whose failed field it selects (alias-error-choice.ts).
      const failed = new Map<string, Error>();
      const groupErrors: { error: Error; under: number; grouped: readonly FieldNode[] }[] = [];
      for (const { storedKey, nodes: grouped } of groups) {
        if (storedKey === undefined) continue;
        const built = outputValue(
          grouping,
          definition.type,
          stored[storedKey],
          grouped,
          `${key}.${storedKey}`,
          inner,
        );
        if (built instanceof Error) {
          const under = placeOf(conversion.field, `${key}.${storedKey}`).length;
          groupErrors.push({ error: built, under, grouped });
        }
        item = mergedAnswers(item, built);
      }
      /** Each error's path steps under its stored alias (relocated under the retry's). */
      const under = new Map<Error, number>();
      for (const node of fieldNodes) {
        const responseKey = node.alias?.value ?? name;
        if (failed.has(responseKey)) continue;
        const candidates = groupErrors.map(({ error, under: at, grouped }) => ({
          step: (error as { path?: readonly (string | number)[] }).path?.[at],
          own: grouped.includes(node),
        }));
        // Its sub-fields as GraphQL collects them with the retry's fragments and variables.
        const subType = graphql.getNamedType(definition.type);
        const keys = subfieldKeys(
          graphql,
          schema,
          graphql.isObjectType(subType) ? subType : undefined,
          node,
          selection,
        );
        const chosen = aliasErrorChoice(keys, candidates);
        if (chosen === undefined) continue;
        failed.set(responseKey, groupErrors[chosen].error);
        under.set(groupErrors[chosen].error, groupErrors[chosen].under);
      }
      // Read by the wrapper on composite property fields only (`answerAliasReadsOf`).
      const readable =
        resolution === 'property' && graphql.isCompositeType(graphql.getNamedType(definition.type));
      if (item instanceof Error && readable) {
        item = aliasErrorsRead(failed, item, (error, info) =>
          relocatedError(graphql, error, pathOf(info), under.get(error)),
        );
      }
    } else if (fieldResolution(concrete, name) === 'property') {
      // Not selected by the first call: refused, never a made-up null (graphql-js throws it).
      item = notStoredField(graphql, concrete.name, name);
    } else continue;
    const apart = answersApart({
      kept: kept !== undefined,
      resolution: fieldResolution(concrete, name),
      composite: graphql.isCompositeType(graphql.getNamedType(definition.type)),
      keptProperty: Object.prototype.hasOwnProperty.call(ownData, own),
    });
    if (apart) {
      // The app's resolvers read the kept raw object (all its data, where the answer nulled
      // it or selected less of it); GraphQL's read answers the rebuilt one (adversary 90).
      // Given to the object the replay answers (its node, where adopted: below).
      apartAnswers.push([name, item]);
      continue;
    }
    defineOwn(value, name, item);
    // Never over the input of the app's resolver of it (a `@ResolveField('price')` over
    // `@Field({ name: 'price' }) priceCents` reads the cents, not its answer: adversary 101).
    if (property !== undefined && property !== name && fieldResolution(concrete, name) !== 'app') {
      defineOwn(value, property, item);
    }
  }
  // Its own object where its data reaches back to it (`line.order.lines[i]`): that very node
  // of the outputs' graph (`s`), as the value's `__parent` makes it (parent-identity.ts).
  const node = kept === undefined ? undefined : conversion.read?.adopt?.(parentRefSource(kept));
  const made = (node ? ontoNode(value, node) : value) as Record<string, unknown>;
  for (const [name, item] of apartAnswers) answerApart(made, name, item);
  if (graphql.isAbstractType(type)) {
    // Told by GraphQL's default from `__typename` where the type has no resolveType().
    if (!type.resolveType) made.__typename = concrete.name;
    answerAsMember(type, made, concrete.name);
  }
  return made;
}

/**
 * The steps of an error under a null (response keys and indexes) as the rebuilt values hold
 * them (the properties Nest reads), under `type` as `nodes` select it. Undefined where one is
 * not told (an abstract type, a key not selected).
 */
function fieldSteps(
  conversion: Conversion,
  type: GraphQLOutputType,
  nodes: readonly FieldNode[],
  steps: readonly (string | number)[],
): (string | number)[] | undefined {
  const { graphql, schema, info } = conversion;
  const named: (string | number)[] = [];
  let current = type;
  let at = nodes;
  for (const step of steps) {
    const inner = graphql.isNonNullType(current) ? current.ofType : current;
    if (typeof step === 'number') {
      if (!graphql.isListType(inner)) return undefined;
      current = inner.ofType;
      named.push(step);
      continue;
    }
    if (!graphql.isObjectType(inner)) return undefined;
    const selection = { nodes: at, fragments: info.fragments, variables: info.variableValues };
    const found = [...selectedFields(graphql, schema, inner, selection)].find(([name, each]) =>
      each.some((node) => (node.alias?.value ?? name) === step),
    );
    const definition = found && inner.getFields()[found[0]];
    if (!found || !definition) return undefined;
    named.push(nestField(inner.name, found[0])?.property ?? found[0]);
    current = definition.type;
    at = found[1];
  }
  return named;
}
