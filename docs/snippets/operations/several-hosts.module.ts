import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { postgresConnection } from 'nestjs-idempotency-pg';

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      // postgres://app@db1:5432,db2:5432/payments?target_session_attrs=read-write
      ...postgresConnection(process.env.DATABASE_URL!),
    }),
  ],
})
export class DatabaseModule {}
