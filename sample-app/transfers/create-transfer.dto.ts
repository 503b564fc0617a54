import { IsInt, IsString, Length, Max, Min } from 'class-validator';

/** `POST /transfers` body. Unknown fields are rejected by the app's ValidationPipe. */
export class CreateTransferDto {
  @IsInt()
  @Min(1)
  @Max(99_999_999)
  amount!: number;

  @IsString()
  @Length(1, 64)
  from!: string;

  @IsString()
  @Length(1, 64)
  to!: string;
}
