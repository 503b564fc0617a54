import { jest } from '@jest/globals';
import {
  type CallHandler,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
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
import { type Pool } from 'pg';
import { map, type Observable } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 65: an interceptor outside `@Idempotent()` that writes a field of the
 * mutation's value (a global masking interceptor: `value.email = mask(value.email)`), where
 * that field is a getter with a setter (an encapsulated `get email()` / `set email()` pair, as
 * TypeScript classes hold their state), breaks the FIRST answer: with the state in an ES
 * `#private` field, the first answer is `data: null` and "Cannot write private member #email
 * to an object whose class did not declare it" for a mutation that committed; with it in a
 * TypeScript `private _email`, the client is sent the UNMASKED email. Its replay, and the app
 * without the library, answer it masked.
 *
 * The app (Apollo on Express, Mercurius on Fastify; the pool seam): a global interceptor
 * (`APP_INTERCEPTOR`) masking the `email` of every value it sees, and a code-first model:
 *
 *   @ObjectType() class Account {
 *     @Field(() => Int) id; @Field() name;
 *     #email; @Field() get email() { return this.#email } set email(v) { this.#email = v }
 *   }
 *   (and Profile, the same with `private _email`)
 *
 * What happens: storing reads `email` through its getter, so the field is "replaced"
 * (`readsThroughAccessor`, lib/graphql/wire-value.ts:386-392), and the first answer is
 * `over(source, replaced)` (wire-value.ts:473, 552-575; run-field.ts:115): a Proxy with a `get` trap only. The
 * outer `value.email = masked` takes the Proxy's default [[Set]]: the target finds the class's
 * setter and calls it with the receiver, the Proxy, as `this` (the `get` trap binds getters
 * and methods to the target, nothing binds a setter). `this.#email = v` on the Proxy throws
 * (Account); `this._email = v` writes through to the target, but GraphQL then reads `email`
 * through the `get` trap, which answers from its `given` map the unmasked email the library
 * read while storing (Profile). A retry replays the stored form, a plain object whose `email`
 * is writable data: the interceptor masks it.
 *
 * Expected: "The first call gets the resolver's own value" and "the resolver's value is not
 * changed: the first answer is it, seen through a Proxy that answers those fields; its class,
 * keys, getters and methods [...] are its own" (docs/guides/graphql.md, "What is stored, and
 * replayed"); first answer and replay the same bytes but the replay marker: the email masked
 * at the first answer, as on its replay and without the library.
 *
 * Controls: the same account with `email` as plain data (nothing is replaced, no Proxy): the
 * first answer and its replay are masked; the getter account without `@Idempotent()`: masked.
 * All pass on both drivers; so does the getter account's replay.
 *
 * Severity: high (a committed mutation's first answer is an error the client cannot tell from
 * a failure; or a personal datum the app masks is sent in clear, on the first answer only,
 * the one a client normally sees; either way the first answer and its replay differ).
 *
 * Fixed: what an outer layer writes through the first answer's Proxy goes to the value (its
 * setter run on the value itself) and is what is read from then on (`over`'s set trap).
 */
let pool: Pool;

const EMAIL = 'ada.lovelace@example.com';
const MASKED = 'a***@example.com';

@ObjectType()
class Account {
  @Field(() => Int)
  id: number;

  @Field()
  name: string;

  #email: string;

  @Field()
  get email(): string {
    return this.#email;
  }

  set email(value: string) {
    this.#email = value;
  }

  constructor(id: number, name: string, email: string) {
    this.id = id;
    this.name = name;
    this.#email = email;
  }
}

/** The same, its state a TypeScript `private` (a plain property), not an ES `#private` field. */
@ObjectType()
class Profile {
  @Field(() => Int)
  id: number;

  @Field()
  name: string;

  private _email: string;

  @Field()
  get email(): string {
    return this._email;
  }

  set email(value: string) {
    this._email = value;
  }

  constructor(id: number, name: string, email: string) {
    this.id = id;
    this.name = name;
    this._email = email;
  }
}

/** The same, its email plain data: no getter, nothing the library replaces. */
@ObjectType()
class Member {
  @Field(() => Int)
  id: number;

  @Field()
  name: string;

  @Field()
  email: string;

  constructor(id: number, name: string, email: string) {
    this.id = id;
    this.name = name;
    this.email = email;
  }
}

/** The app's global masking interceptor, outside every resolver's own. */
@Injectable()
class MaskEmails implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      map((value: unknown) => {
        const account = value as { email?: unknown } | null;
        if (typeof account === 'object' && account && typeof account.email === 'string') {
          account.email = account.email.replace(/^(.)[^@]*/, '$1***');
        }
        return value;
      }),
    );
  }
}

async function insert(name: string): Promise<number> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO accounts (name) VALUES ($1) RETURNING id',
    [name],
  );
  return rows[0].id;
}

@Resolver()
class AccountsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Account)
  @Idempotent()
  async createAccount(@Args('name') name: string): Promise<Account> {
    return new Account(await insert(name), name, EMAIL);
  }

  /** The same, without @Idempotent(): what the app answers without the library. */
  @Mutation(() => Account)
  async createAccountUnkeyed(@Args('name') name: string): Promise<Account> {
    return new Account(await insert(name), name, EMAIL);
  }

  @Mutation(() => Profile)
  @Idempotent()
  async createProfile(@Args('name') name: string): Promise<Profile> {
    return new Profile(await insert(name), name, EMAIL);
  }

  @Mutation(() => Member)
  @Idempotent()
  async createMember(@Args('name') name: string): Promise<Member> {
    return new Member(await insert(name), name, EMAIL);
  }
}

function graphqlModule(driver: GraphqlDriverName) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
      })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
      });
}

describe.each(GRAPHQL_DRIVERS)(
  'adversary 65: an outer interceptor writing a getter field, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [AccountsResolver, { provide: APP_INTERCEPTOR, useClass: MaskEmails }],
      })
      class AccountsModule {}
      fixture = await startPoolApp(`adv65_outer_write_${driver}`, {
        module: AccountsModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE accounts (id serial PRIMARY KEY, name text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    const send = (key: string, query: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .timeout(5_000)
        .send({ query });
    const rows = async (name: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM accounts WHERE name = $1', [name])).rows[0]
          .count,
      );

    async function firstAndReplay(
      field: 'createAccount' | 'createProfile' | 'createMember',
      name: string,
    ) {
      const query = `mutation { ${field}(name: "${name}") { id name email } }`;
      const first = await send(name, query);
      const replay = await send(name, query);
      return { first: first.body as object, replay: replay.body as object, rows: await rows(name) };
    }

    const masked = (field: string, name: string) => ({
      data: { [field]: { id: expect.any(Number), name, email: MASKED } },
    });

    it('control: email as plain data: the first answer and its replay are masked', async () => {
      const name = `${driver}-member`;
      const { first, replay, rows } = await firstAndReplay('createMember', name);
      expect(first).toEqual(masked('createMember', name));
      expect(replay).toEqual({
        ...first,
        extensions: { idempotency: { replayed: ['createMember'] } },
      });
      expect(rows).toBe(1);
    });

    it('control: the getter account without @Idempotent(): masked', async () => {
      const name = `${driver}-unkeyed`;
      const answer = await send(
        name,
        `mutation { createAccountUnkeyed(name: "${name}") { id name email } }`,
      );
      expect(answer.body).toEqual(masked('createAccountUnkeyed', name));
    });

    it('email as a getter: the first answer is masked, as its replay is', async () => {
      const name = `${driver}-account`;
      const { first, replay, rows } = await firstAndReplay('createAccount', name);
      // The replay (a plain object, its email writable data) is masked.
      expect(replay).toEqual({
        ...masked('createAccount', name),
        extensions: { idempotency: { replayed: ['createAccount'] } },
      });
      expect(first).toEqual(masked('createAccount', name));
      expect(rows).toBe(1);
    });

    it('email as a getter over a TypeScript private: the first answer is masked, as its replay is', async () => {
      const name = `${driver}-profile`;
      const { first, replay, rows } = await firstAndReplay('createProfile', name);
      expect(replay).toEqual({
        ...masked('createProfile', name),
        extensions: { idempotency: { replayed: ['createProfile'] } },
      });
      expect(first).toEqual(masked('createProfile', name));
      expect(rows).toBe(1);
    });
  },
);
